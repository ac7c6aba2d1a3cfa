// config/: the whole of a file as bytes, the one reader every layer uses (config and
// tokenizer JSON, corpora, prompts). It lives at the bottom of the layers (config/ knows
// nothing) so that config/ and text/, which io/ builds on, can use it too.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace wren {

// The file's bytes; std::nullopt when it cannot be opened or read (callers name the file and
// what they wanted it for in their own error).
std::optional<std::string> try_read_file(const std::string& path);

// The file's bytes; std::runtime_error "<path>: cannot open" when it cannot be read.
std::string read_file(const std::string& path);

// The file's bytes, read by chunks and never more than max_bytes + 1 of them, so that a
// link to /dev/zero or a fifo that never ends costs max_bytes of memory at most. "-" is stdin.
enum class ReadStatus { ok, cannot_open, too_large };
struct BoundedRead {
  ReadStatus status = ReadStatus::ok;
  std::string bytes;
};
BoundedRead read_file_at_most(const std::string& path, uint64_t max_bytes);

// read_file_at_most, or std::runtime_error "<path>: cannot open" / "<path>: larger than the
// limit of N bytes (what)".
std::string read_file_bounded(const std::string& path, uint64_t max_bytes, const std::string& what);

// A text a command reads (a prompt, a corpus to score): the file, or stdin for "-", at most
// kMaxTextInput bytes (Linux caps one command-line argument at 128 KiB; files have no such cap).
inline constexpr uint64_t kMaxTextInput = uint64_t(1) << 30;
std::string read_text_input(const std::string& path);

}  // namespace wren
