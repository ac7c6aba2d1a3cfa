// train/: the engram (DeepSeek Engram; NOTES.md 1-2) over whole sequences, mirroring
// model/engram.h and model/engram_gate.h. The n-grams ending at each token name one row in
// each table (config/engram_hash); the rows concatenate to e_t.
//   Embla: e_t is a residual source only (engram_lookup).
//   Nenya: before each listed layer, with that layer's own tables (its hasher salted by the
//   layer index), a gated value is added into every stream s of x [B, T, n, d]:
//     v   = W_value e                                          shared by the streams, [d]
//     k_s = W_key[s] e                                         one key per stream, [d]
//     a_s = sigmoid(<RMSNorm(x_s; stream_norm[s]), RMSNorm(k_s; key_norm[s])> / sqrt(d))
//     u_s = a_s v
//     x_s += conv(u_s),  conv(u_s)_t[c] = sum_{i<K} conv[c, i] u_{s, t-(K-1)+i}[c]
//   a causal depthwise conv (the last column multiplies the current token) that reads zeros
//   before the document's start, as the engine's history reads zeros after a reset.
#pragma once

#include <torch/torch.h>

#include <optional>

#include "config/engram_hash.h"
#include "train/common.h"

namespace wren::train {

// The row of each table each token reads: [B, T, tables] int64 (table offsets included).
// A token's context is the last max_order ids of its own document, the pad id before the
// document's start (the engine's pad before the sequence start, when there is one document).
torch::Tensor engram_rows(const EngramHasher& hasher, const Layout& l);

// g = the rows of `tables` ([total rows, row_dim]) concatenated: [B, T, tables * row_dim].
torch::Tensor engram_lookup(const torch::Tensor& tables, const torch::Tensor& rows);

// One Nenya engram layer's tensors (weight-map names "layers.N.engram.*") and its hasher.
struct EngramGateParams {
  torch::Tensor tables;       // [total rows, row_dim]
  torch::Tensor w_value;      // [d, width]
  torch::Tensor w_key;        // [n, d, width]
  torch::Tensor key_norm, stream_norm;  // [n, d]
  torch::Tensor conv;         // [d, K]
  std::optional<EngramHasher> hasher;
};

// x [B, T, n, d] (n = 1 on a plain residual) -> x with the gated engram added to every stream.
// `alpha`, when not null, receives the gates a_s [B, T, n] (detached).
torch::Tensor engram_gate_add(const EngramGateParams& w, const ModelConfig& c, const Layout& l, const torch::Tensor& x,
                              torch::Tensor* alpha = nullptr);

}  // namespace wren::train
