// train/: the Gated DeltaNet mixers (`gdn`, `gdn2`) over whole sequences, the libtorch
// mirror of model/gated_deltanet.h (same equations, gates, convs, norms and eps; the
// equations are in gated_deltanet.cpp). Two forms of the same function: the chunked WY/UT
// form used for training, and the plain token-by-token recurrence that is its oracle.
// Documents (NOTES.md 4): the recurrent state starts from zero at each document's first token
// and the short convs read zeros before it, so each document is computed as if run alone.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <map>
#include <string>

#include "config/model_config.h"
#include "train/common.h"

namespace wren::train {

// One layer's GDN tensors, named by their weight-map suffixes after "layers.N." (weight_map.cpp):
//   attn.wq, attn.wk         -> wq, wk        [h d_k, d]
//   attn.wv                  -> wv            [h_v d_v, d]
//   attn.conv_q/_k/_v        -> conv_q/k/v    [channels, K]; tap K-1 is the current token
//   attn.w_decay(_a, _b)     -> w_decay(_a, _b)   gdn2: [h_v d_k, d] (or [r, d], [h_v d_k, r]); gdn: [h_v, d]
//   attn.decay_bias          -> decay_bias    gdn2: [h_v d_k]; gdn: [h_v]
//   attn.w_erase(_a, _b)     -> w_erase(_a, _b)   gdn2 only: [h_v d_k, d]
//   attn.w_write(_a, _b)     -> w_write(_a, _b)   gdn2 only: [h_v d_v, d]
//   attn.w_beta              -> w_beta        gdn only: [h_v, d]
//   attn.a_log               -> a_log         [h_v]: the decay scale is e^{A_h}
//   attn.wg(_a, _b)          -> wg(_a, _b)    output gate [h_v d_v, d] (low-rank with out_gate_rank)
//   attn.o_norm              -> o_norm        [d_v]: RMSNorm gain shared by the heads
//   attn.wo                  -> wo            [d, h_v d_v]
// A projection given low-rank (gate_rank / out_gate_rank > 0) fills X_a, X_b and leaves X
// undefined; members the config does not name stay undefined.
struct GdnParams {
  torch::Tensor wq, wk, wv;
  torch::Tensor conv_q, conv_k, conv_v;
  torch::Tensor w_decay, w_decay_a, w_decay_b, decay_bias;
  torch::Tensor w_erase, w_erase_a, w_erase_b;
  torch::Tensor w_write, w_write_a, w_write_b;
  torch::Tensor w_beta;
  torch::Tensor a_log;
  torch::Tensor wg, wg_a, wg_b;
  torch::Tensor o_norm;
  torch::Tensor wo;
};

// Fills slots: layer-local weight-map name ("attn.wq", ..., config/weight_slots.h) -> &member.
// Assigns (overwrites) entries of the same name, so a caller that already put the attention
// slots "attn.wq" etc. into the map can call this for a GDN layer to take them over.
void gdn_slots(std::map<std::string, torch::Tensor*>& slots, GdnParams& p);

// xn: [B, T, d_model], the normed sublayer input. Returns the mixer output [B, T, d_model]
// (after the output projection). Chunked WY/UT form, the state reset and the short convs kept
// inside each document of `l`. Differentiable in p and xn. Chunks of gdn_chunk_length(m) tokens.
torch::Tensor gated_deltanet(const GdnParams& p, const MixerSpec& m, const ModelConfig& c, const Layout& l,
                             const torch::Tensor& xn);

// The chunk length the training form uses: 64 for gdn (one decay per head, so the pairwise
// decays within a chunk are a [C, C] matrix), 16 for gdn2 (per key channel decays make them
// [C, C, d_k], whose memory and exps grow with C).
int64_t gdn_chunk_length(const MixerSpec& m);

// The chunked form with an explicit chunk length (>= 1): the result does not depend on it.
torch::Tensor gated_deltanet_chunked(const GdnParams& p, const MixerSpec& m, const ModelConfig& c, const Layout& l,
                                     const torch::Tensor& xn, int64_t chunk);

// The same computed token by token (the plain recurrence S_t = Diag(e^{g_t}) S_{t-1} + ...),
// the oracle for the chunked form.
torch::Tensor gated_deltanet_recurrent(const GdnParams& p, const MixerSpec& m, const ModelConfig& c, const Layout& l,
                                       const torch::Tensor& xn);

}  // namespace wren::train
