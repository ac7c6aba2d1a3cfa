// text/: the pre-tokenizer regexes of byte-level BPE tokenizers, matched by hand (fast paths;
// any other regex runs through PCRE2, pre_tokenizer.h, and tests check the two agree).
//
// GPT-2, cl100k (GPT-4, Llama-3), Qwen2/3 and o200k (GPT-4o) split text with regexes that use
// Unicode classes (\p{L}, \p{N}), a lookahead (\s+(?!\S)) and case-insensitive contractions;
// std::regex can express none of that. Instead we recognise each known regex by its exact text
// and implement its alternatives directly over UTF-8 code points, keeping the regex semantics:
// at each position the first alternative that matches wins, quantifiers are greedy and give
// back characters one at a time (backtracking) until the rest of the alternative matches.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace wren::text {

enum class SplitPattern {
  gpt2,    // 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
  cl100k,  // GPT-4 and Llama-3: case-insensitive contractions, digits in groups of up to 3
  qwen2,   // as cl100k with single digits (Qwen2, Qwen2.5, Qwen3, OLMo-2 style)
  o200k,   // GPT-4o: cased words keep their contraction, trailing '/' joins punctuation
};

// The pattern a tokenizer.json regex stands for; nullopt if it is not one we know.
std::optional<SplitPattern> recognise_split_pattern(std::string_view regex);
// The regex text of a pattern as tokenizer.json files write it.
const char* split_pattern_regex(SplitPattern p);

// End (byte offset) of the match that starts at byte `p` of `s`, or p if none starts there.
size_t match_split_pattern(SplitPattern pattern, std::string_view s, size_t p);

// A piece of text from splitting: [begin, end) and whether it was a match (else a gap).
struct Span {
  size_t begin, end;
  bool match;
};
// Cuts s into matches of the pattern (leftmost first) and the gaps between them.
std::vector<Span> split_by_pattern(SplitPattern pattern, std::string_view s);

}  // namespace wren::text
