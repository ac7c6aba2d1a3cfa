#include "config/read_file.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <stdexcept>

#include "config/huge_pages.h"

namespace wren {

std::optional<std::string> try_read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return std::nullopt;
  std::ostringstream ss;
  ss << in.rdbuf();
  if (in.bad()) return std::nullopt;
  return std::move(ss).str();
}

std::string read_file(const std::string& path) {
  std::optional<std::string> bytes = try_read_file(path);
  if (!bytes) throw std::runtime_error(path + ": cannot open");
  return std::move(*bytes);
}

BoundedRead read_file_at_most(const std::string& path, uint64_t max_bytes) {
  BoundedRead out;
  const bool in_stdin = path == "-";
  std::unique_ptr<std::FILE, int (*)(std::FILE*)> f(in_stdin ? stdin : std::fopen(path.c_str(), "rb"),
                                                    in_stdin ? [](std::FILE*) { return 0; } : &std::fclose);
  if (!f) return {ReadStatus::cannot_open, {}};
  constexpr size_t kChunk = size_t(1) << 16;
  // A regular file says its size: room for all of it (and the last, short chunk) at once. A
  // string that doubles as it fills copies the bytes again at each step into fresh pages,
  // which took 60 ms of a 10 MB tokenizer.json's load; what a pipe sends still grows so.
  std::error_code ec;
  const uint64_t size = in_stdin ? 0 : std::filesystem::file_size(path, ec);
  if (!in_stdin && !ec) {
    out.bytes.reserve(size_t(std::min(size, max_bytes)) + kChunk);
    advise_huge_pages(out.bytes);
  }
  for (;;) {
    const size_t at = out.bytes.size();
    out.bytes.resize(at + kChunk);
    const size_t n = std::fread(out.bytes.data() + at, 1, kChunk, f.get());
    out.bytes.resize(at + n);
    if (out.bytes.size() > max_bytes) return {ReadStatus::too_large, {}};
    if (n < kChunk) break;
  }
  if (std::ferror(f.get())) return {ReadStatus::cannot_open, {}};
  return out;
}

std::string read_file_bounded(const std::string& path, uint64_t max_bytes, const std::string& what) {
  BoundedRead r = read_file_at_most(path, max_bytes);
  if (r.status == ReadStatus::cannot_open) throw std::runtime_error(path + ": cannot open");
  if (r.status == ReadStatus::too_large)
    throw std::runtime_error(path + ": larger than the limit of " + std::to_string(max_bytes) + " bytes for " + what);
  return std::move(r.bytes);
}

std::string read_text_input(const std::string& path) {
  return read_file_bounded(path, kMaxTextInput, "a text input");
}

}  // namespace wren
