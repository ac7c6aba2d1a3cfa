// model/: the Gated DeltaNet sequence mixers, as pure functions over weights, a per-sequence
// state and a scratch: `gdn2` (Gated DeltaNet-2, seed 002 appendix A13: per-key-channel decay
// and erase, per-value-channel write) and plain `gdn` (arXiv 2412.06464: one decay and one
// beta per head). Decoding runs the recurrence one token at a time; prefill runs the same
// recurrence in chunks of 64 tokens in the WY/UT form (REFERENCES.md), and both leave the
// state exactly where the other would (up to rounding).
//
// One recurrence covers both kinds. Per value head, with S in R^{d_k x d_v} (layout [d_k][d_v]):
//   S' = Diag(e^g) S                              decay, g <= 0 per key channel
//   S  = S' + k (w * v - S'^T (b * k))^T          erase b per key channel, write w per value channel
//   o  = S^T q / sqrt(d_k)
// gdn2 draws g, b, w per channel; plain gdn uses one g and one beta per head, b = w = beta, which
// gives S = a (I - beta k k^T) S + beta k v^T.
#pragma once

#include <cstdint>
#include <vector>

#include "config/model_config.h"
#include "kernels/threads.h"
#include "model/tensor.h"

namespace wren {

// One layer's weights, named by their weight-map suffixes after "attn." (docs/weights.md).
// Low-rank projections (gate_rank / out_gate_rank > 0) fill X_a [r, d] and X_b [out, r]
// instead of X; whatever the config does not name stays empty (rows == 0).
struct GdnWeights {
  MatrixView wq, wk, wv;                      // [h d_k, d], [h d_k, d], [h_v d_v, d]
  MatrixView w_decay, w_decay_a, w_decay_b;   // gdn2: [h_v d_k, d]; gdn: [h_v, d]
  MatrixView w_erase, w_erase_a, w_erase_b;   // gdn2: [h_v d_k, d]
  MatrixView w_write, w_write_a, w_write_b;   // gdn2: [h_v d_v, d]
  MatrixView w_beta;                          // gdn: [h_v, d]
  MatrixView wg, wg_a, wg_b;                  // output gate [h_v d_v, d]
  MatrixView wo;                              // [d, h_v d_v]
  // Depthwise causal convs [channels][K]: tap j multiplies the input K-1-j tokens back, so
  // tap K-1 is the current token (PyTorch Conv1d / causal-conv1d layout).
  Vec conv_q, conv_k, conv_v;
  Vec decay_bias;  // gdn2: [h_v d_k]; gdn: [h_v]
  Vec a_log;       // [h_v]: A_h, the decay scale is e^{A_h}
  Vec o_norm;      // [d_v]: RMSNorm gain shared by the heads
};

// One sequence's memory of a GDN layer: what the short convs still need and the recurrent state.
struct GdnState {
  int taps = 0;                     // K - 1 previous inputs the convs read
  int qk_channels = 0, v_channels = 0;
  int v_heads = 0, d_k = 0, d_v = 0;
  // The last K-1 projected inputs before the conv, oldest first: [K-1][channels].
  std::vector<float> conv_q, conv_k, conv_v;
  std::vector<float> S;  // [h_v][d_k][d_v], fp32

  void init(const MixerSpec& m);  // sizes for m, all zero
  void reset();                   // a document boundary: zero tails and state, keep sizes
};

// Working memory of the GDN layers, preallocated so no token allocates. Sized for up to
// max_tokens prompt tokens at a time; gdn_prefill walks longer prompts in pieces of that size.
struct GdnScratch {
  int64_t max_tokens = 0;
  std::vector<float> q_in, k_in, v_in;  // [K-1 + tokens][channels]: conv tail, then the projections
  std::vector<float> q, k, v;           // [tokens][channels]: after conv, SiLU, L2 norm (q, k)
  std::vector<float> log_decay, erase;  // [tokens][h_v d_k]: g and b (plain gdn: broadcast per head)
  std::vector<float> write;             // [tokens][h_v d_v]: w (plain gdn: beta)
  std::vector<float> gate, o;           // [tokens][h_v d_v]: output gate, heads' outputs
  std::vector<float> low_rank;          // [tokens][rank]: x through the first factor
  std::vector<float> per_head;          // [tokens][h_v]: plain gdn's scalar gate pre-activations
  std::vector<double> gamma;            // [h_v][64][d_k]: within-chunk cumulative log-decay
  std::vector<float> chunk;             // [h_v][per-head chunk buffers], see gated_deltanet.cpp

  // Grows (never shrinks) to hold `m` for max_tokens tokens at a time; call once per GDN
  // mixer of the model. d_model is part of the engine's common scratch signature; the
  // buffers here are all mixer-sized.
  void reserve(const MixerSpec& m, int d_model, int64_t max_tokens);
};

// One token: x [d] -> out [d], advancing `state` by the recurrence.
void gdn_decode(const GdnWeights& w, const MixerSpec& m, const ModelConfig& c, const float* x, GdnState& state,
                GdnScratch& s, float* out, kernels::ThreadPool* pool);

// A prompt: x [T][d] -> out [T][d], continuing from `state` and leaving it as T decodes would.
// Chunks of 64 tokens run the WY/UT form; the result does not depend on how a prompt is split.
void gdn_prefill(const GdnWeights& w, const MixerSpec& m, const ModelConfig& c, const float* x, int64_t T,
                 GdnState& state, GdnScratch& s, float* out, kernels::ThreadPool* pool);

}  // namespace wren
