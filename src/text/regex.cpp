// text/: PCRE2 behind Regex (see regex.h).
#define PCRE2_CODE_UNIT_WIDTH 8
#include "text/regex.h"

#include <pcre2.h>

#include "text/unicode.h"

namespace wren::text {

struct Regex::Compiled {
  pcre2_code* code = nullptr;
  ~Compiled() { pcre2_code_free(code); }
};

namespace {

// Per thread: match data for one pair of offsets and a JIT stack large enough for long runs
// of repeated classes (the default 32 KiB is not, for \s+(?!\S) over a megabyte of spaces).
struct MatchState {
  pcre2_match_data* data = pcre2_match_data_create(1, nullptr);
  pcre2_jit_stack* stack = pcre2_jit_stack_create(32 * 1024, 8 * 1024 * 1024, nullptr);
  pcre2_match_context* context = pcre2_match_context_create(nullptr);
  MatchState() { pcre2_jit_stack_assign(context, nullptr, stack); }
  ~MatchState() {
    pcre2_match_context_free(context);
    pcre2_jit_stack_free(stack);
    pcre2_match_data_free(data);
  }
};

MatchState& match_state() {
  thread_local MatchState state;
  return state;
}

std::string pcre2_message(int code) {
  PCRE2_UCHAR buffer[256];
  pcre2_get_error_message(code, buffer, sizeof buffer);
  return reinterpret_cast<const char*>(buffer);
}

// Oniguruma's Unicode \w: letters, marks, numbers and connector punctuation (PCRE2's UCP \w
// leaves out the marks and most numbers).
constexpr const char* kWord = "\\p{L}\\p{M}\\p{N}\\p{Pc}";

// {Name} of \p{Name} as Oniguruma reads it: a script name means the Script property, which
// PCRE2 spells sc:Name (its bare \p{Han} is Script_Extensions, which also holds punctuation
// such as U+3010). General categories (one or two letters, L&) and PCRE2's own X.. stay.
std::string script_property(std::string_view name) {
  std::string_view bare = name.substr(!name.empty() && name[0] == '^');
  bool category = bare.size() <= 2 || bare == "L&" || bare == "Any" ||
                  (bare.size() == 3 && bare[0] == 'X') || bare.find_first_of(":=") != std::string_view::npos;
  if (category) return "{" + std::string(name) + "}";
  return "{" + std::string(name.substr(0, name.size() - bare.size())) + "sc:" + std::string(bare) + "}";
}

}  // namespace

std::string Regex::translate(std::string_view p, bool scripts) {
  std::string out;
  bool in_class = false;
  for (size_t i = 0; i < p.size(); ++i) {
    char c = p[i];
    if (c == '\\' && i + 1 < p.size()) {
      char e = p[++i];
      size_t close = p.find('}', i);
      if (scripts && (e == 'p' || e == 'P') && i + 1 < p.size() && p[i + 1] == '{' && close != std::string_view::npos) {
        out += '\\';
        out += e;
        out += script_property(p.substr(i + 2, close - i - 2));
        i = close;
        continue;
      }
      if (e == 's') out += in_class ? "\\s\\x{85}" : "[\\s\\x{85}]";
      else if (e == 'S' && !in_class) out += "[^\\s\\x{85}]";
      else if (e == 'w') out += in_class ? kWord : "[" + std::string(kWord) + "]";
      else if (e == 'W' && !in_class) out += "[^" + std::string(kWord) + "]";
      else (out += '\\') += e;
      continue;
    }
    if (!in_class && c == '[') {
      in_class = true;
      out += c;
      // A ']' right after '[' or '[^' is a literal member, not the end of the class.
      if (i + 1 < p.size() && p[i + 1] == '^') out += p[++i];
      if (i + 1 < p.size() && p[i + 1] == ']') out += p[++i];
      continue;
    }
    if (in_class && c == '[' && i + 1 < p.size() && p[i + 1] == ':') {  // [:alpha:] inside a class
      size_t close = p.find(":]", i + 2);
      if (close != std::string_view::npos) {
        out.append(p.substr(i, close + 2 - i));
        i = close + 1;
        continue;
      }
    }
    if (in_class && c == ']') in_class = false;
    out += c;
  }
  return out;
}

Regex::Regex(std::string_view pattern) : pattern_(pattern), code_(std::make_unique<Compiled>()) {
  int error = 0;
  PCRE2_SIZE offset = 0;
  std::string translated;
  // A \p{Name} that is no script (a long category name, a binary property) compiles as written.
  for (bool scripts : {true, false}) {
    translated = translate(pattern, scripts);
    code_->code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(translated.data()), translated.size(),
                                PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF, &error, &offset, nullptr);
    if (code_->code) break;
  }
  if (!code_->code)
    throw RegexError("regex \"" + pattern_ + "\" does not compile: " + pcre2_message(error) + " (at offset " +
                     std::to_string(offset) + " of \"" + translated + "\")");
  // Without JIT (an unsupported CPU) PCRE2 still matches, only slower.
  pcre2_jit_compile(code_->code, PCRE2_JIT_COMPLETE);
}

Regex::Regex(Regex&&) noexcept = default;
Regex& Regex::operator=(Regex&&) noexcept = default;
Regex::~Regex() = default;

std::vector<std::pair<size_t, size_t>> Regex::find_all(std::string_view s) const {
  MatchState& st = match_state();
  auto subject = reinterpret_cast<PCRE2_SPTR>(s.data());
  std::vector<std::pair<size_t, size_t>> out;
  size_t start = 0;
  uint32_t options = 0;
  while (start <= s.size()) {
    int rc = pcre2_match(code_->code, subject, s.size(), start, options, st.data, st.context);
    if (rc == PCRE2_ERROR_NOMATCH) {
      if (options == 0) break;
      // No non-empty match at the end of an empty one: step one code point and go on.
      options = 0;
      if (start >= s.size()) break;
      next_code_point(s, start);
      continue;
    }
    if (rc < 0)
      throw RegexError("regex \"" + pattern_ + "\": matching failed: " + pcre2_message(rc));
    PCRE2_SIZE* ov = pcre2_get_ovector_pointer(st.data);
    out.emplace_back(size_t(ov[0]), size_t(ov[1]));
    start = ov[1];
    // After an empty match, look for a non-empty one at the same place first.
    options = ov[0] == ov[1] ? (PCRE2_NOTEMPTY_ATSTART | PCRE2_ANCHORED) : 0;
  }
  return out;
}

std::string Replacement::apply(std::string_view s) const {
  std::string out;
  size_t prev = 0;
  auto take = [&](size_t b, size_t e) {
    out.append(s.substr(prev, b - prev));
    out += content;
    prev = e;
  };
  if (regex) {
    for (auto [b, e] : regex->find_all(s)) take(b, e);
  } else {
    for (size_t p = s.find(literal); p != std::string_view::npos; p = s.find(literal, p + literal.size()))
      take(p, p + literal.size());
  }
  out.append(s.substr(prev));
  return out;
}

}  // namespace wren::text
