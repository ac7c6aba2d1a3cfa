// train/: the Mamba-2 mixer over whole sequences, mirroring model/mamba2.h:
//   z = W_g x,   [x~, B, C] = SiLU(conv_K([W_x x, W_b x, W_c x]) + bias)
//   dt = softplus(W_decay x + decay_bias),   A = -exp(a_log)
//   S_t = exp(dt_t A) S_{t-1} + dt_t x~_t B_t^T,   y_t = S_t C_t + D x~_t     (per head)
//   out = W_o (RMSNorm_G(y * SiLU(z)) * o_norm)
// in chunks (the SSD form of Dao & Gu 2024): inside a chunk y = (M o C B^T) (dt x) with
// M_rs = exp(cum_r - cum_s) for s <= r in r's document, cum the running sum of dt A, plus the
// state carried in from before the chunk where r's document began before it. A document's
// first token starts from a zero state, as a fresh engine session.
#pragma once

#include <torch/torch.h>

#include "config/model_config.h"
#include "train/common.h"

namespace wren::train {

struct Mamba2Params {
  torch::Tensor wg, w_x, w_b, w_c, w_decay;                // [h P | G N | h, d]
  torch::Tensor conv_x, conv_b, conv_c;                    // [channels, K]
  torch::Tensor conv_x_bias, conv_b_bias, conv_c_bias;     // [channels] or undefined
  torch::Tensor decay_bias, a_log, d_skip;                 // [h]
  torch::Tensor o_norm;                                    // [h P]
  torch::Tensor wo;                                        // [d, h P]
};

// xn [B, T, d] -> [B, T, d].
torch::Tensor mamba2(const Mamba2Params& p, const MixerSpec& m, const ModelConfig& c, const Layout& l,
                     const torch::Tensor& xn);

}  // namespace wren::train
