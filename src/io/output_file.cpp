// Crash-safe file output: write to path.tmp, fsync, rename (POSIX rename is atomic within a
// file system), fsync the directory.
#include "io/output_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <optional>
#include <utility>

#include "io/mapped_file.h"

namespace wren {

namespace {

constexpr size_t kBufferBytes = size_t(1) << 20;

[[noreturn]] void fail(const std::string& path, const std::string& what) {
  throw IoError(path + ": " + what + ": " + std::strerror(errno));
}

// All n bytes at p to fd, at the file offset `at` if given, else at its position (a write may
// take fewer, or be interrupted); tmp names it in errors.
void write_all(int fd, const uint8_t* p, size_t n, const std::string& tmp, std::optional<uint64_t> at = {}) {
  while (n > 0) {
    const ssize_t put = at ? ::pwrite(fd, p, n, off_t(*at)) : ::write(fd, p, n);
    if (put < 0) {
      if (errno == EINTR) continue;
      fail(tmp, "write");
    }
    p += put;
    n -= size_t(put);
    if (at) *at += uint64_t(put);
  }
}

}  // namespace

OutputFile::OutputFile(std::string path) : path_(std::move(path)), tmp_(path_ + ".tmp") {
  fd_ = ::open(tmp_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd_ < 0) fail(tmp_, "cannot create");
  buffer_.reserve(kBufferBytes);
}

OutputFile::~OutputFile() {
  if (fd_ >= 0) {
    ::close(fd_);
    ::unlink(tmp_.c_str());
  }
}

void OutputFile::write(const void* data, size_t n) {
  if (fd_ < 0) throw IoError(path_ + ": write after commit");
  auto* p = static_cast<const uint8_t*>(data);
  written_ += n;
  if (buffer_.size() + n <= kBufferBytes) {
    buffer_.insert(buffer_.end(), p, p + n);
    return;
  }
  flush();
  write_all(fd_, p, n, tmp_);  // large pieces go straight to the file
}

void OutputFile::write_at(uint64_t offset, const void* data, size_t n) {
  if (fd_ < 0) throw IoError(path_ + ": write after commit");
  write_all(fd_, static_cast<const uint8_t*>(data), n, tmp_, offset);
}

void OutputFile::skip(uint64_t n) {
  if (fd_ < 0) throw IoError(path_ + ": write after commit");
  flush();
  if (::lseek(fd_, off_t(n), SEEK_CUR) < 0) fail(tmp_, "seek");
  written_ += n;
}

void OutputFile::flush() {
  write_all(fd_, buffer_.data(), buffer_.size(), tmp_);
  buffer_.clear();
}

void OutputFile::commit() {
  if (fd_ < 0) throw IoError(path_ + ": committed twice");
  flush();
  if (::fsync(fd_) != 0) fail(tmp_, "fsync");
  int fd = std::exchange(fd_, -1);
  if (::close(fd) != 0) {
    ::unlink(tmp_.c_str());
    fail(tmp_, "close");
  }
  if (::rename(tmp_.c_str(), path_.c_str()) != 0) {
    int e = errno;
    ::unlink(tmp_.c_str());
    errno = e;
    fail(path_, "cannot rename " + tmp_ + " to it");
  }
  std::filesystem::path parent = std::filesystem::path(path_).parent_path();
  fsync_directory(parent.empty() ? "." : parent.string());
}

void write_file_atomic(const std::string& path, std::string_view contents) {
  OutputFile out(path);
  out.write(contents.data(), contents.size());
  out.commit();
}

void fsync_directory(const std::string& dir) {
  int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) fail(dir, "cannot open directory");
  int rc = ::fsync(fd);
  int e = errno;
  ::close(fd);
  errno = e;
  if (rc != 0 && errno != EINVAL) fail(dir, "fsync of directory");  // some file systems cannot sync directories
}

}  // namespace wren
