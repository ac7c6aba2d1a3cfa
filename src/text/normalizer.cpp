// text/: reading and running the normalizer of a tokenizer.json (see normalizer.h).
#include "text/normalizer.h"

#include "text/unicode.h"

namespace wren::text {
namespace {

using Step = Normalizer::Step;

const std::vector<std::string> kTypes = {"NFC", "NFD", "Replace", "Prepend", "Strip", "Sequence",
                                         "NFKC", "NFKD", "Lowercase", "BertNormalizer", "Precompiled",
                                         "StripAccents", "Nmt", "ByteLevel"};
constexpr int kFirstUnsupported = 6;

void read_steps(JsonReader r, std::vector<Step>& steps, int depth) {
  int type = r.choice("type", kTypes);
  if (type >= kFirstUnsupported)
    r.fail("type", "the " + kTypes[type] + " normalizer is not supported (supported: NFC, NFD, Replace, Prepend, Strip, Sequence)");
  Step step{};
  switch (type) {
    case 0: step.kind = Step::Kind::nfc; break;
    case 1: step.kind = Step::Kind::nfd; break;
    case 2:
      step.kind = Step::Kind::replace;
      step.replacement = read_replacement(r);
      break;
    case 3:
      step.kind = Step::Kind::prepend;
      step.content = r.string("prepend");
      break;
    case 4:
      step.kind = Step::Kind::strip;
      step.left = r.boolean_or("strip_left", true);
      step.right = r.boolean_or("strip_right", true);
      break;
    case 5: {
      if (depth > 8) r.fail("normalizers", "Sequences nested more than 8 deep");
      const Json& list = r.raw("normalizers");
      if (!list.is_array()) r.fail("normalizers", "expected a list, got " + json_value_text(list));
      for (size_t i = 0; i < list.size(); ++i) read_steps(r.element("normalizers", i), steps, depth + 1);
      return;
    }
  }
  steps.push_back(std::move(step));
}

// White_Space at the ends (Rust's char::is_whitespace), as Hugging Face's Strip.
std::string strip(std::string_view s, bool left, bool right) {
  size_t b = 0, e = s.size();
  if (left)
    while (b < e) {
      size_t next = b;
      if (!is_white_space(next_code_point(s, next))) break;
      b = next;
    }
  if (right)
    while (e > b) {
      size_t start = e - 1;
      while (start > b && (uint8_t(s[start]) & 0xC0) == 0x80) --start;
      size_t next = start;
      char32_t cp = next_code_point(s, next);
      if (next != e || !is_white_space(cp)) break;
      e = start;
    }
  return std::string(s.substr(b, e - b));
}

}  // namespace

Replacement read_replacement(JsonReader& r) {
  Replacement rep;
  rep.content = r.string("content");
  JsonReader pat = r.object("pattern");
  if (pat.has("Regex")) {
    try {
      rep.regex = std::make_shared<const Regex>(pat.string("Regex"));
    } catch (const RegexError& e) {
      pat.fail("Regex", e.what());
    }
  } else if (pat.has("String")) {
    rep.literal = pat.string("String");
    if (rep.literal.empty()) pat.fail("String", "must not be empty");
  } else {
    r.fail("pattern", "expected {\"Regex\": ...} or {\"String\": ...}");
  }
  return rep;
}

Normalizer Normalizer::read(JsonReader& root) {
  Normalizer n;
  if (root.has("normalizer")) read_steps(root.object("normalizer"), n.steps_, 0);
  return n;
}

std::string Normalizer::apply(std::string_view text) const {
  std::string s(text);
  for (const Step& step : steps_) {
    switch (step.kind) {
      case Step::Kind::nfc: s = nfc(s); break;
      case Step::Kind::nfd: s = nfd(s); break;
      case Step::Kind::replace: s = step.replacement.apply(s); break;
      case Step::Kind::prepend: if (!s.empty()) s.insert(0, step.content); break;
      case Step::Kind::strip: s = strip(s, step.left, step.right); break;
    }
  }
  return s;
}

}  // namespace wren::text
