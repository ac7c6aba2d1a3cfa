// train/: the Embla engram (DeepSeek Engram; NOTES.md 1) over whole sequences, mirroring
// model/engram.h. The n-grams ending at each token name one row in each table
// (config/engram_hash); the rows concatenate to g_t, a residual source only.
#pragma once

#include <torch/torch.h>

#include "config/engram_hash.h"
#include "train/common.h"

namespace wren::train {

// The row of each table each token reads: [B, T, tables] int64 (table offsets included).
// A token's context is the last max_order ids of its own document, the pad id before the
// document's start (the engine's pad before the sequence start, when there is one document).
torch::Tensor engram_rows(const EngramHasher& hasher, const Layout& l);

// g = the rows of `tables` ([total rows, row_dim]) concatenated: [B, T, tables * row_dim].
torch::Tensor engram_lookup(const torch::Tensor& tables, const torch::Tensor& rows);

}  // namespace wren::train
