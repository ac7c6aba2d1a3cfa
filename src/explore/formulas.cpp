// Seeds 003/004's equations, term by term, each evaluated from the symbols it substitutes:
//   P_routed = L_moe 3 d d_e E,  P_shared = L_moe 3 d d_s,  P_dense = L_dense 3 d d_ff,
//   P_router = L_moe E d,  P_QKVO = 2 L_attn d (d_q + d_kv),  P_norms = (4L + 1) d,  P_head = d V,
//   F_train = 6 P_active + 12 L_full d_q n/2 + 12 L_swa d_q min(n, w),  M_state = c B b d_kv L_kv n_ret.
// The FFN and attention symbols are read from the first layer of each kind (the seed's models
// have one of each); 3 becomes 2 for an ungated (ReLU^2) FFN, and d the latent width for
// latent experts.
#include "explore/formulas.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace wren::explore {

namespace {

std::string num(double v) {
  char buf[64];
  if (std::fabs(v) < 9e15 && v == std::floor(v)) std::snprintf(buf, sizeof buf, "%.0f", v);
  else std::snprintf(buf, sizeof buf, "%.6g", v);
  return buf;
}

// The symbols of the seed's forms, read off the config.
struct Symbols {
  double d = 0, V = 0, L = 0;
  double L_moe = 0, L_dense = 0, E = 0, k = 0, d_e = 0, d_in = 0, d_s = 0, d_ff = 0, m_moe = 3, m_dense = 3;
  double L_attn = 0, L_full = 0, L_swa = 0, d_q = 0, d_kv = 0, w = 0;
};

Symbols read_symbols(const ModelConfig& c) {
  Symbols s;
  s.d = c.d_model;
  s.V = c.rows();
  s.L = c.n_layers();
  bool have_moe = false, have_dense = false, have_attn = false;
  for (int i = 0; i < c.n_layers(); ++i) {
    const FfnSpec& f = c.ffn(i);
    if (f.kind == FfnKind::moe) {
      ++s.L_moe;
      if (!have_moe) {
        have_moe = true;
        s.E = f.n_experts, s.k = f.top_k, s.d_e = f.expert_hidden, s.d_s = double(f.n_shared) * f.shared_hidden;
        s.d_in = f.latent_dim ? f.latent_dim : c.d_model;  // latent MoE: experts run at the latent width
        s.m_moe = f.matrices();
      }
    } else {
      ++s.L_dense;
      if (!have_dense) have_dense = true, s.d_ff = f.hidden, s.m_dense = f.matrices();
    }
    const MixerSpec& m = c.mixer(i);
    if (m.kind != MixerKind::attention && m.kind != MixerKind::relu2_attention) continue;
    ++s.L_attn;
    (m.kind == MixerKind::attention && m.window ? s.L_swa : s.L_full) += 1;
    if (m.window) s.w = m.window;
    if (!have_attn) have_attn = true, s.d_q = double(m.n_heads) * m.head_dim, s.d_kv = double(m.n_kv_heads) * m.head_dim;
  }
  return s;
}

double component(const ParamCounts& p, Component c) { return double(p.total[int(c)]); }

}  // namespace

std::vector<Formula> seed_formulas(const ModelReport& r, const ContextPoint& point, const DecodeKnobs& k) {
  const Symbols s = read_symbols(r.config);
  const ParamCounts& p = r.params;
  const double n = point.n;
  std::vector<Formula> out;
  auto add = [&](std::string id, std::string form, std::string subst, double closed, double model) {
    out.push_back({std::move(id), std::move(form), std::move(subst), closed, model});
  };
  const std::string m3 = num(s.m_moe), d3 = num(s.m_dense);
  const bool latent = s.d_in && s.d_in != s.d;
  const double d_in = latent ? s.d_in : s.d;
  add("P_routed", "L_moe × " + m3 + (latent ? " × d_latent" : " × d") + " × d_e × E",
      num(s.L_moe) + " × " + m3 + " × " + num(d_in) + " × " + num(s.d_e) + " × " + num(s.E),
      s.L_moe * s.m_moe * d_in * s.d_e * s.E, component(p, Component::routed_experts));
  add("P_shared", "L_moe × " + m3 + " × d × d_s", num(s.L_moe) + " × " + m3 + " × " + num(s.d) + " × " + num(s.d_s),
      s.L_moe * s.m_moe * s.d * s.d_s, component(p, Component::shared_experts));
  add("P_dense", "L_dense × " + d3 + " × d × d_ff",
      num(s.L_dense) + " × " + d3 + " × " + num(s.d) + " × " + num(s.d_ff), s.L_dense * s.m_dense * s.d * s.d_ff,
      component(p, Component::dense_ffn));
  add("P_router", "L_moe × E × d", num(s.L_moe) + " × " + num(s.E) + " × " + num(s.d), s.L_moe * s.E * s.d,
      component(p, Component::router));
  double attn_model = 0;
  for (auto& [kind, v] : p.mixer_total)
    if (kind == MixerKind::attention || kind == MixerKind::relu2_attention) attn_model += double(v);
  add("P_QKVO", "2 × L_attn × d × (d_q + d_kv)",
      "2 × " + num(s.L_attn) + " × " + num(s.d) + " × (" + num(s.d_q) + " + " + num(s.d_kv) + ")",
      2 * s.L_attn * s.d * (s.d_q + s.d_kv), attn_model);
  add("P_norms", "(4L + 1) × d", "(4 × " + num(s.L) + " + 1) × " + num(s.d), (4 * s.L + 1) * s.d,
      component(p, Component::norms));
  add("P_head", "d × V", num(s.d) + " × " + num(s.V), s.d * s.V,
      component(p, r.config.tie_embeddings ? Component::embedding : Component::lm_head));
  // F_train with the cost model's P_active: the weights a token multiplies (lookups and norm
  // gains left out, as the seed leaves out norms).
  const double P = p.active_excl_embedding - component(p, Component::norms), swa_keys = std::min(n, s.w);
  add("F_train", "6 × P_active + 12 × L_full × d_q × n/2 + 12 × L_swa × d_q × min(n, w)",
      "6 × " + num(P) + " + 12 × " + num(s.L_full) + " × " + num(s.d_q) + " × " + num(n) + "/2 + 12 × " +
          num(s.L_swa) + " × " + num(s.d_q) + " × min(" + num(n) + ", " + num(s.w) + ")",
      6 * P + 12 * s.L_full * s.d_q * n / 2 + 12 * s.L_swa * s.d_q * swa_keys, point.training.total());
  add("F_head", "6 × d × V", "6 × " + num(s.d) + " × " + num(s.V), 6 * s.d * s.V,
      6 * component(p, r.config.tie_embeddings ? Component::embedding : Component::lm_head));
  // M_state in bytes for one sequence (B = 1) with K and V cached (c = 2) at the KV precision b.
  const double b = k.kv.bytes;
  add("M_state", "c × B × b × d_kv × (L_full × n + L_swa × min(n, w))",
      "2 × 1 × " + num(b) + " × " + num(s.d_kv) + " × (" + num(s.L_full) + " × " + num(n) + " + " + num(s.L_swa) +
          " × " + num(swa_keys) + ")",
      2 * b * s.d_kv * (s.L_full * n + s.L_swa * swa_keys), point.state_stored_bytes);
  return out;
}

}  // namespace wren::explore
