// text/: the Unicode the tokenizer needs and nothing more: UTF-8 decoding that never fails,
// the general-category classes pre-tokenizer regexes ask about (\p{L}, \p{N}, ...), White_Space,
// canonical composition (NFC), and GPT-2's byte <-> printable-character map for byte-level BPE.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "config/utf8.h"

namespace wren::text {

// General category, folded to the classes tokenizer regexes distinguish.
enum class Category : uint8_t { other, Lu, Ll, Lt, Lm, Lo, M, N };

Category category(char32_t cp);
inline bool is_letter(char32_t cp) {  // \p{L}
  Category c = category(cp);
  return c >= Category::Lu && c <= Category::Lo;
}
inline bool is_number(char32_t cp) { return category(cp) == Category::N; }  // \p{N}
bool is_white_space(char32_t cp);                                           // \s (Unicode White_Space)

// Decodes one code point at s[i], advancing i. Invalid or truncated UTF-8 yields one byte,
// decoded as U+FFFD, so that every byte of the input belongs to exactly one "code point" and
// spans can be cut anywhere without losing bytes.
char32_t next_code_point(std::string_view s, size_t& i);
using wren::append_utf8;  // config/utf8.h

// Unicode normalization form C (canonical decomposition, canonical ordering, canonical
// composition; Hangul by formula). Invalid UTF-8 bytes pass through unchanged.
std::string nfc(std::string_view s);
// Form D: canonical decomposition and ordering only.
std::string nfd(std::string_view s);

// Repairs UTF-8: each maximal ill-formed subpart becomes U+FFFD (the Unicode "best practice",
// which Rust's String::from_utf8_lossy follows).
std::string utf8_lossy(std::string_view s);
void utf8_lossy_append(std::string_view s, std::string& out);  // the same, appended to out
// Length of the longest prefix of s that ends on a code point boundary and holds no
// incomplete sequence at its end (bytes that could still become a valid character are held).
size_t utf8_complete_prefix(std::string_view s);

// GPT-2's bytes_to_unicode: every byte as a printable character (printable Latin-1 bytes as
// themselves, the rest as U+0100 + n in byte order). Returns the character's UTF-8.
const std::string& byte_to_piece(uint8_t b);
// The byte a byte-level character stands for, or -1 if cp is not one of the 256.
int piece_char_to_byte(char32_t cp);
// The bytes a byte-level string stands for: each character mapped back to its byte, or, if
// some character is not one of the 256, the string's own UTF-8 (as Hugging Face's ByteLevel
// decoder does, which matters for added tokens such as "<|im start|>").
std::string byte_level_bytes(std::string_view text);

}  // namespace wren::text
