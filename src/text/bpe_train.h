// text/: learning a byte-level BPE tokenizer from text, written as a standard tokenizer.json
// that Tokenizer (tokenizer.h) and the Hugging Face loaders read.
//
// Ids: the 256 bytes first (id = byte value), then one token per learned merge, then the
// special tokens. Training: split out the special tokens, pre-tokenize with the chosen regex,
// count each distinct piece once with its frequency, then repeatedly merge the most frequent
// adjacent pair (ties: the smaller pair of ids), updating pair counts only in the pieces that
// hold the merged pair. The result depends only on the input: the same text gives the same file.
#pragma once

#include <string>
#include <vector>

#include "config/json_reader.h"
#include "text/pretokenize.h"

namespace wren::text {

struct BpeTrainOptions {
  int vocab_size = 8192;  // in total: 256 bytes + merges + special tokens
  std::vector<std::string> special_tokens{"<|endoftext|>"};
  int min_frequency = 2;  // a pair seen fewer times than this is never merged
  SplitPattern pattern = SplitPattern::gpt2;
};

// Trains on texts held in memory; returns the tokenizer.json document.
Json train_bpe(const std::vector<std::string>& texts, const BpeTrainOptions& options);
// Trains on the contents of files (an unreadable file is an error naming it).
Json train_bpe_files(const std::vector<std::string>& paths, const BpeTrainOptions& options);
// Writes a tokenizer.json to a temporary name, then renames it into place.
void save_tokenizer_json(const Json& tokenizer, const std::string& path);

}  // namespace wren::text
