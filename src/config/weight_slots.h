// config/: the one table from weight-map names to the members that hold them. The engine's
// model/LayerWeights and the trainer's train/LayerParams name their members alike (the
// SHAPE.md mirror), so both fill their slots by walking these functions; `slot(name, member)`
// is called once per name, with the member's own type (kernel views and f32 vectors in the
// engine, torch tensors in the trainer). Names are relative: model-level ("embed",
// "final_res.query") or relative to "layers.<i>." ("attn.wq").
#pragma once

#include <string>
#include <utility>

#include "config/model_config.h"

namespace wren::slots {

// "layers.12.attn.wq" -> (12, "attn.wq"); model-level names -> (-1, name).
inline std::pair<int, std::string> split_name(const std::string& name) {
  if (name.rfind("layers.", 0) != 0) return {-1, name};
  const size_t dot = name.find('.', 7);
  return {std::stoi(name.substr(7, dot - 7)), name.substr(dot + 1)};
}

template <class Ffn, class Slot>
void ffn(const std::string& p, Ffn& f, Slot&& slot) {
  slot(p + "w_gate", f.w_gate), slot(p + "w_up", f.w_up), slot(p + "w_down", f.w_down);
  slot(p + "b_gate", f.b_gate), slot(p + "b_up", f.b_up), slot(p + "b_down", f.b_down);
}

template <class Mix, class Slot>
void mix(const std::string& p, Mix& m, Slot&& slot) {
  slot(p + "query", m.query), slot(p + "norm", m.norm);
}

template <class Mhc, class Slot>
void mhc(const std::string& p, Mhc& m, Slot&& slot) {
  slot(p + "phi", m.phi), slot(p + "alpha", m.alpha), slot(p + "bias", m.bias);
}

template <class Mla, class Slot>
void mla(Mla& a, Slot&& slot) {
  slot("attn.wq", a.wq), slot("attn.wq_a", a.wq_a), slot("attn.q_a_norm", a.q_a_norm), slot("attn.wq_b", a.wq_b);
  slot("attn.wkv_a", a.wkv_a), slot("attn.kv_a_norm", a.kv_a_norm), slot("attn.wk_b", a.wk_b);
  slot("attn.wv_b", a.wv_b), slot("attn.wg", a.wg), slot("attn.wo", a.wo);
}

template <class Gdn, class Slot>
void gdn(Gdn& g, Slot&& slot) {
  slot("attn.wq", g.wq), slot("attn.wk", g.wk), slot("attn.wv", g.wv);
  slot("attn.conv_q", g.conv_q), slot("attn.conv_k", g.conv_k), slot("attn.conv_v", g.conv_v);
  slot("attn.w_decay", g.w_decay), slot("attn.w_decay_a", g.w_decay_a), slot("attn.w_decay_b", g.w_decay_b);
  slot("attn.decay_bias", g.decay_bias);
  slot("attn.w_erase", g.w_erase), slot("attn.w_erase_a", g.w_erase_a), slot("attn.w_erase_b", g.w_erase_b);
  slot("attn.w_write", g.w_write), slot("attn.w_write_a", g.w_write_a), slot("attn.w_write_b", g.w_write_b);
  slot("attn.w_beta", g.w_beta), slot("attn.a_log", g.a_log);
  slot("attn.wg", g.wg), slot("attn.wg_a", g.wg_a), slot("attn.wg_b", g.wg_b);
  slot("attn.o_norm", g.o_norm), slot("attn.wo", g.wo);
}

template <class ShortConv, class Slot>
void short_conv(ShortConv& s, Slot&& slot) {
  slot("attn.w_b", s.w_b), slot("attn.w_c", s.w_c), slot("attn.w_x", s.w_x), slot("attn.conv", s.conv), slot("attn.wo", s.wo);
}

template <class Mamba2, class Slot>
void mamba2(Mamba2& s, Slot&& slot) {
  slot("attn.wg", s.wg), slot("attn.w_x", s.w_x), slot("attn.w_b", s.w_b), slot("attn.w_c", s.w_c);
  slot("attn.w_decay", s.w_decay), slot("attn.conv_x", s.conv_x), slot("attn.conv_b", s.conv_b), slot("attn.conv_c", s.conv_c);
  slot("attn.conv_x_bias", s.conv_x_bias), slot("attn.conv_b_bias", s.conv_b_bias), slot("attn.conv_c_bias", s.conv_c_bias);
  slot("attn.decay_bias", s.decay_bias), slot("attn.a_log", s.a_log), slot("attn.d_skip", s.d_skip);
  slot("attn.o_norm", s.o_norm), slot("attn.wo", s.wo);
}

template <class Attention, class Slot>
void attention(Attention& a, Slot&& slot) {
  slot("attn.wq", a.wq), slot("attn.wk", a.wk), slot("attn.wv", a.wv), slot("attn.wg", a.wg), slot("attn.wo", a.wo);
  slot("attn.bq", a.bq), slot("attn.bk", a.bk), slot("attn.bv", a.bv), slot("attn.bo", a.bo);
  slot("attn.q_norm", a.q_norm), slot("attn.k_norm", a.k_norm), slot("attn.sinks", a.sinks);
}

// The mixer's tensors share the "attn." prefix; which members they fill depends on its kind.
template <class Layer, class Slot>
void mixer(MixerKind kind, Layer& l, Slot&& slot) {
  if (kind == MixerKind::mla) mla(l.mla, slot);
  else if (kind == MixerKind::gdn || kind == MixerKind::gdn2) gdn(l.gdn, slot);
  else if (kind == MixerKind::short_conv) short_conv(l.short_conv, slot);
  else if (kind == MixerKind::mamba2) mamba2(l.mamba2, slot);
  else attention(l.attn, slot);
}

// Every slot of one layer whose mixer is of `kind`.
template <class Layer, class Slot>
void layer(MixerKind kind, Layer& l, Slot&& slot) {
  slot("attn_norm", l.attn_norm), slot("ffn_norm", l.ffn_norm);
  slot("attn_post_norm", l.attn_post_norm), slot("ffn_post_norm", l.ffn_post_norm);
  mix("attn_res.", l.attn_res, slot), mix("ffn_res.", l.ffn_res, slot), mix("kv_bridge.", l.kv_bridge, slot);
  mhc("attn_mhc.", l.attn_mhc, slot), mhc("ffn_mhc.", l.ffn_mhc, slot);
  auto& e = l.engram;
  slot("engram.tables", e.tables), slot("engram.w_value", e.w_value), slot("engram.w_key", e.w_key);
  slot("engram.key_norm", e.key_norm), slot("engram.stream_norm", e.stream_norm), slot("engram.conv", e.conv);
  mixer(kind, l, slot);
  ffn("ffn.", l.dense, slot);
  auto& m = l.moe;
  slot("ffn.router", m.router), slot("ffn.router_bias", m.router_bias), slot("ffn.balance_bias", m.balance_bias);
  slot("ffn.latent_down", m.latent_down), slot("ffn.latent_up", m.latent_up), slot("ffn.shared_gate", m.shared_gate);
  ffn("ffn.experts.", m.experts, slot);
  ffn("ffn.shared.", m.shared, slot);
}

// The model-level tensors, held by whatever members the consumer keeps them in.
template <class Top, class Slot>
void top(Top& t, Slot&& slot) {
  slot("embed", t.embed), slot("lm_head", t.lm_head), slot("engram.tables", t.engram_tables);
  slot("final_norm", t.final_norm);
  mix("final_res.", t.final_res, slot);
  mhc("final_mhc.", t.final_mhc, slot);
}

}  // namespace wren::slots
