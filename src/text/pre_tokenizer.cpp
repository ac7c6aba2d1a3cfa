// text/: reading and running the pre-tokenizer of a tokenizer.json (see pre_tokenizer.h).
#include "text/pre_tokenizer.h"

#include <algorithm>

#include "text/unicode.h"

namespace wren::text {

SplitMatcher SplitMatcher::from_regex(const std::string& regex, bool allow_fast) {
  SplitMatcher m;
  if (allow_fast) m.fast_ = recognise_split_pattern(regex);
  if (!m.fast_) m.regex_ = std::make_shared<const Regex>(regex);
  return m;
}

SplitMatcher SplitMatcher::from_literal(std::string literal) {
  if (literal.empty()) throw RegexError("a Split string pattern must not be empty");
  SplitMatcher m;
  m.literal_ = std::move(literal);
  return m;
}

std::vector<Span> SplitMatcher::spans(std::string_view s) const {
  if (fast_) return split_by_pattern(*fast_, s);
  std::vector<std::pair<size_t, size_t>> matches;
  if (regex_) {
    matches = regex_->find_all(s);
  } else {
    for (size_t p = s.find(literal_); p != std::string_view::npos; p = s.find(literal_, p + literal_.size()))
      matches.emplace_back(p, p + literal_.size());
  }
  std::vector<Span> out;
  size_t prev = 0;
  for (auto [b, e] : matches) {
    if (prev < b) out.push_back({prev, b, false});
    out.push_back({b, e, true});
    prev = e;
  }
  if (prev < s.size()) out.push_back({prev, s.size(), false});
  return out;
}

std::vector<std::pair<size_t, size_t>> split_pieces(std::vector<Span> spans, SplitBehavior behavior, bool invert) {
  if (invert)
    for (Span& s : spans) s.match = !s.match;
  std::vector<std::pair<size_t, size_t>> out;
  bool previous_match = false;
  switch (behavior) {
    case SplitBehavior::removed:
      for (const Span& s : spans)
        if (!s.match) out.emplace_back(s.begin, s.end);
      break;
    case SplitBehavior::isolated:
      for (const Span& s : spans) out.emplace_back(s.begin, s.end);
      break;
    case SplitBehavior::merged_with_previous:  // a match joins the piece before it
      for (const Span& s : spans) {
        if (s.match && !previous_match && !out.empty()) out.back().second = s.end;
        else out.emplace_back(s.begin, s.end);
        previous_match = s.match;
      }
      break;
    case SplitBehavior::merged_with_next:  // a match joins the piece after it (walk backwards)
      for (auto it = spans.rbegin(); it != spans.rend(); ++it) {
        if (it->match && !previous_match && !out.empty()) out.back().first = it->begin;
        else out.emplace_back(it->begin, it->end);
        previous_match = it->match;
      }
      std::reverse(out.begin(), out.end());
      break;
    case SplitBehavior::contiguous:  // runs of the same kind become one piece
      for (size_t i = 0; i < spans.size(); ++i) {
        if (i > 0 && spans[i].match == previous_match) out.back().second = spans[i].end;
        else out.emplace_back(spans[i].begin, spans[i].end);
        previous_match = spans[i].match;
      }
      break;
  }
  std::erase_if(out, [](const auto& p) { return p.first == p.second; });
  return out;
}

namespace {

using Step = PreTokenizer::Step;

// Hugging Face's Metaspace on one piece: every ' ' becomes the replacement, which is also
// put in front (always, or for prepend_scheme "first" only at the start of the text) unless
// the piece starts with it.
void metaspace(const Step& step, std::string& piece, bool starts_text) {
  std::string out;
  bool prepend = step.prepend == Step::Prepend::always || (step.prepend == Step::Prepend::first && starts_text);
  if (prepend && piece.compare(0, step.replacement.size(), step.replacement) != 0 &&
      !(piece.size() > 0 && piece[0] == ' ')) out = step.replacement;
  for (char c : piece) {
    if (c == ' ') out += step.replacement;
    else out += c;
  }
  piece = std::move(out);
}

SplitMatcher regex_matcher(JsonReader& r, const std::string& key, const std::string& regex) {
  try {
    return SplitMatcher::from_regex(regex);
  } catch (const RegexError& e) {
    r.fail(key, e.what());
  }
}

// {"type": "Split", "pattern": {"Regex": ...} or {"String": ...}, "behavior": ..., "invert": ...}
Step read_split(JsonReader& r) {
  Step step;
  JsonReader pat = r.object("pattern");
  if (pat.has("Regex")) {
    step.matcher = regex_matcher(pat, "Regex", pat.string("Regex"));
  } else if (pat.has("String")) {
    std::string literal = pat.string("String");
    if (literal.empty()) pat.fail("String", "must not be empty");
    step.matcher = SplitMatcher::from_literal(literal);
  } else {
    r.fail("pattern", "expected {\"Regex\": ...} or {\"String\": ...}");
  }
  step.behavior = SplitBehavior(
      r.choice("behavior", {"Removed", "Isolated", "MergedWithPrevious", "MergedWithNext", "Contiguous"}));
  step.invert = r.boolean_or("invert", false);
  return step;
}

// {"type": "Metaspace", "replacement": "▁", "prepend_scheme": "always"|"first"|"never",
// "split": bool}; files older than prepend_scheme say add_prefix_space (true: always).
Step read_metaspace(JsonReader& r) {
  Step step;
  step.kind = Step::Kind::metaspace;
  step.replacement = r.string("replacement");
  size_t end = 0;
  next_code_point(step.replacement, end);
  if (step.replacement.empty() || end != step.replacement.size())
    r.fail("replacement", "expected one character, got \"" + step.replacement + "\"");
  if (r.has("prepend_scheme")) {
    step.prepend = Step::Prepend(r.choice("prepend_scheme", {"always", "first", "never"}));
    r.boolean_or("add_prefix_space", true);  // superseded by prepend_scheme
  } else {
    step.prepend = r.boolean_or("add_prefix_space", true) ? Step::Prepend::always : Step::Prepend::never;
  }
  if (r.boolean_or("split", true)) {
    step.matcher = SplitMatcher::from_literal(step.replacement);
    step.behavior = SplitBehavior::merged_with_next;
  }
  r.string_or("str_rep", "");  // the replacement again, in old files
  return step;
}

void read_steps(JsonReader r, std::vector<Step>& steps, int depth) {
  int type = r.choice("type", {"ByteLevel", "Split", "Sequence", "Digits", "WhitespaceSplit", "Punctuation", "Metaspace"});
  Step step;
  switch (type) {
    case 0:  // ByteLevel: a prefix space, GPT-2's regex, then bytes as characters
      step.kind = Step::Kind::byte_level;
      step.add_prefix_space = r.boolean_or("add_prefix_space", true);
      if (r.boolean_or("use_regex", true)) step.matcher = SplitMatcher::from_regex(split_pattern_regex(SplitPattern::gpt2));
      break;
    case 1:
      step = read_split(r);
      break;
    case 2: {
      if (depth > 8) r.fail("pretokenizers", "Sequences nested more than 8 deep");
      const Json& list = r.raw("pretokenizers");
      if (!list.is_array()) r.fail("pretokenizers", "expected a list, got " + json_value_text(list));
      for (size_t i = 0; i < list.size(); ++i) read_steps(r.element("pretokenizers", i), steps, depth + 1);
      return;
    }
    case 3:  // Digits: each digit alone, or runs of digits (Rust's char::is_numeric is \p{N})
      step.matcher = SplitMatcher::from_regex("\\p{N}");
      step.behavior = r.boolean_or("individual_digits", false) ? SplitBehavior::isolated : SplitBehavior::contiguous;
      break;
    case 4:  // WhitespaceSplit: drop White_Space, cut there
      step.matcher = SplitMatcher::from_regex("\\s");
      step.behavior = SplitBehavior::removed;
      break;
    case 5:  // Punctuation: ASCII punctuation and \p{P}, each character a match
      step.matcher = SplitMatcher::from_regex("[\\p{P}!-/:-@\\[-`{-~]");
      step.behavior = SplitBehavior(
          r.choice_or("behavior", {"Removed", "Isolated", "MergedWithPrevious", "MergedWithNext", "Contiguous"}, 1));
      break;
    case 6:
      step = read_metaspace(r);
      break;
  }
  steps.push_back(std::move(step));
}

}  // namespace

PreTokenizer PreTokenizer::read(JsonReader& root) {
  PreTokenizer p;
  if (root.has("pre_tokenizer")) read_steps(root.object("pre_tokenizer"), p.steps_, 0);
  return p;
}

bool PreTokenizer::byte_level() const {
  return std::any_of(steps_.begin(), steps_.end(), [](const Step& s) { return s.kind == Step::Kind::byte_level; });
}

void PreTokenizer::split(std::string_view text, std::vector<std::string>& out, bool at_text_start) const {
  // Each step splits every piece further; ByteLevel and Metaspace may also put a space (or
  // its replacement) in front. Only a first piece that begins its parent can start the text.
  std::vector<std::string> pieces{std::string(text)}, next;
  for (const Step& step : steps_) {
    next.clear();
    bool first_starts_text = false;
    for (size_t i = 0; i < pieces.size(); ++i) {
      std::string& piece = pieces[i];
      const bool starts_text = at_text_start && i == 0;
      if (step.add_prefix_space && (piece.empty() || piece[0] != ' ')) piece.insert(0, 1, ' ');
      if (step.kind == Step::Kind::metaspace) metaspace(step, piece, starts_text);
      if (!step.matcher) {
        first_starts_text |= starts_text;
        next.push_back(std::move(piece));
        continue;
      }
      for (auto [b, e] : split_pieces(step.matcher->spans(piece), step.behavior, step.invert)) {
        first_starts_text |= starts_text && b == 0;
        next.emplace_back(piece, b, e - b);
      }
    }
    at_text_start = first_starts_text;
    pieces.swap(next);
  }
  for (std::string& p : pieces) out.push_back(std::move(p));
}

}  // namespace wren::text
