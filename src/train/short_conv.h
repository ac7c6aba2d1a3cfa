// train/: the gated short convolution (LFM2) over whole sequences, mirroring model/short_conv.h:
//   [b, c, x~] = [W_b x, W_c x, W_x x],   y = W_o (c * conv(b * x~))
// with the causal depthwise conv of K taps inside each document (common.h's causal_conv): at a
// document's first token the taps before it read zeros, as a fresh engine session.
#pragma once

#include <torch/torch.h>

#include "config/model_config.h"
#include "train/common.h"

namespace wren::train {

struct ShortConvParams {
  torch::Tensor w_b, w_c, w_x;  // [d, d]
  torch::Tensor conv;           // [d, K]
  torch::Tensor wo;             // [d, d]
};

// xn [B, T, d] -> [B, T, d].
torch::Tensor gated_short_conv(const ShortConvParams& p, const MixerSpec& m, const Layout& l, const torch::Tensor& xn);

}  // namespace wren::train
