// Attention-residual mix, the batched form of model/attn_residuals.cpp:
//   a_s = w . RMSNorm_g(x_s),  h = sum_s softmax_s(a)_s x_s   (per token, over the sources s)
#include "train/attn_residuals.h"

#include "train/common.h"

namespace wren::train {

torch::Tensor attn_res_mix(const MixParams& w, const std::vector<torch::Tensor>& sources, const ModelConfig& c) {
  torch::Tensor x = torch::stack(sources);                               // [S, B, T, d]
  torch::Tensor scores = (rmsnorm(x, w.norm, c) * w.query).sum(-1, true);  // [S, B, T, 1]
  return (torch::softmax(scores, 0) * x).sum(0);
}

}  // namespace wren::train
