// config/: the whole of a file as bytes, the one reader every layer uses (config and
// tokenizer JSON, corpora, prompts). It lives at the bottom of the layers (config/ knows
// nothing) so that config/ and text/, which io/ builds on, can use it too.
#pragma once

#include <optional>
#include <string>

namespace wren {

// The file's bytes; std::nullopt when it cannot be opened or read (callers name the file and
// what they wanted it for in their own error).
std::optional<std::string> try_read_file(const std::string& path);

// The file's bytes; std::runtime_error "<path>: cannot open" when it cannot be read.
std::string read_file(const std::string& path);

}  // namespace wren
