// The engram over whole sequences (the equations are in train/engram.h): hash on the CPU (the
// same EngramHasher the engine uses, so the same n-grams name the same rows), gather the rows
//   e_t = concat_{tables j} T_j[hash_j(x_{t-n+1..t})]
// then, for Nenya's gated engram, gate, convolve and add into the streams.
#include "train/engram.h"

#include <algorithm>
#include <cmath>
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

torch::Tensor engram_gate_add(const EngramGateParams& w, const ModelConfig& c, const Layout& l, const torch::Tensor& x,
                              torch::Tensor* alpha) {
  const int64_t T = x.size(1), n = x.size(2), d = x.size(3), K = w.conv.size(1);
  const torch::Tensor e = engram_lookup(w.tables, engram_rows(*w.hasher, l));    // [B, T, width]
  const torch::Tensor v = linear_map(e, w.w_value);                               // [B, T, d]
  const torch::Tensor k = linear_map(e, w.w_key.view({n * d, -1})).unflatten(-1, {n, d});  // [B, T, n, d]
  const torch::Tensor score = (rmsnorm(x, w.stream_norm, c) * rmsnorm(k, w.key_norm, c)).sum(-1) / std::sqrt(double(d));
  const torch::Tensor a = torch::sigmoid(score);                                  // [B, T, n]
  if (alpha) *alpha = a.detach();
  const torch::Tensor u = a.unsqueeze(-1) * v.unsqueeze(2);                       // [B, T, n, d]
  // Tap K-1-s reads u from s tokens back, kept only where that token is in the same document
  // (pos >= s): the sum over s of conv[:, K-1-s] * u_{t-s}.
  torch::Tensor y = u * w.conv.select(1, K - 1);
  for (int64_t s = 1; s < std::min(K, T); ++s) {
    const torch::Tensor back = torch::cat({torch::zeros_like(u.narrow(1, 0, s)), u.narrow(1, 0, T - s)}, 1);
    const torch::Tensor same_doc = (l.pos >= s).to(u.scalar_type()).view({l.pos.size(0), T, 1, 1});
    y = y + back * same_doc * w.conv.select(1, K - 1 - s);
  }
  return x + y;
}

}  // namespace wren::train
