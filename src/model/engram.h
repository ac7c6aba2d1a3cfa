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

// Asks the kernel to start reading `rows` of `tables` (their values and scales), with
// madvise(MADV_WILLNEED) on the pages they lie on, and returns their bytes. The tables are
// mapped from their file and read by row: on a device whose page cache does not hold them,
// each row is a read from storage. Requested when a token's step starts, a token's rows are
// in flight together and behind the layers that run before they are read, instead of one
// page fault after another on the step's path. Advice only: resident pages cost a syscall.
double request_engram_rows(const MatrixView& tables, std::span<const int64_t> rows);

}  // namespace wren
