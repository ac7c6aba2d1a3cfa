// train/: the training data (NOTES.md 4 "Data"): text files -> documents -> token stream -> rows.
//
//   documents  one file = one document; a file holding the end-of-text marker ("<|endoftext|>")
//              is several documents, split at the markers (whitespace around a marker trimmed,
//              empty pieces dropped). Files are read in sorted path order: deterministic.
//   split      a document is held out if its file is listed (by path or file name) or it is
//              every k-th document (the k-th, 2k-th, ... in reading order); the rest train.
//   stream     per split: eot d_0 eot d_1 eot ... d_n eot (ids of each document's text, then the
//              end-of-text id; the leading eot makes every document's first token a target,
//              predicted from a document start, as every later document's is).
//   rows       row r = stream[r T .. r T + T] (T + 1 tokens): inputs = the first T, targets = the
//              last T. Rows overlap by one token, so every token after the first is a target
//              exactly once; the tail that does not fill a row is dropped.
//   bytes      target_bytes = sum over the targets of the bytes each token stands for (the
//              end-of-text token: 0). Bits per byte = sum of target NLL / ln 2 / target_bytes.
//
// Batches for training come from a Sampler: the rows in a seeded random order per epoch; batch n
// is a function of (seed, n) alone, so a resumed run sees the batches an unbroken one would.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

#include "text/tokenizer.h"

namespace wren::train {

// An unreadable file, invalid UTF-8, or options that make no data; the message names which.
struct DataError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

struct Document {
  std::string file;  // the file it was read from
  int index = 0;     // its place among that file's documents
  std::string text;
};

// Every document of the given files and folders (folders: all regular files below them whose
// names do not start with '.', recursively), in sorted path order.
std::vector<Document> read_documents(const std::vector<std::string>& paths,
                                     const std::string& eot_marker = "<|endoftext|>");
// The documents of one text (`file` names it), split at eot_marker when it holds one.
std::vector<Document> split_documents(const std::string& file, const std::string& text,
                                      const std::string& eot_marker = "<|endoftext|>");

struct Batch {
  torch::Tensor inputs;   // [B, T] int64
  torch::Tensor targets;  // [B, T] int64
};

// One split's packed token stream.
struct PackedRows {
  int64_t seq_len = 0;           // T
  std::vector<int32_t> stream;   // rows() * T + 1 tokens (or empty)
  int64_t target_bytes = 0;
  std::vector<std::string> documents;  // "file#index" of every document in the stream, in order

  int64_t rows() const { return stream.empty() ? 0 : (int64_t(stream.size()) - 1) / seq_len; }
  // The rows `first` .. first + count - 1 as one batch.
  Batch batch(int64_t first, int64_t count) const;
  // The given rows, in the given order.
  Batch gather(const std::vector<int64_t>& rows) const;
};

struct CorpusOptions {
  int64_t seq_len = 0;                     // T
  std::vector<std::string> heldout_files = {};  // paths or bare file names
  int64_t heldout_every = 0;               // > 0: every k-th document is held out
  std::string eot = "<|endoftext|>";       // the tokenizer's end-of-text token
};

class Corpus {
 public:
  // Tokenizes the documents (special tokens in the text are read as plain text) and packs
  // both splits. Throws DataError for bad options or a tokenizer without the eot token.
  Corpus(const std::vector<Document>& docs, const text::Tokenizer& tok, const CorpusOptions& options);
  static Corpus load(const std::vector<std::string>& paths, const text::Tokenizer& tok,
                     const CorpusOptions& options);

  const PackedRows& train() const { return train_; }
  const PackedRows& heldout() const { return heldout_; }
  int32_t eot_id() const { return eot_id_; }

 private:
  PackedRows train_, heldout_;
  int32_t eot_id_ = -1;
};

// Training batches [B, T]: epoch e visits every row once, in the order of a Fisher-Yates shuffle
// seeded by (seed, e); batch n holds positions n B .. n B + B - 1 of the epochs laid end to end.
// `rows` must outlive the sampler.
class Sampler {
 public:
  Sampler(const PackedRows& rows, int64_t batch_size, uint64_t seed);
  std::vector<int64_t> batch_rows(int64_t step) const;
  Batch batch(int64_t step) const { return rows_.gather(batch_rows(step)); }
  // Row ids of epoch e in visiting order.
  const std::vector<int64_t>& epoch_order(int64_t epoch) const;

 private:
  const PackedRows& rows_;
  int64_t batch_size_;
  uint64_t seed_;
  mutable std::map<int64_t, std::vector<int64_t>> orders_;  // a few epochs, computed on demand
};

}  // namespace wren::train
