#include "model/attn_residuals.h"

#include <algorithm>

#include "kernels/ops.h"

namespace wren {

void attn_res_mix(const MixWeights& w, const ResidualSources& sources, int d, float eps, bool unit_offset, float* weights,
                  float* h, float* tmp) {
  const int64_t n = int64_t(sources.x.size());
  for (int64_t s = 0; s < n; ++s) {
    kernels::rmsnorm(sources.x[size_t(s)], w.norm.data(), d, eps, unit_offset, tmp);
    weights[s] = kernels::dot(w.query.data(), tmp, d);
  }
  kernels::softmax(weights, n);
  std::fill(h, h + d, 0.0f);
  for (int64_t s = 0; s < n; ++s) kernels::axpy(weights[s], sources.x[size_t(s)], d, h);
}

}  // namespace wren
