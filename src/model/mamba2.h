// model/: the Mamba-2 mixer (Dao & Gu 2024, "Transformers are SSMs": the SSD layer), as Granite
// 4.0-H, Bamba and Nemotron-H run it. Per token, over h heads of P channels whose B and C come
// from G groups (h / G heads share one), state width N:
//   z = W_g x,   [x~, B, C] = SiLU(conv_K([W_x x, W_b x, W_c x]) + conv bias)   (causal, depthwise)
//   dt_h = softplus(w_decay,h . x + decay_bias_h),   A_h = -exp(a_log_h)
//   S_h <- exp(dt_h A_h) S_h + dt_h x~_h B_g^T                                  (S_h: [P, N])
//   y_h = S_h C_g + D_h x~_h
//   out = W_o (RMSNorm_G(y * SiLU(z)) * o_norm)   (the norm over each group's h P / G channels)
// The state is the conv's last K-1 inputs [x, B, C] (before the conv) and every head's S: a
// fresh sequence reads zeros there.
#pragma once

#include <cstdint>
#include <vector>

#include "config/model_config.h"
#include "kernels/threads.h"
#include "model/tensor.h"

namespace wren {

// One layer's weights, named by their weight-map suffixes after "attn." (docs/weights.md).
struct Mamba2Weights {
  MatrixView wg, w_x;                  // [h P, d]: the gate z, the input x~
  MatrixView w_b, w_c;                 // [G N, d]
  MatrixView w_decay;                  // [h, d]: dt before its bias and softplus
  Vec conv_x, conv_b, conv_c;          // [channels][K]: tap K-1 multiplies the current token
  Vec conv_x_bias, conv_b_bias, conv_c_bias;  // [channels], empty without conv_bias
  Vec decay_bias, a_log, d_skip;       // [h]
  Vec o_norm;                          // [h P]
  MatrixView wo;                       // [d, h P]
};

// The widths one layer's buffers are laid out by.
struct Mamba2Dims {
  int64_t heads = 0, head_dim = 0, groups = 0, state = 0, taps = 0;  // h, P, G, N, K - 1
  int64_t inner() const { return heads * head_dim; }
  int64_t bc() const { return groups * state; }
  int64_t channels() const { return inner() + 2 * bc(); }  // the conv's: x~, then B, then C
  static Mamba2Dims of(const MixerSpec& m);
};

// One sequence's memory of a Mamba-2 layer.
struct Mamba2State {
  Mamba2Dims dims;
  std::vector<float> tail;  // [K-1][channels]: the conv's last inputs, oldest first
  std::vector<float> S;     // [h][P][N]

  void init(const MixerSpec& m);
  void reset();  // a document boundary: zeros, sizes kept
};

// Working memory for up to max_tokens tokens at a time, so no token allocates.
struct Mamba2Scratch {
  int64_t max_tokens = 0;
  std::vector<float> z;    // [tokens][h P]: the gate, then the gated and normalised y
  std::vector<float> xbc;  // [K-1 + tokens][channels]: the state's taps, then the projections
  std::vector<float> conv; // [tokens][channels]: after the conv and SiLU
  std::vector<float> dt;   // [tokens][h]
  void reserve(const MixerSpec& m, int64_t max_tokens);
};

// One token: x [d] -> out [d], advancing `state`.
void mamba2_decode(const Mamba2Weights& w, const MixerSpec& m, const ModelConfig& c, const float* x, Mamba2State& state,
                   Mamba2Scratch& s, float* out, kernels::ThreadPool* pool);

// T tokens: x [T][d] -> out [T][d], continuing from `state` and leaving it as T decodes would
// (the projections as batched products; every other step the same sums in the same order).
void mamba2_prefill(const Mamba2Weights& w, const MixerSpec& m, const ModelConfig& c, const float* x, int64_t T,
                    Mamba2State& state, Mamba2Scratch& s, float* out, kernels::ThreadPool* pool);

}  // namespace wren
