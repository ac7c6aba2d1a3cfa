// model/: the gated short convolution of LFM2 (Liquid AI's "double-gated LIV convolution"), a
// sequence mixer without heads or cache: per token, over d channels,
//   [b, c, x~] = [W_b x, W_c x, W_x x]
//   u_t = b_t * x~_t                                    (input gate)
//   y_t = sum_j conv[:, j] * u_{t-(K-1)+j}             (causal depthwise conv, K taps)
//   out = W_o (c_t * y_t)                               (output gate)
// The state is the last K-1 gated inputs u, oldest first: a fresh sequence reads zeros there.
#pragma once

#include <cstdint>
#include <vector>

#include "config/model_config.h"
#include "kernels/threads.h"
#include "model/tensor.h"

namespace wren {

// One layer's weights, named by their weight-map suffixes after "attn." (docs/weights.md).
struct ShortConvWeights {
  MatrixView w_b, w_c, w_x;  // [d, d] each: LFM2's in_proj rows B, C, x
  Vec conv;                  // [d][K]: tap K-1 multiplies the current token (PyTorch Conv1d layout)
  MatrixView wo;             // [d, d]
};

// One sequence's memory of a short-conv layer.
struct ShortConvState {
  int taps = 0;            // K - 1
  int64_t channels = 0;    // d
  std::vector<float> tail;  // [K-1][d]: the last gated inputs u, oldest first

  void init(const MixerSpec& m, int64_t d_model);
  void reset();  // a document boundary: zeros, sizes kept
};

// Working memory for up to max_tokens tokens at a time, so no token allocates.
struct ShortConvScratch {
  int64_t max_tokens = 0;
  std::vector<float> b, c, x, u;  // [tokens][d]; u holds the K-1 taps of the state first
  void reserve(const MixerSpec& m, int64_t d_model, int64_t max_tokens);
};

// One token: x [d] -> out [d], advancing `state`.
void short_conv_decode(const ShortConvWeights& w, const MixerSpec& m, const float* x, ShortConvState& state,
                       ShortConvScratch& s, float* out, kernels::ThreadPool* pool);

// T tokens: x [T][d] -> out [T][d], continuing from `state` and leaving it as T decodes would
// (the projections as batched products; the same sums in the same order per token).
void short_conv_prefill(const ShortConvWeights& w, const MixerSpec& m, const float* x, int64_t T, ShortConvState& state,
                        ShortConvScratch& s, float* out, kernels::ThreadPool* pool);

}  // namespace wren
