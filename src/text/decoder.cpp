// text/: reading and running the decoder of a tokenizer.json (see decoder.h).
#include "text/decoder.h"

#include <algorithm>

#include "text/unicode.h"

namespace wren::text {
namespace {

using Step = Decoder::Step;

// Metaspace's prepend scheme as tokenizer.json writes it, or its legacy add_prefix_space.
int prepend_scheme(JsonReader& r) {
  if (r.has("prepend_scheme")) return r.choice("prepend_scheme", {"always", "first", "never"});
  return r.boolean_or("add_prefix_space", true) ? 0 : 2;
}

// One character, as Strip's content and Metaspace's replacement are.
std::string one_character(JsonReader& r, const std::string& key) {
  std::string s = r.string(key);
  size_t i = 0;
  next_code_point(s, i);
  if (s.empty() || i != s.size()) r.fail(key, "expected one character, got \"" + s + "\"");
  return s;
}

void read_steps(JsonReader r, std::vector<Step>& steps, int depth) {
  int type = r.choice("type", {"ByteLevel", "Replace", "ByteFallback", "Fuse", "Strip", "Metaspace", "Sequence",
                               "WordPiece", "BPEDecoder", "CTC"});
  if (type >= 7) r.fail("type", "the " + r.string("type") + " decoder is not supported (supported: ByteLevel, Replace, "
                        "ByteFallback, Fuse, Strip, Metaspace, Sequence)");
  Step step{};
  switch (type) {
    case 0:
      step.kind = Step::Kind::byte_level;
      for (const char* ignored : {"add_prefix_space", "trim_offsets", "use_regex"}) r.boolean_or(ignored, false);
      break;
    case 1:
      step.kind = Step::Kind::replace;
      step.replacement = read_replacement(r);
      break;
    case 2: step.kind = Step::Kind::byte_fallback; break;
    case 3: step.kind = Step::Kind::fuse; break;
    case 4:
      step.kind = Step::Kind::strip;
      step.content = one_character(r, "content");
      step.start = size_t(r.integer("start", 0));
      step.stop = size_t(r.integer("stop", 0));
      break;
    case 5:
      step.kind = Step::Kind::metaspace;
      step.content = one_character(r, "replacement");
      step.drop_in_first = prepend_scheme(r) != 2;
      r.boolean_or("split", true);
      break;
    case 6: {
      if (depth > 8) r.fail("decoders", "Sequences nested more than 8 deep");
      const Json& list = r.raw("decoders");
      if (!list.is_array()) r.fail("decoders", "expected a list, got " + json_value_text(list));
      for (size_t i = 0; i < list.size(); ++i) read_steps(r.element("decoders", i), steps, depth + 1);
      return;
    }
  }
  steps.push_back(std::move(step));
}

// The byte a "<0xNN>" token names, or -1. Rust's u8::from_str_radix, which Hugging Face uses
// on the two characters, also takes "+N".
int fallback_byte(std::string_view t) {
  if (t.size() != 6 || t.substr(0, 3) != "<0x" || t[5] != '>') return -1;
  auto hex = [](char c) { return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10
                                                     : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1; };
  if (t[3] == '+') return hex(t[4]);
  int hi = hex(t[3]), lo = hex(t[4]);
  return hi < 0 || lo < 0 ? -1 : hi * 16 + lo;
}

bool valid_utf8(std::string_view s) { return utf8_complete_prefix(s) == s.size() && utf8_lossy(s) == s; }

std::vector<std::string> byte_fallback(std::vector<std::string> tokens, bool whole_text) {
  std::vector<std::string> out;
  std::string run;  // bytes of the current run of byte tokens
  auto flush = [&] {
    if (run.empty()) return;
    if (!whole_text || valid_utf8(run)) out.push_back(run);
    else
      for (size_t i = 0; i < run.size(); ++i) out.push_back("\xEF\xBF\xBD");
    run.clear();
  };
  for (std::string& t : tokens) {
    int b = fallback_byte(t);
    if (b >= 0) {
      run += char(b);
      continue;
    }
    flush();
    out.push_back(std::move(t));
  }
  flush();
  return out;
}

// Up to `start` leading and `stop` trailing copies of the character c.
std::string strip(std::string_view t, std::string_view c, size_t start, size_t stop) {
  size_t b = 0, e = t.size();
  for (size_t i = 0; i < start && t.substr(b, c.size()) == c; ++i) b += c.size();
  for (size_t i = 0; i < stop && e >= b + c.size() && t.substr(e - c.size(), c.size()) == c; ++i) e -= c.size();
  return std::string(t.substr(b, e - b));
}

std::string metaspace(std::string_view t, std::string_view replacement, bool drop) {
  std::string out;
  for (size_t p = 0; p < t.size();) {
    if (t.substr(p, replacement.size()) == replacement) {
      if (!drop) out += ' ';
      p += replacement.size();
    } else {
      out += t[p++];
    }
  }
  return out;
}

std::string join(const std::vector<std::string>& tokens) {
  std::string s;
  for (const std::string& t : tokens) s += t;
  return s;
}

}  // namespace

Decoder Decoder::read(JsonReader& root) {
  Decoder d;
  if (!root.has("decoder")) return d;
  d.has_decoder_ = true;
  read_steps(root.object("decoder"), d.steps_, 0);
  return d;
}

// Hugging Face's decode_chain of each step in turn. Outside whole_text, the tokens are one
// token inside a text: bytes stay raw and the rules for the text's ends do not apply.
std::vector<std::string> Decoder::run(std::vector<std::string> tokens, bool whole_text) const {
  bool fused = false;  // the tokens are one text now
  for (const Step& step : steps_) {
    switch (step.kind) {
      case Step::Kind::byte_level: {
        std::string bytes;
        for (const std::string& t : tokens) bytes += byte_level_bytes(t);
        tokens.assign(1, whole_text ? utf8_lossy(bytes) : bytes);
        fused = true;
        break;
      }
      case Step::Kind::replace:
        for (std::string& t : tokens) t = step.replacement.apply(t);
        break;
      case Step::Kind::byte_fallback: tokens = byte_fallback(std::move(tokens), whole_text); break;
      case Step::Kind::fuse:
        tokens.assign(1, join(tokens));
        fused = true;
        break;
      case Step::Kind::strip:
        if (fused && !whole_text) break;
        for (std::string& t : tokens) t = strip(t, step.content, step.start, step.stop);
        break;
      case Step::Kind::metaspace:
        for (size_t i = 0; i < tokens.size(); ++i)
          tokens[i] = metaspace(tokens[i], step.content, whole_text && i == 0 && step.drop_in_first);
        break;
    }
  }
  return tokens;
}

std::string Decoder::decode(std::vector<std::string> tokens) const {
  if (!has_decoder_) {  // Hugging Face joins the token strings with spaces
    std::string s;
    for (size_t i = 0; i < tokens.size(); ++i) s += (i ? " " : "") + tokens[i];
    return s;
  }
  return utf8_lossy(join(run(std::move(tokens), true)));
}

std::string Decoder::piece(std::string_view token) const {
  if (!has_decoder_) return std::string(token);
  return join(run({std::string(token)}, false));
}

}  // namespace wren::text
