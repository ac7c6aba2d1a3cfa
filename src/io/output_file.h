// io/: writing files so that a crash never leaves a half-written one under the real name.
// Bytes go to "path.tmp"; commit() flushes them to storage (fsync), renames the file over
// `path` and syncs the directory. An OutputFile destroyed without commit() removes its .tmp.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace wren {

class OutputFile {
 public:
  explicit OutputFile(std::string path);  // creates (truncates) path.tmp
  ~OutputFile();
  OutputFile(const OutputFile&) = delete;
  OutputFile& operator=(const OutputFile&) = delete;

  void write(const void* data, size_t n);  // buffered, at the current position
  // Bytes at `offset`, ahead of the current position (unbuffered pwrite; the position stays):
  // a region another part of the output fills while the sequential writes are elsewhere.
  void write_at(uint64_t offset, const void* data, size_t n);
  void skip(uint64_t n);  // moves the position past n bytes that write_at filled
  uint64_t written() const { return written_; }  // the current position
  void commit();  // flush, fsync, close, rename path.tmp -> path, fsync the directory

  const std::string& path() const { return path_; }

 private:
  void flush();
  std::string path_, tmp_;
  int fd_ = -1;
  std::vector<uint8_t> buffer_;
  uint64_t written_ = 0;
};

// The whole of `contents` as the file `path`, through OutputFile.
void write_file_atomic(const std::string& path, std::string_view contents);

// fsync of a directory, so that renames and new entries in it survive a crash.
void fsync_directory(const std::string& dir);

}  // namespace wren
