// model/: Nenya's gated engram (NOTES.md 2; DeepSeek Engram, arXiv 2601.07372). Before each
// listed layer, with that layer's own tables (EngramHasher salted by the layer index):
//   e     = concat of the rows the n-grams ending at the current token name   (engram_lookup)
//   v     = W_value e                                          shared by the n streams, [d]
//   k_s   = W_key[s] e                                         one key per stream, [d]
//   a_s   = sigmoid(<RMSNorm(x_s; stream_norm[s]), RMSNorm(k_s; key_norm[s])> / sqrt(d))
//   u_s   = a_s v
//   x_s  += conv_s(u),  conv_s(u)[c] = sum_{i<K} conv[c, i] u_{s, t-(K-1)+i}[c]
// The conv is causal and depthwise over the current and K-1 previous u_s of the same stream
// (zeros before the start), weights conv [d, K] without bias, PyTorch's Conv1d layout: the
// last column multiplies the current token.
//
// This is NOTES.md's form. REFERENCES.md's DeepSeek form differs in two places, neither used:
// the gate takes a signed square root first, a = sigmoid(sign(s) sqrt(max(|s|, 1e-6))), and
// the addition is Y = a v + SiLU(conv(RMSNorm(a v))) with a dilated conv.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "kernels/threads.h"
#include "config/engram_hash.h"
#include "model/tensor.h"

namespace wren {

struct EngramGateWeights {
  MatrixView tables;   // [total rows, row_dim]
  MatrixView w_value;  // [d, width]
  MatrixView w_key;    // [n d, width]: stream s's key projection is rows [s d, (s+1) d)
  Vec key_norm, stream_norm;  // [n d]
  Vec conv;                   // [d K]
};

// Per sequence and engram layer: the last K-1 gated values u_s of every stream, [n][K-1][d],
// oldest first. A fresh or reset state is all zeros (no tokens before the start).
struct EngramGateState {
  int n = 0, d = 0, kernel = 0;
  std::vector<float> history;
  void init(int n, int d, int kernel);
  void reset();  // a new sequence (or a document boundary)
};

// Per-session buffers; they grow on first use and are reused afterwards. `alpha` holds the
// last call's gate per stream (the seed's Figure 7a statistic).
struct EngramGateScratch {
  std::vector<float> e, v, k, xn, u, alpha;
  std::vector<int64_t> rows;
};

// Adds the engram of the token ending `context` (the last max_order ids, oldest first, kPad
// before the start) into every stream of `streams` ([n][d]; n = 1 on a plain residual) and
// advances `state`. eps and unit_offset are the model's RMSNorm settings.
// Throws std::runtime_error if a weight or the state does not match n, d and the hasher.
void engram_gate_add(const EngramGateWeights& w, const EngramHasher& hasher, std::span<const int32_t> context,
                     float* streams, int n, int d, float eps, bool unit_offset, EngramGateState& state,
                     EngramGateScratch& s, kernels::ThreadPool* pool = nullptr);

// The same split in two for a batch (prefill's chunk): the rows' lookups e_t ([n][width],
// engram_lookup per row) meet W_value and W_key once, as one GEMM each (model/region.h);
// then each row in order adds its gated engram from its own v_t and keys, advancing the
// conv state as engram_gate_add would (engram_gate_apply).
struct EngramGateBatch {
  std::vector<float> e, v, k;  // [n][width], [n][d], [n][n_streams d]
  std::vector<int64_t> rows;   // one row's table rows (scratch of the lookups)
  int64_t width = 0, d = 0, nd = 0;
  float* e_row(int64_t t) { return e.data() + t * width; }
};
// Sizes b for n rows of this layer's shapes (the caller then fills e_row(t) by engram_lookup).
void engram_gate_batch_reserve(const EngramGateWeights& w, const EngramHasher& hasher, int64_t n, EngramGateBatch& b);
// v = W_value e and k = W_key e for the n rows of b.e.
void engram_gate_batch_project(const EngramGateWeights& w, int64_t n, EngramGateBatch& b, kernels::ThreadPool* pool);
// A row's projections: v [d], keys [n d] (normalised in place when applied).
struct EngramGateRow {
  const float* v = nullptr;
  float* k = nullptr;
};
inline EngramGateRow engram_gate_row(EngramGateBatch& b, int64_t t) {
  return {b.v.data() + t * b.d, b.k.data() + t * b.nd};
}
// engram_gate_add's gate and conv from a row's projections.
void engram_gate_apply(const EngramGateWeights& w, EngramGateRow row, float* streams, int n, int d, float eps,
                       bool unit_offset, EngramGateState& state, EngramGateScratch& s);

}  // namespace wren
