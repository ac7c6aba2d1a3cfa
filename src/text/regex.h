// text/: a compiled regular expression for pre-tokenizer Split patterns, run by PCRE2.
//
// Hugging Face compiles tokenizer.json regexes with Oniguruma: Perl syntax, Unicode classes
// (\p{L}, \p{N}, \p{Lu}, ...), lookaround, leftmost-first alternation, and Unicode case folding
// under (?i) ('ſ' U+017F folds to 's'). PCRE2 with PCRE2_UTF | PCRE2_UCP gives the same
// semantics for these patterns, and its JIT makes it fast. The differences are bridged here:
// Oniguruma's \s is Unicode White_Space, which holds U+0085 (NEL), PCRE2's does not, and its \w
// is letters, marks, numbers and connector punctuation, PCRE2's only letters, digits and '_'
// (translate() rewrites both), \p{Han} is the Script property there, Script_Extensions in
// PCRE2 (translate() writes \p{sc:Han}), and text may be invalid UTF-8 (PCRE2_MATCH_INVALID_UTF: no
// match crosses a bad byte).
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace wren::text {

// A pattern PCRE2 refuses: the message names the pattern, PCRE2's reason and the offset.
struct RegexError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

class Regex {
 public:
  explicit Regex(std::string_view pattern);  // throws RegexError
  Regex(Regex&&) noexcept;
  Regex& operator=(Regex&&) noexcept;
  ~Regex();

  // Every match [begin, end), leftmost first, not overlapping; after an empty match the next
  // one starts at least one code point later (as Oniguruma's and Rust's find_iter do).
  std::vector<std::pair<size_t, size_t>> find_all(std::string_view s) const;
  const std::string& pattern() const { return pattern_; }

  // The pattern with \s, \S, \w and \W as Oniguruma means them; exposed for tests.
  // With scripts, \p{Han} means the Script property (PCRE2: \p{sc:Han}), as in Oniguruma.
  static std::string translate(std::string_view pattern, bool scripts = true);

 private:
  struct Compiled;
  std::string pattern_;
  std::unique_ptr<Compiled> code_;
};

// Hugging Face's Replace (a normalizer and a decoder): every non-overlapping match of a literal
// or a regex, leftmost first, becomes `content`.
struct Replacement {
  std::string literal;                // a literal pattern (not empty), or
  std::shared_ptr<const Regex> regex;  // a regex pattern
  std::string content;
  std::string apply(std::string_view s) const;
};

}  // namespace wren::text
