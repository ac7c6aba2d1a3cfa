// io/: the two ways we read weight files. MappedFile maps a whole file read-only: pages are
// read from storage only when touched, so a 20 GB file costs nothing until it is used.
// FileReader reads byte ranges with pread, for files we must never map or load whole (the
// engram table file, ~3 GB, read a few rows per token). Both throw IoError naming the file.
#pragma once

#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>

namespace wren {

// A failure reading or writing a file: "path: what went wrong".
struct IoError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// Read-only memory map of a whole file. Move-only; unmaps on destruction. An empty file maps
// to {nullptr, 0}. The file must not be truncated while mapped (reads past the new end fault).
class MappedFile {
 public:
  MappedFile() = default;
  explicit MappedFile(const std::string& path);
  ~MappedFile();
  MappedFile(MappedFile&& o) noexcept;
  MappedFile& operator=(MappedFile&& o) noexcept;
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  const std::string& path() const { return path_; }
  // Tells the kernel accesses are random (no read-ahead): for tables read a few rows at a time.
  void advise_random() const;
  // Drops the pages wholly inside [offset, offset + n) from this process (they stay in the
  // page cache; touching them again reads them back): streaming readers keep their resident
  // memory bounded however large the file.
  void release_pages(uint64_t offset, uint64_t n) const;

 private:
  void release() noexcept;
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
  std::string path_;
};

// A file opened for positioned reads. Move-only; closes on destruction.
class FileReader {
 public:
  FileReader() = default;
  explicit FileReader(const std::string& path);
  ~FileReader();
  FileReader(FileReader&& o) noexcept;
  FileReader& operator=(FileReader&& o) noexcept;
  FileReader(const FileReader&) = delete;
  FileReader& operator=(const FileReader&) = delete;

  uint64_t size() const { return size_; }
  const std::string& path() const { return path_; }
  // Reads exactly n bytes at `offset` into dst; a range beyond the end or a short read throws.
  void read_at(uint64_t offset, void* dst, size_t n) const;

 private:
  int fd_ = -1;
  uint64_t size_ = 0;
  std::string path_;
};

// Rows of a 2-D table stored contiguously in a file: row r is the row_bytes bytes at
// offset + r * row_bytes. Reads one row with one pread and never touches the rest.
class RowReader {
 public:
  RowReader() = default;
  // Checks that all `rows` rows lie inside the file.
  RowReader(const std::string& path, uint64_t offset, uint64_t row_bytes, int64_t rows);

  int64_t rows() const { return rows_; }
  uint64_t row_bytes() const { return row_bytes_; }
  void read_row(int64_t row, void* dst) const;  // dst holds row_bytes() bytes

 private:
  FileReader file_;
  uint64_t offset_ = 0, row_bytes_ = 0;
  int64_t rows_ = 0;
};

}  // namespace wren
