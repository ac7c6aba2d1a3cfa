// train/: block attention residuals (Kimi, arXiv 2603.15031; NOTES.md 1) over whole
// sequences, mirroring model/attn_residuals.h. A sublayer's input is a softmax-weighted mix
// of the residual sources that exist at its point:
//   h = sum_s softmax_s(w . RMSNorm(x_s)) x_s
// with the sublayer's own pseudo-query w and scoring gain; the values are not normalised.
#pragma once

#include <torch/torch.h>

#include <vector>

#include "config/model_config.h"

namespace wren::train {

// Pseudo-query and scoring gain of one attention-residual mix (or KV bridge, or read-out).
struct MixParams {
  torch::Tensor query, norm;
};

// sources: each [B, T, d], in the engine's order (e, g, B_0.., P). Returns h [B, T, d].
torch::Tensor attn_res_mix(const MixParams& w, const std::vector<torch::Tensor>& sources, const ModelConfig& c);

}  // namespace wren::train
