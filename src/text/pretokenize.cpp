// text/: hand-written matchers for the pre-tokenizer regexes (see pretokenize.h). Each
// alternative of each regex is a small function returning the end of its match or npos.
#include "text/pretokenize.h"

#include "text/unicode.h"

namespace wren::text {
namespace {

constexpr size_t npos = std::string_view::npos;

// A UTF-8 string read as code points on demand.
struct Text {
  std::string_view s;
  bool end(size_t i) const { return i >= s.size(); }
  // The code point at byte i and the byte after it; at the end, U+FFFFFFFF (in no class).
  char32_t at(size_t i, size_t& next) const {
    next = i;
    if (i >= s.size()) return 0xFFFFFFFF;
    return next_code_point(s, next);
  }
  char32_t at(size_t i) const {
    size_t n;
    return at(i, n);
  }
  // Skips a run of code points satisfying pred from i; returns the end of the run.
  template <typename Pred>
  size_t run(size_t i, Pred pred, size_t max_count = npos) const {
    size_t n = 0, next;
    while (n < max_count && !end(i) && pred(at(i, next))) {
      i = next;
      ++n;
    }
    return i;
  }
};

bool is_space(char32_t c) { return c != 0xFFFFFFFF && is_white_space(c); }
bool is_newline(char32_t c) { return c == '\r' || c == '\n'; }
bool is_l(char32_t c) { return c != 0xFFFFFFFF && is_letter(c); }
bool is_n(char32_t c) { return c != 0xFFFFFFFF && is_number(c); }
// [^\s\p{L}\p{N}]
bool is_other(char32_t c) { return c != 0xFFFFFFFF && !is_white_space(c) && !is_letter(c) && !is_number(c); }
// [^\r\n\p{L}\p{N}]
bool is_prefix(char32_t c) { return c != 0xFFFFFFFF && !is_newline(c) && !is_letter(c) && !is_number(c); }
// [\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}] and [\p{Ll}\p{Lm}\p{Lo}\p{M}]
bool is_upper_like(char32_t c) {
  if (c == 0xFFFFFFFF) return false;
  Category k = category(c);
  return k == Category::Lu || k == Category::Lt || k == Category::Lm || k == Category::Lo || k == Category::M;
}
bool is_lower_like(char32_t c) {
  if (c == 0xFFFFFFFF) return false;
  Category k = category(c);
  return k == Category::Ll || k == Category::Lm || k == Category::Lo || k == Category::M;
}

// 's|'t|'re|'ve|'m|'ll|'d, optionally ignoring case. Unicode case folding (as (?i) does in
// Oniguruma and PCRE2) maps one non-ASCII character onto these letters: U+017F LONG S -> s.
size_t contraction(const Text& t, size_t p, bool ignore_case) {
  if (t.end(p) || t.s[p] != '\'') return npos;
  if (ignore_case && t.s.substr(p + 1, 2) == "\xC5\xBF") return p + 3;  // 'ſ
  auto lower = [&](size_t i) -> char {
    if (t.end(i)) return 0;
    char c = t.s[i];
    return ignore_case && c >= 'A' && c <= 'Z' ? char(c - 'A' + 'a') : c;
  };
  char a = lower(p + 1), b = lower(p + 2);
  if (a == 's' || a == 't' || a == 'm' || a == 'd') return p + 2;
  if ((a == 'r' || a == 'v') && b == 'e') return p + 3;
  if (a == 'l' && b == 'l') return p + 3;
  return npos;
}

// ` ?X+` where X is a class: an optional ASCII space, then one or more X.
template <typename Pred>
size_t space_then_run(const Text& t, size_t p, Pred pred) {
  size_t q = (!t.end(p) && t.s[p] == ' ') ? p + 1 : p;
  size_t next;
  if (pred(t.at(q, next))) return t.run(q, pred);
  return npos;  // without the space, ' ' itself is in none of the classes used here
}

// [^\r\n\p{L}\p{N}]?\p{L}+
size_t prefixed_letters(const Text& t, size_t p) {
  size_t next;
  char32_t c = t.at(p, next);
  if (is_prefix(c) && is_l(t.at(next))) return t.run(next, is_l);
  if (is_l(c)) return t.run(p, is_l);
  return npos;
}

// \s*[\r\n]+ : the whitespace run up to and including its last line break.
size_t spaces_to_newline(const Text& t, size_t p) {
  size_t i = p, next, last = npos;
  while (!t.end(i)) {
    char32_t c = t.at(i, next);
    if (!is_space(c)) break;
    if (is_newline(c)) last = next;
    i = next;
  }
  return last;
}

// \s+(?!\S) then \s+ : a whitespace run, less its last character when a non-space follows
// (so that the last space can join the next word), unless that would leave nothing.
size_t spaces(const Text& t, size_t p, bool lookahead_only) {
  size_t next;
  if (!is_space(t.at(p, next))) return npos;
  size_t e = t.run(p, is_space);
  if (t.end(e)) return e;
  size_t last = p, i = p;  // start of the run's last character
  while (i < e) {
    last = i;
    t.at(i, i);
  }
  if (last > p) return last;
  return lookahead_only ? npos : e;
}


size_t match_gpt2(const Text& t, size_t p) {
  size_t e;
  if ((e = contraction(t, p, false)) != npos) return e;
  if ((e = space_then_run(t, p, is_l)) != npos) return e;
  if ((e = space_then_run(t, p, is_n)) != npos) return e;
  if ((e = space_then_run(t, p, is_other)) != npos) return e;
  return spaces(t, p, false);
}

// ` ?[^\s\p{L}\p{N}]+` followed by any run of `tail` characters.
template <typename Pred>
size_t punctuation(const Text& t, size_t p, Pred tail) {
  size_t e = space_then_run(t, p, is_other);
  return e == npos ? npos : t.run(e, tail);
}

size_t match_cl100k(const Text& t, size_t p, size_t max_digits) {
  size_t e;
  if ((e = contraction(t, p, true)) != npos) return e;
  if ((e = prefixed_letters(t, p)) != npos) return e;
  if (is_n(t.at(p))) return t.run(p, is_n, max_digits);
  if ((e = punctuation(t, p, is_newline)) != npos) return e;
  if ((e = spaces_to_newline(t, p)) != npos) return e;
  return spaces(t, p, false);
}

// o200k's word alternatives, from q (after the optional prefix character):
//   upper_first: [U]*[L]+   else   [U]+[L]*     (U = Lu Lt Lm Lo M, L = Ll Lm Lo M)
size_t cased_word(const Text& t, size_t q, bool upper_first) {
  size_t u_end = t.run(q, is_upper_like);
  if (!upper_first) return u_end == q ? npos : t.run(u_end, is_lower_like);
  if (is_lower_like(t.at(u_end))) return t.run(u_end, is_lower_like);
  // [U]* gives back characters until one is also in L; [L]+ then takes just that one
  // (the characters after it in the run are U but not L).
  size_t end = npos, i = q, next;
  while (i < u_end) {
    if (is_lower_like(t.at(i, next))) end = next;
    i = next;
  }
  return end;
}

size_t o200k_word(const Text& t, size_t p, bool upper_first) {
  size_t next, e = npos;
  if (is_prefix(t.at(p, next))) e = cased_word(t, next, upper_first);
  if (e == npos) e = cased_word(t, p, upper_first);
  if (e == npos) return npos;
  size_t c = contraction(t, e, true);
  return c != npos ? c : e;
}

size_t match_o200k(const Text& t, size_t p) {
  size_t e;
  if ((e = o200k_word(t, p, true)) != npos) return e;
  if ((e = o200k_word(t, p, false)) != npos) return e;
  if (is_n(t.at(p))) return t.run(p, is_n, 3);
  if ((e = punctuation(t, p, [](char32_t c) { return is_newline(c) || c == '/'; })) != npos) return e;
  if ((e = spaces_to_newline(t, p)) != npos) return e;
  return spaces(t, p, false);
}

struct Known { const char* regex; SplitPattern pattern; };
constexpr Known kKnown[] = {
    {R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)", SplitPattern::gpt2},
    {R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)",
     SplitPattern::cl100k},
    {R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)",
     SplitPattern::qwen2},
    {R"([^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+)",
     SplitPattern::o200k},
};

}  // namespace

std::optional<SplitPattern> recognise_split_pattern(std::string_view regex) {
  for (const Known& k : kKnown)
    if (regex == k.regex) return k.pattern;
  return std::nullopt;
}

const char* split_pattern_regex(SplitPattern p) {
  for (const Known& k : kKnown)
    if (k.pattern == p) return k.regex;
  return "";
}

size_t match_split_pattern(SplitPattern pattern, std::string_view s, size_t p) {
  Text t{s};
  size_t e = npos;
  switch (pattern) {
    case SplitPattern::gpt2: e = match_gpt2(t, p); break;
    case SplitPattern::cl100k: e = match_cl100k(t, p, 3); break;
    case SplitPattern::qwen2: e = match_cl100k(t, p, 1); break;
    case SplitPattern::o200k: e = match_o200k(t, p); break;
  }
  return e == npos ? p : e;
}

std::vector<Span> split_by_pattern(SplitPattern pattern, std::string_view s) {
  std::vector<Span> out;
  size_t gap = 0, p = 0;
  while (p < s.size()) {
    size_t e = match_split_pattern(pattern, s, p);
    if (e == p) {  // no match here: step one code point (every pattern above matches anywhere)
      next_code_point(s, p);
      continue;
    }
    if (gap < p) out.push_back({gap, p, false});
    out.push_back({p, e, true});
    gap = p = e;
  }
  if (gap < s.size()) out.push_back({gap, s.size(), false});
  return out;
}

}  // namespace wren::text
