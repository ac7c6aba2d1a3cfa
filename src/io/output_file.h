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

  void write(const void* data, size_t n);  // buffered
  uint64_t written() const { return written_; }
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
