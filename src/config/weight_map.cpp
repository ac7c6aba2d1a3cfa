// The weight map: every tensor a config implies, with its shape and how a token uses it.
// Order is stable (model-level first, then layer by layer) so files written by it diff well.
#include "config/weight_map.h"

#include <numeric>

namespace wren {

int64_t TensorInfo::numel() const {
  return std::accumulate(shape.begin(), shape.end(), int64_t(1), std::multiplies<int64_t>());
}

const TensorInfo* WeightMap::find(const std::string& name) const {
  for (auto& t : tensors)
    if (t.name == name) return &t;
  return nullptr;
}

namespace {

using Shape = std::vector<int64_t>;

struct Builder {
  WeightMap map;
  int layer = -1;
  Component component = Component::mixer;

  TensorInfo& add(const std::string& name, Shape shape, TensorRole role) {
    TensorInfo t;
    t.name = name;
    t.shape = std::move(shape);
    t.role = role;
    t.component = component;
    t.layer = layer;
    map.tensors.push_back(t);
    return map.tensors.back();
  }
  TensorInfo& matrix(const std::string& name, int64_t out, int64_t in) { return add(name, {out, in}, TensorRole::matrix); }
  TensorInfo& vector(const std::string& name, int64_t n) { return add(name, {n}, TensorRole::vector); }
  TensorInfo& norm(const std::string& name, int64_t n) { return add(name, {n}, TensorRole::norm); }
  // A projection W (out x in), or its rank-r factorisation W_b W_a when rank > 0.
  void projection(const std::string& name, int64_t out, int64_t in, int rank) {
    if (rank > 0) {
      matrix(name + "_a", rank, in);
      matrix(name + "_b", out, rank);
    } else {
      matrix(name, out, in);
    }
  }
};

// One FFN (dense, an expert stack, or the shared experts) of width `hidden` on inputs of width `in`.
// `experts` > 0 stacks that many copies: shapes gain a leading [E].
void ffn_block(Builder& b, const std::string& p, const FfnSpec& f, int64_t in, int64_t hidden, int64_t experts) {
  auto shape = [&](int64_t r, int64_t c) { return experts ? Shape{experts, r, c} : Shape{r, c}; };
  auto vec = [&](int64_t n) { return experts ? Shape{experts, n} : Shape{n}; };
  if (f.gated()) b.add(p + "w_gate", shape(hidden, in), TensorRole::matrix);
  b.add(p + "w_up", shape(hidden, in), TensorRole::matrix);
  if (f.gated()) {
    b.add(p + "w_down", shape(in, hidden), TensorRole::matrix);
  } else {
    b.add(p + "w_down", shape(hidden, in), TensorRole::matrix).neuron_rows = true;
  }
  if (f.bias) {
    if (f.gated()) b.add(p + "b_gate", vec(hidden), TensorRole::vector);
    b.add(p + "b_up", vec(hidden), TensorRole::vector);
    b.add(p + "b_down", vec(in), TensorRole::vector);
  }
}

void ffn(Builder& b, const std::string& p, const FfnSpec& f, int64_t d) {
  if (f.kind == FfnKind::dense) {
    b.component = Component::dense_ffn;
    ffn_block(b, p, f, d, f.hidden, 0);
    return;
  }
  b.component = Component::router;
  b.matrix(p + "router", f.n_experts, d);
  if (f.router_bias) b.vector(p + "router_bias", f.n_experts);
  if (f.balance_bias) {
    TensorInfo& t = b.add(p + "balance_bias", {f.n_experts}, TensorRole::buffer);
    t.activity = Activity::never;
  }
  int64_t x = f.latent_dim ? f.latent_dim : d;
  if (f.latent_dim) {
    b.component = Component::latent_proj;
    b.matrix(p + "latent_down", f.latent_dim, d);
    b.matrix(p + "latent_up", d, f.latent_dim);
  }
  b.component = Component::routed_experts;
  size_t first = b.map.tensors.size();
  ffn_block(b, p + "experts.", f, x, f.expert_hidden, f.n_experts);
  for (size_t k = first; k < b.map.tensors.size(); ++k) {
    b.map.tensors[k].activity = Activity::routed;
    b.map.tensors[k].active_fraction = double(f.top_k) / f.n_experts;
  }
  if (f.n_shared) {
    b.component = Component::shared_experts;
    ffn_block(b, p + "shared.", f, d, int64_t(f.n_shared) * f.shared_hidden, 0);
    if (f.shared_gate) b.matrix(p + "shared_gate", 1, d);
  }
}

// Softmax, ReLU^2 and sparse-reuse attention: a layer that reuses another's cache (or a
// sparse_reuse layer) has no K / V projections of its own.
void attention_mixer(Builder& b, const std::string& p, const MixerSpec& m, bool own_kv, int64_t d) {
  const int64_t hq = m.n_heads, dh = m.head_dim, hkv = m.n_kv_heads;
  const bool kv = own_kv && m.kind != MixerKind::sparse_reuse;
  b.matrix(p + "wq", hq * dh, d);
  if (kv) {
    b.matrix(p + "wk", hkv * dh, d);
    b.matrix(p + "wv", hkv * dh, d);
  }
  if (m.output_gate) b.matrix(p + "wg", hq * dh, d);
  b.matrix(p + "wo", d, hq * dh);
  if (m.qkv_bias) {
    b.vector(p + "bq", hq * dh);
    if (kv) {
      b.vector(p + "bk", hkv * dh);
      b.vector(p + "bv", hkv * dh);
    }
  }
  if (m.o_bias) b.vector(p + "bo", d);
  if (m.qk_norm != QkNorm::none) {
    bool full = m.qk_norm == QkNorm::full;
    b.norm(p + "q_norm", full ? hq * dh : dh);
    if (kv) b.norm(p + "k_norm", full ? hkv * dh : dh);
  }
  if (m.sinks) b.vector(p + "sinks", hq);
}

// MLA: queries direct or through a low-rank q_a / q_b, keys and values from one compressed
// latent (wkv_a: the latent and the shared rope key) expanded per head by wk_b and wv_b.
void mla_mixer(Builder& b, const std::string& p, const MixerSpec& m, int64_t d) {
  const int64_t hq = m.n_heads, dqk = m.qk_nope_dim + m.qk_rope_dim;
  if (m.q_lora_rank) {
    b.matrix(p + "wq_a", m.q_lora_rank, d);
    b.norm(p + "q_a_norm", m.q_lora_rank);
    b.matrix(p + "wq_b", hq * dqk, m.q_lora_rank);
  } else {
    b.matrix(p + "wq", hq * dqk, d);
  }
  b.matrix(p + "wkv_a", m.kv_lora_rank + m.qk_rope_dim, d);
  b.norm(p + "kv_a_norm", m.kv_lora_rank);
  if (m.qk_nope_dim) b.matrix(p + "wk_b", hq * m.qk_nope_dim, m.kv_lora_rank);
  b.matrix(p + "wv_b", hq * m.v_head_dim, m.kv_lora_rank);
  if (m.output_gate) b.matrix(p + "wg", hq * m.v_head_dim, d);
  b.matrix(p + "wo", d, hq * m.v_head_dim);
}

// Gated DeltaNet (gdn) and GDN-2 (gdn2): q, k, v with their short convolutions, the gates
// (per head for gdn, per channel and optionally low-rank for gdn2), the output gate and norm.
void gated_deltanet_mixer(Builder& b, const std::string& p, const MixerSpec& m, int64_t d) {
  const int64_t hq = m.n_heads, dh = m.head_dim;
  const int64_t hv = m.value_heads(), dv = m.value_dim(), K = m.conv_kernel;
  b.matrix(p + "wq", hq * dh, d);
  b.matrix(p + "wk", hq * dh, d);
  b.matrix(p + "wv", hv * dv, d);
  b.add(p + "conv_q", {hq * dh, K}, TensorRole::conv);
  b.add(p + "conv_k", {hq * dh, K}, TensorRole::conv);
  b.add(p + "conv_v", {hv * dv, K}, TensorRole::conv);
  if (m.kind == MixerKind::gdn2) {
    // g = -exp(A) softplus(W_f x + b_f) per key channel; b, w = sigmoid(W x) per key / value channel
    b.projection(p + "w_decay", hv * dh, d, m.gate_rank);
    b.vector(p + "decay_bias", hv * dh);
    b.projection(p + "w_erase", hv * dh, d, m.gate_rank);
    b.projection(p + "w_write", hv * dv, d, m.gate_rank);
  } else {
    // g = -exp(A) softplus(w_a . x + dt_bias) and beta = sigmoid(w_b . x), one per head
    b.matrix(p + "w_decay", hv, d);
    b.vector(p + "decay_bias", hv);
    b.matrix(p + "w_beta", hv, d);
  }
  b.vector(p + "a_log", hv);
  b.projection(p + "wg", hv * dv, d, m.out_gate_rank);
  b.norm(p + "o_norm", dv);
  b.matrix(p + "wo", d, hv * dv);
}

// [b, c, x~] = W x, each [d, d]; the conv's taps [d, K]; W_o [d, d].
void short_conv_mixer(Builder& b, const std::string& p, const MixerSpec& m, int64_t d) {
  b.matrix(p + "w_b", d, d);
  b.matrix(p + "w_c", d, d);
  b.matrix(p + "w_x", d, d);
  b.add(p + "conv", {d, int64_t(m.conv_kernel)}, TensorRole::conv);
  b.matrix(p + "wo", d, d);
}

// z = W_g x (the gate), [x~, B, C] = [W_x, W_b, W_c] x, dt = softplus(W_decay x + decay_bias),
// A = -exp(a_log), D = d_skip; the conv's taps [channels, K] over x~, B and C apart; the
// gated norm's gain o_norm over all heads; W_o [d, h P].
void mamba2_mixer(Builder& b, const std::string& p, const MixerSpec& m, int64_t d) {
  const int64_t hq = m.n_heads, inner = hq * m.head_dim, bc = int64_t(m.ssm_groups()) * m.state_dim, K = m.conv_kernel;
  b.matrix(p + "wg", inner, d);
  b.matrix(p + "w_x", inner, d);
  b.matrix(p + "w_b", bc, d);
  b.matrix(p + "w_c", bc, d);
  b.matrix(p + "w_decay", hq, d);
  b.add(p + "conv_x", {inner, K}, TensorRole::conv);
  b.add(p + "conv_b", {bc, K}, TensorRole::conv);
  b.add(p + "conv_c", {bc, K}, TensorRole::conv);
  if (m.conv_bias) {
    b.vector(p + "conv_x_bias", inner);
    b.vector(p + "conv_b_bias", bc);
    b.vector(p + "conv_c_bias", bc);
  }
  b.vector(p + "decay_bias", hq);
  b.vector(p + "a_log", hq);
  b.vector(p + "d_skip", hq);
  b.norm(p + "o_norm", inner);
  b.matrix(p + "wo", d, inner);
}

void mixer(Builder& b, const std::string& p, const MixerSpec& m, const LayerSpec& l, int64_t d) {
  b.component = Component::mixer;
  switch (m.kind) {
    case MixerKind::attention:
    case MixerKind::relu2_attention:
    case MixerKind::sparse_reuse: return attention_mixer(b, p, m, l.kv.kind != KvSourceKind::reuse, d);
    case MixerKind::mla: return mla_mixer(b, p, m, d);
    case MixerKind::gdn:
    case MixerKind::gdn2: return gated_deltanet_mixer(b, p, m, d);
    case MixerKind::short_conv: return short_conv_mixer(b, p, m, d);
    case MixerKind::mamba2: return mamba2_mixer(b, p, m, d);
  }
}

// A block attention-residual mix (Kimi): pseudo-query w and the RMSNorm gain used for scoring.
void attn_res_mix(Builder& b, const std::string& p, int64_t d) {
  b.component = Component::residual_mixing;
  b.add(p + "query", {d}, TensorRole::vector);
  b.norm(p + "norm", d);
}

// An mHC boundary: phi [n d, n^2 + 2n], three scales alpha, bias [n^2 + 2n].
void mhc_boundary(Builder& b, const std::string& p, int64_t n, int64_t d, int64_t outputs) {
  b.component = Component::residual_mixing;
  b.matrix(p + "phi", n * d, outputs);
  b.vector(p + "alpha", outputs == n ? 1 : 3);
  b.vector(p + "bias", outputs);
}

void engram_tables(Builder& b, const std::string& name, const EngramSpec& e) {
  b.component = Component::engram_tables;
  int64_t rows = 0;
  for (int64_t r : engram_table_rows(e)) rows += r;
  TensorInfo& t = b.add(name, {rows, e.row_dim}, TensorRole::lookup);
  t.activity = Activity::lookup;
  t.lookup_rows = e.tables();
  t.engram_file = true;
}

}  // namespace

WeightMap build_weight_map(const ModelConfig& c) {
  Builder b;
  const int64_t d = c.d_model;
  const ResidualSpec& res = c.residual;
  b.component = Component::embedding;
  TensorInfo& embed = b.add("embed", {c.rows(), d}, TensorRole::lookup);
  embed.activity = Activity::lookup;
  embed.lookup_rows = 1;
  if (!c.tie_embeddings) {
    b.component = Component::lm_head;
    b.matrix("lm_head", c.rows(), d);
  }
  b.component = Component::norms;
  b.norm("final_norm", d);
  if (res.kind == ResidualKind::attn_residuals) attn_res_mix(b, "final_res.", d);
  if (res.kind == ResidualKind::mhc && res.readout == StreamReadout::gate)
    mhc_boundary(b, "final_mhc.", res.streams, d, res.streams);
  if (c.engram && c.engram->placement == EngramPlacement::residual_source) engram_tables(b, "engram.tables", *c.engram);

  for (int i = 0; i < c.n_layers(); ++i) {
    b.layer = i;
    const std::string p = "layers." + std::to_string(i) + ".";
    const LayerSpec& l = c.layers[i];
    b.component = Component::norms;
    const bool pre = c.norm.placement != NormPlacement::post, post = c.norm.placement != NormPlacement::pre;
    if (pre) b.norm(p + "attn_norm", d);
    if (post) b.norm(p + "attn_post_norm", d);
    if (pre) b.norm(p + "ffn_norm", d);
    if (post) b.norm(p + "ffn_post_norm", d);
    if (res.kind == ResidualKind::attn_residuals) {
      attn_res_mix(b, p + "attn_res.", d);
      attn_res_mix(b, p + "ffn_res.", d);
      if (l.kv.kind == KvSourceKind::bridge) attn_res_mix(b, p + "kv_bridge.", d);
    }
    if (res.kind == ResidualKind::mhc) {
      const int64_t n = res.streams;
      mhc_boundary(b, p + "attn_mhc.", n, d, n * n + 2 * n);
      mhc_boundary(b, p + "ffn_mhc.", n, d, n * n + 2 * n);
    }
    if (c.engram && c.engram->placement == EngramPlacement::gated_add) {
      const EngramSpec& e = *c.engram;
      for (int at : e.layers)
        if (at == i) {
          const int64_t n = res.kind == ResidualKind::mhc ? res.streams : 1;
          engram_tables(b, p + "engram.tables", e);
          b.component = Component::engram_proj;
          b.matrix(p + "engram.w_value", d, e.width());
          b.add(p + "engram.w_key", {n, d, e.width()}, TensorRole::matrix);
          b.add(p + "engram.key_norm", {n, d}, TensorRole::norm);
          b.add(p + "engram.stream_norm", {n, d}, TensorRole::norm);
          b.add(p + "engram.conv", {d, e.conv_kernel}, TensorRole::conv);
        }
    }
    mixer(b, p + "attn.", c.mixer(i), l, d);
    ffn(b, p + "ffn.", c.ffn(i), d);
  }
  return std::move(b.map);
}

const char* to_string(Component c) {
  static const char* names[kComponents] = {"embedding", "lm_head", "mixer", "dense_ffn", "routed_experts",
                                           "shared_experts", "latent_proj", "router", "norms", "residual_mixing",
                                           "engram_tables", "engram_proj"};
  return names[int(c)];
}

const char* to_string(TensorRole r) {
  static const char* names[] = {"matrix", "norm", "vector", "conv", "lookup", "buffer"};
  return names[int(r)];
}

}  // namespace wren
