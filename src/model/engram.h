// model/: the engram lookup (DeepSeek Engram; NOTES.md 1). The n-grams ending at the current
// token name one row in each table (config/engram_hash); the rows, read from the table file
// by row and never loaded whole, concatenate to g_t. In Embla g_t is a residual source only.
#pragma once

#include <cstdint>
#include <span>

#include "config/engram_hash.h"
#include "model/tensor.h"

namespace wren {

// `context`: the last max_order token ids, oldest first (EngramHasher::kPad before the
// start). Writes tables x row_dim values to g; `rows` receives the row indices it read.
void engram_lookup(const EngramHasher& hasher, const MatrixView& tables, std::span<const int32_t> context, float* g,
                   std::span<int64_t> rows);

}  // namespace wren
