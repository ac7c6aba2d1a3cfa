// Reading untrusted JSON text (json_reader.h): a strict RFC 8259 reader of our own that builds
// nlohmann's ordered value directly.
//
// Why not nlohmann's parser. Its DOM parser for ordered_json looks every new key up linearly
// in its object (O(n^2) for a 200k-token vocabulary) and has no depth limit; through its SAX
// interface it is linear, but its lexer alone took 0.19 s of o200k's 0.62 s load
// (docs/tokenizer.md, "Loading time"): it reads through an input adapter a byte at a time and
// copies every string into a token buffer before the value gets its own copy. This reader makes
// one pass over the bytes, validates a string's UTF-8 in place and appends its plain runs whole
// to the string it becomes, and reserves each object and list once, at its end.
//
// What it accepts is what nlohmann's strict parser accepts (JsonDifferential.* in
// tests/test_json_differential.cpp and tests/fuzz/fuzz_json.cpp check it against
// nlohmann::ordered_json::parse): an optional UTF-8 byte-order mark, then one value between
// spaces, tabs, CRs and LFs; strings of well-formed UTF-8 without control characters, whose
// escapes include \u surrogate pairs and no lone surrogate; numbers of RFC 8259's grammar (no
// leading zeros, no '+', no bare '.'), typed as nlohmann types them; true, false, null; no
// comments and no trailing commas. One difference: nlohmann's lexer takes a NUL byte for the
// end of the text (for C strings), and so accepts "[1]\0" with anything after it; RFC 8259
// does not, nor do we. On top of that, our limits: no repeated key in an object (nlohmann
// would keep the last), no nesting deeper than the limit (checked before the nested value is
// read), no number that is not a finite double. Every error names the byte it is at.
#include <algorithm>
#include <array>
#include <bit>
#include <clocale>
#include <cmath>
#include <cstring>
#include <deque>
#include <string_view>

#include "config/json_reader.h"
#include "config/huge_pages.h"
#include "config/read_file.h"
#include "config/utf8.h"

namespace wren {

namespace {

// Bytes a string copies as they are, without a look: printable ASCII but '"' and '\'.
// (Control characters, the two, and every byte of a multi-byte character stop the scan.)
constexpr auto kPlainByte = [] {
  std::array<bool, 256> plain{};
  for (int c = 0x20; c < 0x80; ++c) plain[size_t(c)] = c != '"' && c != '\\';
  return plain;
}();

// The length of the well-formed UTF-8 sequence at p (RFC 3629, table 3-7 of Unicode: no
// overlong form, no surrogate, nothing past U+10FFFF), or 0 when it is not one.
size_t utf8_sequence(const unsigned char* p, const unsigned char* end) {
  const unsigned char lead = *p;
  unsigned char low = 0x80, high = 0xBF;  // the range of the second byte
  size_t n = 0;
  if (lead >= 0xC2 && lead <= 0xDF) {
    n = 2;
  } else if (lead >= 0xE0 && lead <= 0xEF) {
    n = 3;
    if (lead == 0xE0) low = 0xA0;   // below: overlong
    if (lead == 0xED) high = 0x9F;  // above: UTF-16 surrogates
  } else if (lead >= 0xF0 && lead <= 0xF4) {
    n = 4;
    if (lead == 0xF0) low = 0x90;   // below: overlong
    if (lead == 0xF4) high = 0x8F;  // above: past U+10FFFF
  } else {
    return 0;
  }
  if (size_t(end - p) < n || p[1] < low || p[1] > high) return 0;
  for (size_t i = 2; i < n; ++i)
    if ((p[i] & 0xC0) != 0x80) return 0;
  return n;
}

// A byte as a message shows it: 'x' when printable ASCII, else its value (a message must stay
// valid UTF-8 whatever the text holds).
std::string shown_byte(unsigned char c) {
  if (c >= 0x20 && c < 0x7F) return std::string("'") + char(c) + "'";
  static const char* digits = "0123456789ABCDEF";
  return std::string("byte 0x") + digits[c >> 4] + digits[c & 15];
}

bool is_digit(unsigned char c) { return c >= '0' && c <= '9'; }

class StrictReader {
 public:
  StrictReader(std::string_view text, const std::string& origin, int max_depth)
      : begin_(reinterpret_cast<const unsigned char*>(text.data())), p_(begin_), end_(begin_ + text.size()),
        origin_(origin), max_depth_(max_depth) {}

  // The text's one value. nlohmann skips a byte-order mark at the very start (and refuses a
  // first byte 0xEF that does not begin one); so do we.
  Json document() {
    if (p_ < end_ && *p_ == 0xEF) {
      if (end_ - p_ < 3 || p_[1] != 0xBB || p_[2] != 0xBF) fail(p_, "invalid byte-order mark (must be EF BB BF)");
      p_ += 3;
    }
    skip_space();
    Json v = value(0);
    skip_space();
    if (p_ != end_) fail(p_, "unexpected " + shown_byte(*p_) + " after the value; expected the end of the text");
    return v;
  }

 private:
  // A value at p_ (spaces skipped), inside `depth` open lists and objects.
  Json value(int depth) {
    if (p_ == end_) fail(p_, "unexpected end of the text; expected a value");
    switch (*p_) {
      case '{': return object(depth + 1);
      case '[': return list(depth + 1);
      case '"': return Json(string());
      case 't': return literal("true", Json(true));
      case 'f': return literal("false", Json(false));
      case 'n': return literal("null", Json());
      default:
        if (*p_ == '-' || is_digit(*p_)) return number();
        fail(p_, "unexpected " + shown_byte(*p_) + "; expected a value");
    }
  }

  Json literal(std::string_view word, Json v) {
    if (size_t(end_ - p_) < word.size() || std::memcmp(p_, word.data(), word.size()) != 0)
      fail(p_, "invalid literal; expected " + std::string(word));
    p_ += word.size();
    return v;
  }

  // Elements wait on one stack shared by all open lists (elements_), and the list is reserved
  // and filled once, at its ']'. The stack is a deque: it grows by blocks that stay where they
  // are, where a vector doubling to o200k's 200k values would copy them into fresh pages at
  // each step (page faults were half of its load time: 3.5k fewer with the deque).
  Json list(int depth) {
    const size_t first = elements_.size();
    items(depth, ']', "after an element of a list", [&] { elements_.push_back(value(depth)); });
    Json done(Json::value_t::array);
    Json::array_t& values = done.get_ref<Json::array_t&>();
    values.reserve(elements_.size() - first);
    advise_huge_pages(values);
    std::move(elements_.begin() + std::ptrdiff_t(first), elements_.end(), std::back_inserter(values));
    elements_.resize(first);
    return done;
  }

  // Members wait the same way, as pairs of a key that can be moved (ordered_map's pair of a
  // const key would be copied, value and all, whenever the object grew). At the '}' the keys
  // are checked for a repeat and the object is made, reserved, by appending: ordered_map's
  // own insertion looks the key up linearly.
  Json object(int depth) {
    const unsigned char* open = p_;
    const size_t first = members_.size();
    items(depth, '}', "after a member of an object", [&] {
      if (p_ == end_ || *p_ != '"') fail(p_, "expected a key (a string) in an object");
      std::string key = string();
      skip_space();
      expect(':', "after a key");
      skip_space();
      Json v = value(depth);
      members_.emplace_back(std::move(key), std::move(v));
    });
    refuse_repeated_keys(first, open);
    Json done(Json::value_t::object);
    Json::object_t& members = done.get_ref<Json::object_t&>();
    members.reserve(members_.size() - first);
    advise_huge_pages(members);
    for (size_t i = first; i < members_.size(); ++i)
      members.emplace_back(std::move(members_[i].first), std::move(members_[i].second));
    members_.resize(first);
    return done;
  }

  // The items of the list or object whose bracket is at p_, `depth` levels deep, up to its
  // closing bracket: read_item at each, spaces around them, commas between them.
  template <typename ReadItem>
  void items(int depth, char close, const char* after_item, ReadItem read_item) {
    if (depth > max_depth_)
      refuse("nested deeper than " + std::to_string(max_depth_) + " levels at byte " + std::to_string(p_ - begin_));
    ++p_;
    skip_space();
    if (accept(close)) return;
    do {
      skip_space();
      read_item();
      skip_space();
    } while (accept(','));
    expect(close, after_item);
  }

  // An open-addressing table of the object's members, half full at most, probed by the hash
  // of each key in turn: O(n) once per object (sorting the keys took a third of o200k's parse).
  void refuse_repeated_keys(size_t first, const unsigned char* open) {
    const size_t n = members_.size() - first;
    if (n < 2) return;
    const size_t mask = std::bit_ceil(2 * n) - 1;
    slots_.clear();
    slots_.reserve(mask + 1);
    advise_huge_pages(slots_);
    slots_.assign(mask + 1, 0);  // 0 is empty, else 1 + the member's index
    for (size_t i = first; i < members_.size(); ++i) {
      const std::string& key = members_[i].first;
      size_t s = std::hash<std::string_view>{}(key) & mask;
      for (; slots_[s] != 0; s = (s + 1) & mask)
        if (members_[slots_[s] - 1].first == key)
          refuse("duplicate key " + json_value_text(Json(key)) + " in the object at byte " +
                 std::to_string(open - begin_));
      slots_[s] = i + 1;
    }
  }

  // A string's value, p_ at its opening quote; leaves p_ past the closing one. Plain bytes and
  // validated UTF-8 sequences are not copied one by one: a run of them is appended whole when
  // an escape or the closing quote ends it, so a string without escapes is copied once.
  std::string string() {
    const unsigned char* quote = p_++;
    const unsigned char* run = p_;
    std::string out;
    for (;;) {
      while (p_ < end_ && kPlainByte[*p_]) ++p_;
      if (p_ == end_) fail(quote, "a string that never ends");
      const unsigned char c = *p_;
      if (c == '"' || c == '\\') {
        out.append(reinterpret_cast<const char*>(run), size_t(p_ - run));
        if (c == '"') {
          ++p_;
          return out;
        }
        escape(out);
        run = p_;
      } else if (c < 0x20) {
        fail(p_, "control character " + shown_byte(c) + " in a string (it must be escaped)");
      } else {
        const size_t n = utf8_sequence(p_, end_);
        if (n == 0) fail(p_, "invalid UTF-8 at " + shown_byte(c) + " in a string");
        p_ += n;
      }
    }
  }

  // The escape at p_ (a backslash), appended to out as UTF-8.
  void escape(std::string& out) {
    const unsigned char* at = p_++;
    if (p_ == end_) fail(at, "a string that never ends");
    switch (*p_++) {
      case '"': out += '"'; break;
      case '\\': out += '\\'; break;
      case '/': out += '/'; break;
      case 'b': out += '\b'; break;
      case 'f': out += '\f'; break;
      case 'n': out += '\n'; break;
      case 'r': out += '\r'; break;
      case 't': out += '\t'; break;
      case 'u': append_utf8(out, code_point(at)); break;
      default:
        fail(at, "invalid escape: '\\' then " + shown_byte(p_[-1]) +
                     " (JSON has \\\" \\\\ \\/ \\b \\f \\n \\r \\t \\uXXXX)");
    }
  }

  // The code point of \uXXXX, p_ past its 'u': a high surrogate must be followed by
  // \u and a low one (the pair is one code point); a surrogate alone is refused.
  uint32_t code_point(const unsigned char* at) {
    const uint32_t unit = hex4(at);
    if (unit >= 0xDC00 && unit <= 0xDFFF) fail(at, "a low surrogate \\uDC00..\\uDFFF without a high one before it");
    if (unit < 0xD800 || unit > 0xDBFF) return unit;
    if (end_ - p_ < 2 || p_[0] != '\\' || p_[1] != 'u')
      fail(at, "a high surrogate \\uD800..\\uDBFF must be followed by a low one \\uDC00..\\uDFFF");
    p_ += 2;
    const uint32_t low = hex4(at);
    if (low < 0xDC00 || low > 0xDFFF)
      fail(at, "a high surrogate \\uD800..\\uDBFF must be followed by a low one \\uDC00..\\uDFFF");
    return 0x10000 + ((unit - 0xD800) << 10) + (low - 0xDC00);
  }

  uint32_t hex4(const unsigned char* at) {
    if (end_ - p_ < 4) fail(at, "\\u must be followed by four hex digits");
    uint32_t v = 0;
    for (int i = 0; i < 4; ++i, ++p_) {
      const unsigned char c = *p_;
      const int digit = is_digit(c) ? c - '0' : (c | 0x20) >= 'a' && (c | 0x20) <= 'f' ? (c | 0x20) - 'a' + 10 : -1;
      if (digit < 0) fail(at, "\\u must be followed by four hex digits");
      v = v * 16 + uint32_t(digit);
    }
    return v;
  }

  // A number of RFC 8259's grammar, typed as nlohmann types it: without fraction or exponent,
  // unsigned if it has no sign and fits 64 bits, signed if it is negative and fits int64;
  // anything else a double.
  Json number() {
    const unsigned char* start = p_;
    const bool negative = accept('-');
    if (p_ == end_ || !is_digit(*p_)) fail(start, "a number needs a digit after its '-'");
    uint64_t magnitude = 0;
    bool overflow = false;
    if (!accept('0')) {  // a leading zero stands alone: what follows "0" is not part of it
      for (; p_ < end_ && is_digit(*p_); ++p_)
        overflow |= __builtin_mul_overflow(magnitude, 10u, &magnitude) ||
                    __builtin_add_overflow(magnitude, uint64_t(*p_ - '0'), &magnitude);
    }
    bool integral = true;
    if (accept('.')) {
      integral = false;
      digits(start, "a number needs a digit after its '.'");
    }
    if (p_ < end_ && (*p_ == 'e' || *p_ == 'E')) {
      ++p_;
      integral = false;
      if (!accept('+')) accept('-');
      digits(start, "a number needs a digit in its exponent");
    }
    if (integral && !overflow) {
      if (!negative) return Json(magnitude);
      if (magnitude <= uint64_t(1) << 63) return Json(int64_t(0 - magnitude));  // C++20: two's complement
    }
    return Json(finite_double(start));
  }

  void digits(const unsigned char* start, const char* reason) {
    if (p_ == end_ || !is_digit(*p_)) fail(start, reason);
    while (p_ < end_ && is_digit(*p_)) ++p_;
  }

  // The double nlohmann would read (strtod, with the locale's decimal point as it does), and
  // an error where it is not finite: 1e400 is not a number we can hold.
  double finite_double(const unsigned char* start) {
    const size_t length = size_t(p_ - start);
    std::string text(reinterpret_cast<const char*>(start), length);
    const std::lconv* locale = std::localeconv();
    const char point = locale->decimal_point ? *locale->decimal_point : '.';
    if (point != '.') std::replace(text.begin(), text.end(), '.', point);
    const double v = std::strtod(text.c_str(), nullptr);
    if (!std::isfinite(v)) {
      const std::string shown(reinterpret_cast<const char*>(start), std::min<size_t>(length, 40));
      fail(start, "number " + shown + (length > 40 ? "..." : "") + " is out of the range of a double");
    }
    return v;
  }

  void skip_space() {
    while (p_ < end_ && (*p_ == ' ' || *p_ == '\n' || *p_ == '\r' || *p_ == '\t')) ++p_;
  }
  bool accept(char c) {
    if (p_ == end_ || *p_ != static_cast<unsigned char>(c)) return false;
    ++p_;
    return true;
  }
  void expect(char c, const char* where) {
    if (accept(c)) return;
    fail(p_, std::string("expected '") + c + "' " + where + ", got " +
                 (p_ == end_ ? std::string("the end of the text") : shown_byte(*p_)));
  }

  // A fault of the text: "origin: invalid JSON at byte N: reason".
  [[noreturn]] void fail(const unsigned char* at, const std::string& reason) const {
    throw ConfigError(origin_ + ": invalid JSON at byte " + std::to_string(at - begin_) + ": " + reason);
  }
  // A text that is JSON but beyond what we accept: "origin: message".
  [[noreturn]] void refuse(const std::string& message) const { throw ConfigError(origin_ + ": " + message); }

  const unsigned char* const begin_;
  const unsigned char* p_;
  const unsigned char* const end_;
  const std::string& origin_;
  const int max_depth_;
  std::deque<Json> elements_;                         // of the open lists, innermost last
  std::deque<std::pair<std::string, Json>> members_;  // of the open objects, innermost last
  std::vector<size_t> slots_;                          // refuse_repeated_keys' table
};

// The first characters of a value as JSON, at most `limit` of them, walking only as far as
// they reach: a value is never serialised whole (each level adds a character, so the walk
// is at most `limit` deep).
void render(const Json& v, std::string& out, size_t limit) {
  if (out.size() > limit) return;
  if (v.is_string()) {
    const std::string& s = v.get_ref<const std::string&>();
    out += Json(s.substr(0, limit + 1 - std::min(limit, out.size())))
               .dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  } else if (v.is_object() || v.is_array()) {
    const bool object = v.is_object();
    out += object ? '{' : '[';
    bool first = true;
    for (auto it = v.begin(); it != v.end() && out.size() <= limit; ++it, first = false) {
      if (!first) out += ',';
      if (object) {
        render(Json(it.key()), out, limit);
        out += ':';
      }
      render(*it, out, limit);
    }
    out += object ? '}' : ']';
  } else {
    out += v.dump();
  }
}

}  // namespace

std::string json_value_text(const Json& v) {
  constexpr size_t kShown = 60;
  std::string s;
  render(v, s, kShown);
  if (s.size() > kShown) {
    // Cut before a UTF-8 continuation byte, never inside a character: the message must stay
    // valid UTF-8 (the server sends it inside a JSON error body).
    size_t cut = kShown - 3;
    while (cut > 0 && (static_cast<unsigned char>(s[cut]) & 0xC0) == 0x80) --cut;
    s = s.substr(0, cut) + "...";
  }
  const char* type = v.is_null() ? "null" : v.is_boolean() ? "boolean" : v.is_number() ? "number"
                   : v.is_string() ? "string" : v.is_array() ? "list" : "object";
  return s + " (" + type + ")";
}

Json parse_json(std::string_view text, const std::string& origin, const JsonLimits& limits) {
  if (text.size() > limits.max_bytes)
    throw ConfigError(origin + ": " + std::to_string(text.size()) + " bytes is more than the limit of " +
                      std::to_string(limits.max_bytes) + " bytes for this file");
  return StrictReader(text, origin, limits.max_depth).document();
}

Json parse_json_file(const std::string& path, const JsonLimits& limits) {
  BoundedRead r = read_file_at_most(path, limits.max_bytes);
  if (r.status == ReadStatus::cannot_open) throw ConfigError(path + ": cannot open file");
  if (r.status == ReadStatus::too_large)
    throw ConfigError(path + ": larger than the limit of " + std::to_string(limits.max_bytes) +
                      " bytes for this file (not a JSON file of ours?)");
  return parse_json(r.bytes, path, limits);
}

}  // namespace wren
