// text/: SentencePiece BPE vocabularies (pieces with scores, no merges, as GGUF files of
// tokenizer.ggml.model "llama" hold them) expressed as the merges of a BPE tokenizer.json.
//
// SentencePiece's BPE encodes a word by repeatedly joining the adjacent pair of symbols whose
// concatenation is a piece with the highest score, leftmost first. A merges-BPE does the same
// if its merges are every split (l, r) of every piece p with both halves pieces, ranked by
// p's score, highest first: at each step both pick the candidate of best rank (score). This
// is how Hugging Face's converter (SentencePieceExtractor) writes Llama's and Gemma's
// tokenizer.json: splits of one piece in order of (id of l, id of r), then a stable sort by
// score, descending. The one place the two can part: two different candidates whose results
// have equal scores (the same piece reached at two places of a word, or tied scores), where
// SentencePiece takes the leftmost and a merges-BPE the lower rank.
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace wren::text {

// The merges, best first, for pieces by id and their scores (scores.size() == pieces.size()).
// `mergeable[id]` false keeps a piece out as a result and as a half (unused tokens). Pieces
// must be distinct.
std::vector<std::pair<std::string, std::string>> merges_from_scores(const std::vector<std::string>& pieces,
                                                                    const std::vector<double>& scores,
                                                                    const std::vector<bool>& mergeable);

}  // namespace wren::text
