// train/: the attention mechanisms of Embla (and the softmax attention of ordinary models)
// over whole sequences, mirroring model/attention.h one to one (the equations are in
// attention.cpp). Tensors are [B, heads, T, head_dim] inside, [B, T, d] outside.
#pragma once

#include <torch/torch.h>

#include "config/model_config.h"
#include "model/rope.h"
#include "train/common.h"

namespace wren::train {

struct AttentionParams {  // attention, relu2_attention, sparse_reuse; undefined = absent
  torch::Tensor wq, wk, wv, wg, wo;
  torch::Tensor bq, bk, bv, bo, q_norm, k_norm, sinks;
  RopeTable rope;  // RoPE layers: the engine's frequencies (model/rope.h)
};

// A layer's "cache" for the whole batch: keys as the mechanisms read them (normalised and /
// or rotated), values. [B, n_kv_heads, T, head_dim].
struct KvEntries {
  torch::Tensor k, v;
  bool defined() const { return k.defined(); }
};

// q = W_q x (+ b_q), QK-norm per head (or over the whole projection), RoPE at each token's
// document position. [B, n_heads, T, head_dim].
torch::Tensor project_query(const AttentionParams& w, const MixerSpec& m, const ModelConfig& c, const Layout& l,
                            const torch::Tensor& x);
// K and V from the K/V input x, stored as the layer reads them.
KvEntries project_kv(const AttentionParams& w, const MixerSpec& m, const ModelConfig& c, const Layout& l,
                     const torch::Tensor& x);
// out = W_o (o * sigmoid(W_g x) if gated) (+ b_o) from the heads' outputs o [B, H, T, dv].
torch::Tensor project_output(const AttentionParams& w, const torch::Tensor& x, const torch::Tensor& o);

// Softmax attention over the keys of the query's document within `window` tokens (the
// current one included; 0 = all), with an optional per-head sink logit. When group_scores
// is not null it receives (detached) the per-KV-head maximum over the query group of the
// scaled logits, -inf outside the mask, for the sparse layers that select by them.
torch::Tensor window_attention(const AttentionParams& w, const MixerSpec& m, const ModelConfig& c, const Layout& l,
                               const torch::Tensor& x, const KvEntries& kv, int window, torch::Tensor* group_scores);

// Sevren Sparse Attention: w_j = max(s_j, 0)^2, o = sum_j w_j v_j / (c + sum_j w_j); group
// scores as above (pre-ReLU s_j).
torch::Tensor relu2_attention(const AttentionParams& w, const MixerSpec& m, const ModelConfig& c, const Layout& l,
                              const torch::Tensor& x, const KvEntries& kv, torch::Tensor* group_scores);

// The sparse selection [B, G, T, T] (bool): per KV head and query, the top_k keys by group
// score union the `recent` most recent keys of the document; all of them when the document
// holds n <= top_k + recent keys up to the query. Not differentiable: made under no_grad.
torch::Tensor select_keys(const torch::Tensor& group_scores, const Layout& l, int top_k, int recent);

// A sparse layer: its own softmax(q^ . k^ / sqrt(d_h)) over the selection of the owner's keys.
torch::Tensor sparse_attention(const AttentionParams& w, const MixerSpec& m, const ModelConfig& c, const Layout& l,
                               const torch::Tensor& x, const KvEntries& kv, const torch::Tensor& group_scores);

}  // namespace wren::train
