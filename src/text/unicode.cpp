// text/: Unicode tables and algorithms for the tokenizer (see unicode.h). The tables are
// generated (scripts/tokenizer-fixtures/gen_*); this file only searches and applies them.
#include "text/unicode.h"

#include <algorithm>
#include <array>
#include <vector>

namespace wren::text {
namespace {

struct CategoryRange { char32_t first, last; uint8_t cls; };
struct SpaceRange { char32_t first, last; };
struct CccRange { char32_t first, last; uint8_t ccc; };
struct Decomposition { char32_t cp; uint16_t offset; uint8_t length; };
struct Composition { char32_t first, second, composite; };

#include "text/nfc_tables.inc"
#include "text/unicode_categories.inc"

// The range of a sorted, disjoint table holding cp, or nullptr.
template <typename Range, size_t N>
const Range* find_range(const Range (&table)[N], char32_t cp) {
  const Range* it = std::upper_bound(std::begin(table), std::end(table), cp,
                                     [](char32_t v, const Range& r) { return v < r.first; });
  if (it == std::begin(table)) return nullptr;
  --it;
  return cp <= it->last ? it : nullptr;
}

// The shape of a UTF-8 sequence by its lead byte: total length and the allowed range of the
// second byte (which is what excludes overlong forms, surrogates and code points > U+10FFFF).
struct Lead { int length; uint8_t lo, hi; };
Lead lead_of(uint8_t b) {
  if (b < 0x80) return {1, 0, 0};
  if (b >= 0xC2 && b <= 0xDF) return {2, 0x80, 0xBF};
  if (b == 0xE0) return {3, 0xA0, 0xBF};
  if (b == 0xED) return {3, 0x80, 0x9F};
  if (b >= 0xE1 && b <= 0xEF) return {3, 0x80, 0xBF};
  if (b == 0xF0) return {4, 0x90, 0xBF};
  if (b >= 0xF1 && b <= 0xF3) return {4, 0x80, 0xBF};
  if (b == 0xF4) return {4, 0x80, 0x8F};
  return {0, 0, 0};  // a continuation byte or an impossible lead
}

// How many bytes from s[i] form a valid prefix of the sequence s[i] starts (at least 1).
// Sets `complete` when that prefix is a whole character.
size_t valid_prefix(std::string_view s, size_t i, bool& complete) {
  Lead l = lead_of(uint8_t(s[i]));
  complete = l.length == 1;
  if (l.length <= 1) return 1;
  size_t n = 1;
  while (int(n) < l.length && i + n < s.size()) {
    uint8_t c = uint8_t(s[i + n]);
    bool ok = n == 1 ? (c >= l.lo && c <= l.hi) : (c >= 0x80 && c <= 0xBF);
    if (!ok) break;
    ++n;
  }
  complete = int(n) == l.length;
  return n;
}

// Hangul syllables compose and decompose by formula (Unicode 3.12).
constexpr char32_t kSBase = 0xAC00, kLBase = 0x1100, kVBase = 0x1161, kTBase = 0x11A7;
constexpr int kLCount = 19, kVCount = 21, kTCount = 28, kNCount = kVCount * kTCount, kSCount = kLCount * kNCount;

uint8_t ccc_of(char32_t cp) {
  const CccRange* r = find_range(kCccRanges, cp);
  return r ? r->ccc : 0;
}

void decompose(char32_t cp, std::vector<char32_t>& out) {
  if (cp >= kSBase && cp < kSBase + char32_t(kSCount)) {
    int s = int(cp - kSBase);
    out.push_back(kLBase + s / kNCount);
    out.push_back(kVBase + (s % kNCount) / kTCount);
    if (s % kTCount) out.push_back(kTBase + s % kTCount);
    return;
  }
  const Decomposition* it = std::lower_bound(std::begin(kDecompositions), std::end(kDecompositions), cp,
                                             [](const Decomposition& d, char32_t v) { return d.cp < v; });
  if (it != std::end(kDecompositions) && it->cp == cp)
    out.insert(out.end(), kDecompositionPool + it->offset, kDecompositionPool + it->offset + it->length);
  else
    out.push_back(cp);
}

// The primary composite of (a, b), or 0.
char32_t compose(char32_t a, char32_t b) {
  if (a >= kLBase && a < kLBase + char32_t(kLCount) && b >= kVBase && b < kVBase + char32_t(kVCount))
    return kSBase + ((a - kLBase) * kVCount + (b - kVBase)) * kTCount;
  if (a >= kSBase && a < kSBase + char32_t(kSCount) && (a - kSBase) % kTCount == 0 && b > kTBase &&
      b < kTBase + char32_t(kTCount))
    return a + (b - kTBase);
  auto key = [](const Composition& c) { return std::pair(c.first, c.second); };
  const Composition* it = std::lower_bound(std::begin(kCompositions), std::end(kCompositions), std::pair(a, b),
                                           [&](const Composition& c, std::pair<char32_t, char32_t> v) { return key(c) < v; });
  return it != std::end(kCompositions) && it->first == a && it->second == b ? it->composite : 0;
}

// NFC (or with compose = false, NFD) of a run of valid code points, appended to out as UTF-8.
void nfc_run(const std::vector<char32_t>& run, std::string& out, bool compose_too = true) {
  std::vector<char32_t> d;
  for (char32_t cp : run) decompose(cp, d);
  // Canonical ordering: a stable sort by combining class within each run of non-starters.
  for (size_t i = 0; i < d.size();) {
    if (ccc_of(d[i]) == 0) { ++i; continue; }
    size_t j = i;
    while (j < d.size() && ccc_of(d[j]) != 0) ++j;
    std::stable_sort(d.begin() + i, d.begin() + j, [](char32_t a, char32_t b) { return ccc_of(a) < ccc_of(b); });
    i = j;
  }
  if (!compose_too) {
    for (char32_t cp : d) append_utf8(out, cp);
    return;
  }
  // Canonical composition: a character joins the last starter unless a character between
  // them has a combining class >= its own (it is "blocked").
  std::vector<char32_t> r;
  size_t starter = 0;
  int last_class = -1;  // -1: no starter yet
  for (char32_t ch : d) {
    int cls = ccc_of(ch);
    if (last_class >= 0 && (last_class == 0 || last_class < cls)) {
      if (char32_t c = compose(r[starter], ch)) {
        r[starter] = c;
        continue;
      }
    }
    if (cls == 0) starter = r.size();
    if (cls == 0 || last_class >= 0) last_class = cls;
    r.push_back(ch);
  }
  for (char32_t cp : r) append_utf8(out, cp);
}

}  // namespace

Category category(char32_t cp) {
  if (cp < 0x80) {
    if (cp >= 'a' && cp <= 'z') return Category::Ll;
    if (cp >= 'A' && cp <= 'Z') return Category::Lu;
    if (cp >= '0' && cp <= '9') return Category::N;
    return Category::other;
  }
  const CategoryRange* r = find_range(kCategoryRanges, cp);
  return r ? Category(r->cls) : Category::other;
}

bool is_white_space(char32_t cp) {
  if (cp < 0x80) return cp == ' ' || (cp >= 0x09 && cp <= 0x0D);
  return find_range(kWhiteSpaceRanges, cp) != nullptr;
}

char32_t next_code_point(std::string_view s, size_t& i) {
  uint8_t b = uint8_t(s[i]);
  if (b < 0x80) { ++i; return b; }
  bool complete = false;
  size_t n = valid_prefix(s, i, complete);
  if (!complete) { ++i; return 0xFFFD; }
  char32_t cp = b & (0x7F >> n);
  for (size_t k = 1; k < n; ++k) cp = (cp << 6) | (uint8_t(s[i + k]) & 0x3F);
  i += n;
  return cp;
}

namespace {

std::string canonical_form(std::string_view s, bool compose_too) {
  // Text below U+0300 is unchanged by NFC (nothing there decomposes or combines), and text
  // below U+00C0 by NFD (Latin-1 letters decompose: U+00E9 -> e U+0301).
  uint8_t first_lead = compose_too ? 0xCC : 0xC3;
  bool simple = std::all_of(s.begin(), s.end(), [&](char c) { return uint8_t(c) < first_lead; });
  if (simple) return std::string(s);
  std::string out;
  out.reserve(s.size());
  std::vector<char32_t> run;
  for (size_t i = 0; i < s.size();) {
    bool complete = false;
    valid_prefix(s, i, complete);
    if (!complete) {  // an invalid byte ends the run and passes through
      nfc_run(run, out, compose_too);
      run.clear();
      out += s[i++];
      continue;
    }
    run.push_back(next_code_point(s, i));
  }
  nfc_run(run, out, compose_too);
  return out;
}

}  // namespace

std::string nfc(std::string_view s) { return canonical_form(s, true); }
std::string nfd(std::string_view s) { return canonical_form(s, false); }

void utf8_lossy_append(std::string_view s, std::string& out) {
  for (size_t i = 0; i < s.size();) {
    bool complete = false;
    size_t n = valid_prefix(s, i, complete);
    if (complete) out.append(s.substr(i, n)); else out += "\xEF\xBF\xBD";
    i += n;
  }
}

std::string utf8_lossy(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  utf8_lossy_append(s, out);
  return out;
}

size_t utf8_complete_prefix(std::string_view s) {
  for (size_t i = 0; i < s.size();) {
    bool complete = false;
    size_t n = valid_prefix(s, i, complete);
    if (!complete && i + n == s.size() && lead_of(uint8_t(s[i])).length > 1) return i;
    i += n;
  }
  return s.size();
}

namespace {
struct ByteMap {
  std::array<std::string, 256> piece;
  std::array<char32_t, 256> cp{};
  ByteMap() {
    int n = 0;
    for (int b = 0; b < 256; ++b) {
      bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
      cp[b] = printable ? char32_t(b) : char32_t(256 + n++);
      append_utf8(piece[b], cp[b]);
    }
  }
};
const ByteMap& byte_map() {
  static const ByteMap m;
  return m;
}
}  // namespace

const std::string& byte_to_piece(uint8_t b) { return byte_map().piece[b]; }

int piece_char_to_byte(char32_t cp) {
  if (cp > 0x143) return -1;
  static const std::array<int16_t, 0x144> inverse = [] {
    std::array<int16_t, 0x144> inv;
    inv.fill(-1);
    for (int b = 0; b < 256; ++b) inv[byte_map().cp[b]] = int16_t(b);
    return inv;
  }();
  return inverse[cp];
}

std::string byte_level_bytes(std::string_view text) {
  std::string out;
  for (size_t i = 0; i < text.size();) {
    int b = piece_char_to_byte(next_code_point(text, i));
    if (b < 0) return std::string(text);
    out += char(b);
  }
  return out;
}

}  // namespace wren::text
