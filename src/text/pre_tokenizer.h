// text/: the pre-tokenizer of a tokenizer.json, the steps that cut normalized text into the
// pieces BPE sees: Split (a regex or a literal, five behaviours, optionally inverted) and
// ByteLevel (GPT-2's regex split and a prefix space), Metaspace (SentencePiece's spaces as
// U+2581, a prefix one by prepend_scheme, optionally cut before each), Digits, WhitespaceSplit,
// Punctuation, alone or in a Sequence.
//
// A Split regex runs through PCRE2 (regex.h), except the four patterns the hand-written
// matchers of pretokenize.h know, which tests show equal to PCRE2 on random Unicode text.
// Behaviours follow Hugging Face's NormalizedString::split: the matches and the gaps between
// them cover the text; invert swaps which is which; then Removed drops the matches, Isolated
// keeps every span as its own piece, MergedWithPrevious / MergedWithNext glue each match to
// the piece before / after it, Contiguous glues runs of matches (and runs of gaps). Empty
// pieces are dropped.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "config/json_reader.h"
#include "text/pretokenize.h"
#include "text/regex.h"

namespace wren::text {

enum class SplitBehavior { removed, isolated, merged_with_previous, merged_with_next, contiguous };

// What a Split cuts at.
class SplitMatcher {
 public:
  // A regex; the hand matcher is used if it is one of the known patterns and allow_fast.
  static SplitMatcher from_regex(const std::string& regex, bool allow_fast = true);  // RegexError
  static SplitMatcher from_literal(std::string literal);  // must not be empty
  // The matches and the gaps between them, in order, covering s (a match may be empty).
  std::vector<Span> spans(std::string_view s) const;
  std::optional<SplitPattern> fast_path() const { return fast_; }

 private:
  std::optional<SplitPattern> fast_;
  std::shared_ptr<const Regex> regex_;
  std::string literal_;
};

// The pieces [begin, end) of a split under a behaviour, empty ones dropped.
std::vector<std::pair<size_t, size_t>> split_pieces(std::vector<Span> spans, SplitBehavior behavior, bool invert);

class PreTokenizer {
 public:
  // Reads root["pre_tokenizer"] (absent or null: the text is one piece).
  static PreTokenizer read(JsonReader& root);
  // Cuts text into pieces, appended to out. at_text_start: the text is the start of what was
  // encoded (not a stretch after an added token), which Metaspace's prepend_scheme "first" asks.
  void split(std::string_view text, std::vector<std::string>& out, bool at_text_start = true) const;
  // Whether a ByteLevel step maps the pieces to bytes (byte-level BPE).
  bool byte_level() const;

  struct Step {
    enum class Kind { split, byte_level, metaspace } kind = Kind::split;
    std::optional<SplitMatcher> matcher;  // for byte_level, GPT-2's regex if use_regex
    SplitBehavior behavior = SplitBehavior::isolated;
    bool invert = false, add_prefix_space = false;
    enum class Prepend { always, first, never } prepend = Prepend::always;  // metaspace
    std::string replacement;                                               // metaspace
  };

 private:
  std::vector<Step> steps_;
};

}  // namespace wren::text
