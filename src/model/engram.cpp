#include "model/engram.h"

#include "kernels/types.h"

namespace wren {

void engram_lookup(const EngramHasher& hasher, const MatrixView& tables, std::span<const int32_t> context, float* g,
                   std::span<int64_t> rows) {
  hasher.rows(context, rows);
  for (size_t t = 0; t < rows.size(); ++t) kernels::decode_row(tables, rows[t], g + int64_t(t) * tables.cols);
}

}  // namespace wren
