// Loading: walk the weight map and put each tensor in its slot by name. The weight map is
// the one list of what exists, so a slot without a tensor stays empty (absent).
#include "model/model.h"

#include <stdexcept>

#include "kernels/ops.h"
#include "model/rope.h"

namespace wren {

namespace {

// "layers.12.attn.wq" -> (12, "attn.wq"); model-level names -> (-1, name).
std::pair<int, std::string> split_name(const std::string& name) {
  if (name.rfind("layers.", 0) != 0) return {-1, name};
  size_t dot = name.find('.', 7);
  return {std::stoi(name.substr(7, dot - 7)), name.substr(dot + 1)};
}

struct Slots {
  std::map<std::string, MatrixView*> matrices;
  std::map<std::string, Vec*> vectors;
};

void ffn_slots(Slots& s, const std::string& p, FfnWeights& f) {
  s.matrices[p + "w_gate"] = &f.w_gate;
  s.matrices[p + "w_up"] = &f.w_up;
  s.matrices[p + "w_down"] = &f.w_down;
  s.vectors[p + "b_gate"] = &f.b_gate;
  s.vectors[p + "b_up"] = &f.b_up;
  s.vectors[p + "b_down"] = &f.b_down;
}

void mix_slots(Slots& s, const std::string& p, MixWeights& m) {
  s.vectors[p + "query"] = &m.query;
  s.vectors[p + "norm"] = &m.norm;
}

void mhc_slots(Slots& s, const std::string& p, MhcWeights& m) {
  s.matrices[p + "phi"] = &m.phi;
  s.vectors[p + "alpha"] = &m.alpha;
  s.vectors[p + "bias"] = &m.bias;
}

// The mixer's tensors share the "attn." prefix; which struct they fill depends on its kind.
void mixer_slots(Slots& s, MixerKind kind, LayerWeights& l) {
  if (kind == MixerKind::mla) {
    MlaWeights& a = l.mla;
    s.matrices.insert({{"attn.wq", &a.wq}, {"attn.wq_a", &a.wq_a}, {"attn.wq_b", &a.wq_b}, {"attn.wkv_a", &a.wkv_a},
                       {"attn.wk_b", &a.wk_b}, {"attn.wv_b", &a.wv_b}, {"attn.wg", &a.wg}, {"attn.wo", &a.wo}});
    s.vectors.insert({{"attn.q_a_norm", &a.q_a_norm}, {"attn.kv_a_norm", &a.kv_a_norm}});
  } else if (kind == MixerKind::gdn || kind == MixerKind::gdn2) {
    GdnWeights& g = l.gdn;
    s.matrices.insert({{"attn.wq", &g.wq}, {"attn.wk", &g.wk}, {"attn.wv", &g.wv}, {"attn.w_decay", &g.w_decay},
                       {"attn.w_decay_a", &g.w_decay_a}, {"attn.w_decay_b", &g.w_decay_b}, {"attn.w_erase", &g.w_erase},
                       {"attn.w_erase_a", &g.w_erase_a}, {"attn.w_erase_b", &g.w_erase_b}, {"attn.w_write", &g.w_write},
                       {"attn.w_write_a", &g.w_write_a}, {"attn.w_write_b", &g.w_write_b}, {"attn.w_beta", &g.w_beta},
                       {"attn.wg", &g.wg}, {"attn.wg_a", &g.wg_a}, {"attn.wg_b", &g.wg_b}, {"attn.wo", &g.wo}});
    s.vectors.insert({{"attn.conv_q", &g.conv_q}, {"attn.conv_k", &g.conv_k}, {"attn.conv_v", &g.conv_v},
                      {"attn.decay_bias", &g.decay_bias}, {"attn.a_log", &g.a_log}, {"attn.o_norm", &g.o_norm}});
  } else {
    AttentionWeights& a = l.attn;
    s.matrices.insert({{"attn.wq", &a.wq}, {"attn.wk", &a.wk}, {"attn.wv", &a.wv}, {"attn.wg", &a.wg}, {"attn.wo", &a.wo}});
    s.vectors.insert({{"attn.bq", &a.bq}, {"attn.bk", &a.bk}, {"attn.bv", &a.bv}, {"attn.bo", &a.bo},
                      {"attn.q_norm", &a.q_norm}, {"attn.k_norm", &a.k_norm}, {"attn.sinks", &a.sinks}});
  }
}

Slots layer_slots(LayerWeights& l, MixerKind kind) {
  Slots s;
  s.vectors = {{"attn_norm", &l.attn_norm}, {"ffn_norm", &l.ffn_norm}, {"attn_post_norm", &l.attn_post_norm},
               {"ffn_post_norm", &l.ffn_post_norm}};
  mix_slots(s, "attn_res.", l.attn_res);
  mix_slots(s, "ffn_res.", l.ffn_res);
  mix_slots(s, "kv_bridge.", l.kv_bridge);
  mhc_slots(s, "attn_mhc.", l.attn_mhc);
  mhc_slots(s, "ffn_mhc.", l.ffn_mhc);
  EngramGateWeights& e = l.engram;
  s.matrices.insert({{"engram.tables", &e.tables}, {"engram.w_value", &e.w_value}, {"engram.w_key", &e.w_key}});
  s.vectors.insert({{"engram.key_norm", &e.key_norm}, {"engram.stream_norm", &e.stream_norm}, {"engram.conv", &e.conv}});
  mixer_slots(s, kind, l);
  ffn_slots(s, "ffn.", l.dense);
  MoeWeights& m = l.moe;
  s.matrices.insert({{"ffn.router", &m.router}, {"ffn.latent_down", &m.latent_down}, {"ffn.latent_up", &m.latent_up},
                     {"ffn.shared_gate", &m.shared_gate}});
  s.vectors.insert({{"ffn.router_bias", &m.router_bias}, {"ffn.balance_bias", &m.balance_bias}});
  ffn_slots(s, "ffn.experts.", m.experts);
  ffn_slots(s, "ffn.shared.", m.shared);
  return s;
}

void check_supported(const ModelConfig& c) {
  auto unsupported = [&](const std::string& what) {
    throw std::runtime_error("model " + c.name + ": the engine does not run " + what + " yet");
  };
  for (auto& [name, f] : c.ffns)
    if (f.activation == Activation::swiglu_oai) unsupported("swiglu_oai experts");
}

}  // namespace

std::shared_ptr<const Model> load_model(const ModelConfig& c, std::shared_ptr<const WeightSource> source) {
  check_supported(c);
  auto model = std::make_shared<Model>();
  Model& m = *model;
  m.config = c;
  m.map = build_weight_map(c);
  m.prefill_exit = c.prefill_exit_layer();
  m.storage = source;
  m.layers.resize(size_t(c.n_layers()));
  m.bridges_at.resize(size_t(c.n_layers()));
  for (int i = 0; i < c.n_layers(); ++i)
    if (c.layers[i].kv.kind == KvSourceKind::bridge) m.bridges_at[size_t(c.layers[i].kv.layer)].push_back(i);

  Slots top;
  top.matrices = {{"embed", &m.embed}, {"lm_head", &m.lm_head}, {"engram.tables", &m.engram_tables}};
  top.vectors = {{"final_norm", &m.final_norm}};
  mix_slots(top, "final_res.", m.final_res);
  mhc_slots(top, "final_mhc.", m.final_mhc);
  std::vector<Slots> per_layer;
  for (int i = 0; i < c.n_layers(); ++i) per_layer.push_back(layer_slots(m.layers[size_t(i)], c.mixer(i).kind));

  for (const TensorInfo& t : m.map.tensors) {
    auto [layer, local] = split_name(t.name);
    Slots& s = layer < 0 ? top : per_layer[size_t(layer)];
    if (auto it = s.matrices.find(local); it != s.matrices.end()) {
      *it->second = source->matrix(t);
    } else if (auto jt = s.vectors.find(local); jt != s.vectors.end()) {
      *jt->second = source->floats(t);
    } else {
      throw std::runtime_error("model " + c.name + ": tensor " + t.name + " has no place in the engine");
    }
  }
  if (c.tie_embeddings) m.lm_head = m.embed;
  m.lm_head_prescore = make_lm_head_prescore(m.lm_head);
  if (c.engram && c.engram->placement == EngramPlacement::residual_source) m.engram.emplace(*c.engram);
  for (int i = 0; i < c.n_layers(); ++i) {
    const MixerSpec& spec = c.mixer(i);
    if (spec.kind == MixerKind::mla)
      m.layers[size_t(i)].mla.rope = mla_rope(spec);
    else if (spec.rope)
      m.layers[size_t(i)].attn.rope = rope_table(*spec.rope, spec.rope->rotary_dim ? spec.rope->rotary_dim : spec.head_dim);
  }
  // Nenya's engram: each layer it is added before has its own tables and hash multipliers.
  if (c.engram && c.engram->placement == EngramPlacement::gated_add)
    for (int at : c.engram->layers) m.layers[size_t(at)].engram_hasher.emplace(*c.engram, uint64_t(at));
  return model;
}

}  // namespace wren
