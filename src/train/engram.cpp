// The engram lookup over whole sequences: hash on the CPU (the same EngramHasher the engine
// uses, so the same n-grams name the same rows), then gather the rows:
//   g_t = concat_{tables j} T_j[hash_j(x_{t-n+1..t})]
#include "train/engram.h"

#include <vector>

namespace wren::train {

torch::Tensor engram_rows(const EngramHasher& hasher, const Layout& l) {
  const torch::Tensor tokens = l.tokens.to(torch::kCPU).contiguous(), start = l.start.to(torch::kCPU).contiguous();
  const int64_t B = tokens.size(0), T = tokens.size(1), order = hasher.max_order(), tables = hasher.tables();
  torch::Tensor rows = torch::empty({B, T, tables}, torch::kInt64);
  auto id = tokens.accessor<int64_t, 2>();
  auto first = start.accessor<int64_t, 2>();
  int64_t* out = rows.data_ptr<int64_t>();
  std::vector<int32_t> context(static_cast<size_t>(order));
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < T; ++t, out += tables) {
      for (int64_t k = 0; k < order; ++k) {  // oldest first; the current token last
        const int64_t p = t - order + 1 + k;
        context[size_t(k)] = p >= first[b][t] ? int32_t(id[b][p]) : EngramHasher::kPad;
      }
      hasher.rows(context, std::span<int64_t>(out, size_t(tables)));
    }
  return rows.to(l.tokens.device());
}

torch::Tensor engram_lookup(const torch::Tensor& tables, const torch::Tensor& rows) {
  torch::Tensor g = tables.index_select(0, rows.flatten());  // [B * T * tables, row_dim]
  return g.view({rows.size(0), rows.size(1), -1});
}

}  // namespace wren::train
