// train/: multi-head latent attention (DeepSeek-V2/V3, Nenya; NOTES.md 2) over whole sequences,
// mirroring model/mla.h (its reference form: K and V formed from the latent). With x the
// normed sublayer input (or, for a bridged layer, its bridge's normed mix):
//   [c_t ; k_pe_t] = W_kva x_t,  c_t <- RMSNorm(c_t; kv_a_norm),  k_pe_t <- RoPE(k_pe_t, pos_t) if rope
//   q_i = [q_nope_i ; q_pe_i] from W_q x, or W_qb RMSNorm(W_qa x; q_a_norm); q_pe_i rotated if rope
//   K_i,t = [W_UK_i c_t ; k_pe_t],   V_i,t = W_UV_i c_t      (W_UK_i, W_UV_i: head i's rows of wk_b, wv_b)
//   o_i = sum_{t in the query's document, t <= now} softmax_t(q_i . K_i,t * scale) V_i,t
//   y = W_o (o * sigmoid(W_g x))   (the gate only with output_gate)
// scale = spec.scale or 1 / sqrt(qk_nope_dim + qk_rope_dim), times YaRN's factor. RoPE
// positions count from each document's start (Layout.pos).
#pragma once

#include <torch/torch.h>

#include "config/model_config.h"
#include "model/rope.h"
#include "train/common.h"

namespace wren::train {

struct MlaParams {  // undefined = absent
  torch::Tensor wq, wq_a, q_a_norm, wq_b;
  torch::Tensor wkv_a, kv_a_norm, wk_b, wv_b;
  torch::Tensor wg, wo;
  RopeTable rope;  // the engine's mla_rope(spec)
};

// A layer's latent "cache" for the whole batch: the normalised latent c [B, T, kv_lora_rank]
// and the shared key k_pe [B, T, qk_rope_dim] (rotated when the layer has rope).
struct MlaLatents {
  torch::Tensor c, k_pe;
  bool defined() const { return c.defined(); }
};

MlaLatents mla_latents(const MlaParams& w, const MixerSpec& m, const ModelConfig& c, const Layout& l,
                       const torch::Tensor& x);

// The layer's output [B, T, d] for queries from x [B, T, d] over the latents of its cache.
torch::Tensor mla_attention(const MlaParams& w, const MixerSpec& m, const ModelConfig& c, const Layout& l,
                            const torch::Tensor& x, const MlaLatents& kv);

}  // namespace wren::train
