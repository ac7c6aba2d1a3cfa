// Memory-mapped and pread-based file access (POSIX). Every system-call failure becomes an
// IoError carrying the path and strerror(errno).
#include "io/mapped_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <utility>

namespace wren {

namespace {

[[noreturn]] void fail(const std::string& path, const std::string& what) {
  throw IoError(path + ": " + what + ": " + std::strerror(errno));
}

// Opens `path` read-only and returns the descriptor and the size of the regular file behind it.
int open_regular(const std::string& path, uint64_t& size) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) fail(path, "cannot open");
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    int e = errno;
    ::close(fd);
    errno = e;
    fail(path, "cannot stat");
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    throw IoError(path + ": not a regular file");
  }
  size = uint64_t(st.st_size);
  return fd;
}

}  // namespace

MappedFile::MappedFile(const std::string& path) : path_(path) {
  uint64_t size = 0;
  int fd = open_regular(path, size);
  if (size > 0) {
    void* p = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
    if (p == MAP_FAILED) {
      int e = errno;
      ::close(fd);
      errno = e;
      fail(path, "cannot map " + std::to_string(size) + " bytes");
    }
    data_ = static_cast<const uint8_t*>(p);
    size_ = size;
  }
  ::close(fd);  // the mapping keeps the file alive
}

MappedFile::~MappedFile() { release(); }

MappedFile::MappedFile(MappedFile&& o) noexcept
    : data_(std::exchange(o.data_, nullptr)), size_(std::exchange(o.size_, 0)), path_(std::move(o.path_)) {}

MappedFile& MappedFile::operator=(MappedFile&& o) noexcept {
  if (this != &o) {
    release();
    data_ = std::exchange(o.data_, nullptr);
    size_ = std::exchange(o.size_, 0);
    path_ = std::move(o.path_);
  }
  return *this;
}

void MappedFile::release_pages(uint64_t offset, uint64_t n) const {
  if (!data_ || offset >= size_) return;
  n = std::min<uint64_t>(n, size_ - offset);
  const uint64_t page = uint64_t(::sysconf(_SC_PAGESIZE));
  const uint64_t first = (offset + page - 1) / page * page, last = (offset + n) / page * page;
  // The mapping is read-only and private: dropping its pages loses nothing.
  if (last > first) ::madvise(const_cast<uint8_t*>(data_) + first, last - first, MADV_DONTNEED);
}

void MappedFile::release() noexcept {
  if (data_) ::munmap(const_cast<uint8_t*>(data_), size_);
  data_ = nullptr;
  size_ = 0;
}

void MappedFile::advise_random() const {
  if (data_) ::madvise(const_cast<uint8_t*>(data_), size_, MADV_RANDOM);  // a hint; failure is harmless
}

FileReader::FileReader(const std::string& path) : path_(path) { fd_ = open_regular(path, size_); }

FileReader::~FileReader() {
  if (fd_ >= 0) ::close(fd_);
}

FileReader::FileReader(FileReader&& o) noexcept
    : fd_(std::exchange(o.fd_, -1)), size_(std::exchange(o.size_, 0)), path_(std::move(o.path_)) {}

FileReader& FileReader::operator=(FileReader&& o) noexcept {
  if (this != &o) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = std::exchange(o.fd_, -1);
    size_ = std::exchange(o.size_, 0);
    path_ = std::move(o.path_);
  }
  return *this;
}

void FileReader::read_at(uint64_t offset, void* dst, size_t n) const {
  if (fd_ < 0) throw IoError("read from a FileReader that has no file");
  if (offset > size_ || n > size_ - offset)
    throw IoError(path_ + ": read of " + std::to_string(n) + " bytes at offset " + std::to_string(offset) +
                  " is beyond the file size " + std::to_string(size_));
  auto* out = static_cast<uint8_t*>(dst);
  while (n > 0) {
    ssize_t got = ::pread(fd_, out, n, off_t(offset));
    if (got < 0) {
      if (errno == EINTR) continue;
      fail(path_, "read at offset " + std::to_string(offset));
    }
    if (got == 0) throw IoError(path_ + ": file ended at offset " + std::to_string(offset) + " (truncated while open?)");
    out += got;
    offset += uint64_t(got);
    n -= size_t(got);
  }
}

RowReader::RowReader(const std::string& path, uint64_t offset, uint64_t row_bytes, int64_t rows)
    : file_(path), offset_(offset), row_bytes_(row_bytes), rows_(rows) {
  // offset + rows * row_bytes <= size, without overflow.
  uint64_t total = 0;
  if (rows < 0 || __builtin_mul_overflow(uint64_t(rows), row_bytes, &total) || offset > file_.size() ||
      total > file_.size() - offset)
    throw IoError(path + ": table of " + std::to_string(rows) + " rows x " + std::to_string(row_bytes) +
                  " bytes at offset " + std::to_string(offset) + " does not fit in the file (" +
                  std::to_string(file_.size()) + " bytes)");
}

void RowReader::read_row(int64_t row, void* dst) const {
  if (row < 0 || row >= rows_)
    throw IoError(file_.path() + ": row " + std::to_string(row) + " out of range [0, " + std::to_string(rows_) + ")");
  file_.read_at(offset_ + uint64_t(row) * row_bytes_, dst, row_bytes_);
}

}  // namespace wren
