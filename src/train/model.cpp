// The reference model: its tensors (the weight map, initialised by init_rows) and the forward
// pass over a batch of whole sequences, in the order of the engine's walk (runtime/session.cpp):
//   e = E[x] (scaled); the residual state starts from e: the stream x = e, mHC's n copies of e,
//   or the attention-residual sources (e, g = engram(n-grams ending here))
//   for each layer i:
//     attention residuals: at a block boundary B_b = P, P = 0
//     Nenya engram before i: x_s += conv(a_s W_value e_i), every stream s (train/engram.h)
//     for each layer j bridged to i's attention: K/V_j = kv_j(RMSNorm_j(mix_bridge_j(sources at i)))
//     h = x | mix_attn_i(e, g if i >= 1, B_0.., P if not empty) | mHC read;  o = mixer_i(RMSNorm(h));
//     x += o | P += o | mHC write
//     h = x | mix_ffn_i(e, g if i >= 1, B_0.., P) | mHC read;  o = FFN_i(RMSNorm(h));  written back alike
//   h = x | mix_final(e, g, B_0.., B_last = P) | mHC read-out;  logits = W_head RMSNorm(h)
//   (soft cap; padding rows -inf)
#include "train/model.h"

#include <limits>
#include <stdexcept>

#include "config/init_rule.h"
#include "model/mla.h"
#include "model/weights.h"
#include "train/common.h"

namespace wren::train {

Layout make_layout(const torch::Tensor& tokens, int32_t eot) {
  const int64_t B = tokens.size(0), T = tokens.size(1);
  const auto ids = torch::TensorOptions().dtype(torch::kInt64).device(tokens.device());
  Layout l;
  l.tokens = tokens;
  const torch::Tensor t = torch::arange(T, ids).unsqueeze(0).expand({B, T});
  l.start = torch::zeros({B, T}, ids);
  if (eot >= 0 && T > 1) {  // a document starts after each end-of-text token
    torch::Tensor opens = torch::zeros({B, T}, ids.dtype(torch::kBool));
    opens.narrow(1, 1, T - 1).copy_(tokens.narrow(1, 0, T - 1) == eot);
    l.start = std::get<0>(torch::cummax(torch::where(opens, t, torch::zeros_like(t)), 1));
  }
  l.pos = t - l.start;
  const torch::Tensor i = torch::arange(T, ids);
  l.offset = (i.unsqueeze(1) - i.unsqueeze(0)).view({1, 1, T, T});
  l.causal = (l.start.unsqueeze(2) == l.start.unsqueeze(1)).unsqueeze(1).logical_and(l.offset >= 0);
  return l;
}

namespace {

// Weight-map names relative to their layer, to the slot each fills (as model/model.cpp).
using Slots = std::map<std::string, torch::Tensor*>;

void ffn_slots(Slots& s, const std::string& p, FfnParams& f) {
  s.insert({{p + "w_gate", &f.w_gate}, {p + "w_up", &f.w_up}, {p + "w_down", &f.w_down},
            {p + "b_gate", &f.b_gate}, {p + "b_up", &f.b_up}, {p + "b_down", &f.b_down}});
}

void mix_slots(Slots& s, const std::string& p, MixParams& m) {
  s.insert({{p + "query", &m.query}, {p + "norm", &m.norm}});
}

void mhc_slots(Slots& s, const std::string& p, MhcParams& m) {
  s.insert({{p + "phi", &m.phi}, {p + "alpha", &m.alpha}, {p + "bias", &m.bias}});
}

// The mixer's "attn." tensors go to the members of its kind.
Slots layer_slots(LayerParams& l, MixerKind kind) {
  Slots s = {{"attn_norm", &l.attn_norm}, {"ffn_norm", &l.ffn_norm}, {"attn_post_norm", &l.attn_post_norm},
             {"ffn_post_norm", &l.ffn_post_norm}};
  mix_slots(s, "attn_res.", l.attn_res);
  mix_slots(s, "ffn_res.", l.ffn_res);
  mix_slots(s, "kv_bridge.", l.kv_bridge);
  mhc_slots(s, "attn_mhc.", l.attn_mhc);
  mhc_slots(s, "ffn_mhc.", l.ffn_mhc);
  EngramGateParams& e = l.engram;
  s.insert({{"engram.tables", &e.tables}, {"engram.w_value", &e.w_value}, {"engram.w_key", &e.w_key},
            {"engram.key_norm", &e.key_norm}, {"engram.stream_norm", &e.stream_norm}, {"engram.conv", &e.conv}});
  if (kind == MixerKind::gdn || kind == MixerKind::gdn2) {
    gdn_slots(s, l.gdn);
  } else if (kind == MixerKind::mla) {
    MlaParams& a = l.mla;
    s.insert({{"attn.wq", &a.wq}, {"attn.wq_a", &a.wq_a}, {"attn.q_a_norm", &a.q_a_norm}, {"attn.wq_b", &a.wq_b},
              {"attn.wkv_a", &a.wkv_a}, {"attn.kv_a_norm", &a.kv_a_norm}, {"attn.wk_b", &a.wk_b},
              {"attn.wv_b", &a.wv_b}, {"attn.wg", &a.wg}, {"attn.wo", &a.wo}});
  } else {
    AttentionParams& a = l.attn;
    s.insert({{"attn.wq", &a.wq}, {"attn.wk", &a.wk}, {"attn.wv", &a.wv}, {"attn.wg", &a.wg}, {"attn.wo", &a.wo},
              {"attn.bq", &a.bq}, {"attn.bk", &a.bk}, {"attn.bv", &a.bv}, {"attn.bo", &a.bo},
              {"attn.q_norm", &a.q_norm}, {"attn.k_norm", &a.k_norm}, {"attn.sinks", &a.sinks}});
  }
  ffn_slots(s, "ffn.", l.dense);
  MoeParams& m = l.moe;
  s.insert({{"ffn.router", &m.router}, {"ffn.router_bias", &m.router_bias}, {"ffn.balance_bias", &m.balance_bias},
            {"ffn.latent_down", &m.latent_down}, {"ffn.latent_up", &m.latent_up}, {"ffn.shared_gate", &m.shared_gate}});
  ffn_slots(s, "ffn.experts.", m.experts);
  ffn_slots(s, "ffn.shared.", m.shared);
  return s;
}

// swiglu_oai (gpt-oss's clamped experts) is refused here as the engine refuses it (model/model.cpp).
void check_supported(const ModelConfig& c) {
  for (auto& [name, f] : c.ffns)
    if (f.activation == Activation::swiglu_oai)
      throw std::runtime_error("model " + c.name + ": the training reference does not implement swiglu_oai (ffns." +
                               name + ")");
}

// The residual state of a forward (the batched form of the Session's e_, g_, x_, blocks_,
// partial_, boundary_): the plain stream x [B, T, d], mHC's streams x [B, T, n, d], or the
// attention-residual sources.
struct Residual {
  explicit Residual(const ModelConfig& config) : c(config) {}
  const ModelConfig& c;
  torch::Tensor e, g, x, partial;
  std::vector<torch::Tensor> blocks;
  bool partial_empty = true;
  MhcBoundary boundary;  // the current sublayer's read / write / mix

  bool attn_res() const { return c.residual.kind == ResidualKind::attn_residuals; }
  bool mhc() const { return c.residual.kind == ResidualKind::mhc; }

  void start(const torch::Tensor& embedding) {
    e = embedding;
    x = mhc() ? mhc_init_streams(e, c.residual.streams) : e;
    partial = torch::zeros_like(e);
  }
  // Nenya's engram before layer i, into every stream (one on a plain residual).
  void add_engram(const EngramGateParams& w, const Layout& l) {
    x = mhc() ? engram_gate_add(w, c, l, x) : engram_gate_add(w, c, l, x.unsqueeze(2)).squeeze(2);
  }

  // Layer i's block boundary: the partial sum becomes the next finished block.
  void begin_layer(int i) {
    if (!attn_res() || i == 0 || i % c.residual.block_size) return;
    blocks.push_back(partial);
    partial = torch::zeros_like(e);
    partial_empty = true;
  }
  // The input a sublayer (or a bridge) at layer i reads before its norm; with mHC it also
  // fixes the boundary's write and mixing for add().
  torch::Tensor input(int i, bool ffn, const MixParams& mix, const MhcParams& mhc_w) {
    if (mhc()) {
      boundary = mhc_coefficients(mhc_w, x, c);
      return mhc_read(boundary, x);
    }
    if (!attn_res()) return x;
    std::vector<torch::Tensor> sources{e};
    if (g.defined() && i >= 1) sources.push_back(g);
    sources.insert(sources.end(), blocks.begin(), blocks.end());
    if (!partial_empty || ffn) sources.push_back(partial);
    return attn_res_mix(mix, sources, c);
  }
  void add(torch::Tensor out, const torch::Tensor& post_norm) {
    if (post_norm.defined()) out = rmsnorm(out, post_norm, c);  // sandwich norm
    if (mhc()) {
      x = mhc_write(boundary, x, out);
      return;
    }
    if (!attn_res()) {
      x = x + out;
      return;
    }
    partial = partial + out;
    partial_empty = false;
  }
  torch::Tensor output(const MixParams& final_res, const MhcParams& final_mhc) {
    if (mhc()) return mhc_readout(final_mhc, x, c);
    if (!attn_res()) return x;
    blocks.push_back(partial);
    std::vector<torch::Tensor> sources{e};
    if (g.defined()) sources.push_back(g);
    sources.insert(sources.end(), blocks.begin(), blocks.end());
    return attn_res_mix(final_res, sources, c);
  }
};

}  // namespace

Model::Model(const ModelConfig& c, uint64_t seed, int32_t eot) : config_(c), map_(build_weight_map(c)), eot_(eot) {
  check_supported(c);
  if (eot < -1 || eot >= c.rows())
    throw std::invalid_argument("train::Model: end-of-text id " + std::to_string(eot) + " outside [-1, " +
                                std::to_string(c.rows()) + ")");
  std::map<std::string, std::shared_ptr<torch::nn::Module>> holders;
  for (const TensorInfo& t : map_.tensors) {
    torch::Tensor values = torch::empty(t.shape, torch::kFloat32);
    const int64_t cols = t.shape.empty() ? 1 : t.shape.back();
    init_rows(config_, t, seed, 0, t.numel() / cols, values.data_ptr<float>());
    // "layers.3.attn.wq": module layers -> 3 -> attn, tensor wq, so named_parameters() gives the weight-map name.
    torch::nn::Module* parent = this;
    std::string path;
    size_t begin = 0;
    for (size_t dot = t.name.find('.'); dot != std::string::npos; begin = dot + 1, dot = t.name.find('.', begin)) {
      const std::string part = t.name.substr(begin, dot - begin);
      path += part + ".";
      auto& holder = holders[path];
      if (!holder) holder = parent->register_module(part, std::make_shared<torch::nn::Module>(part));
      parent = holder.get();
    }
    const std::string leaf = t.name.substr(begin);
    Param p{t, t.role == TensorRole::buffer ? parent->register_buffer(leaf, values)
                                           : parent->register_parameter(leaf, values)};
    index_[t.name] = params_.size();
    params_.push_back(std::move(p));
  }
  bind_slots();
}

const torch::Tensor& Model::tensor(const std::string& name) const {
  auto it = index_.find(name);
  if (it == index_.end()) throw std::out_of_range("train::Model: no tensor " + name + " in the weight map");
  return params_[it->second].tensor;
}

void Model::bind_slots() {
  const ModelConfig& c = config_;
  layers_.resize(size_t(c.n_layers()));
  bridges_at_.assign(size_t(c.n_layers()), {});
  for (int i = 0; i < c.n_layers(); ++i)
    if (c.layers[size_t(i)].kv.kind == KvSourceKind::bridge) bridges_at_[size_t(c.layers[size_t(i)].kv.layer)].push_back(i);
  Slots top = {{"embed", &embed_}, {"lm_head", &lm_head_}, {"final_norm", &final_norm_}, {"engram.tables", &engram_tables_}};
  mix_slots(top, "final_res.", final_res_);
  mhc_slots(top, "final_mhc.", final_mhc_);
  std::vector<Slots> per_layer;
  for (int i = 0; i < c.n_layers(); ++i) per_layer.push_back(layer_slots(layers_[size_t(i)], c.mixer(i).kind));
  for (const Param& p : params_) {
    Slots* s = &top;
    std::string local = p.info.name;
    if (p.info.layer >= 0) {
      s = &per_layer[size_t(p.info.layer)];
      local = local.substr(local.find('.', 7) + 1);  // "layers.12.attn.wq" -> "attn.wq"
    }
    auto it = s->find(local);
    if (it == s->end()) throw std::runtime_error("train::Model: tensor " + p.info.name + " has no place in the reference");
    *it->second = p.tensor;
  }
  if (c.tie_embeddings) lm_head_ = embed_;
  if (c.engram && c.engram->placement == EngramPlacement::residual_source) engram_.emplace(*c.engram);
  // Nenya's engram: each layer it is added before has its own tables and hash multipliers.
  if (c.engram && c.engram->placement == EngramPlacement::gated_add)
    for (int at : c.engram->layers) layers_[size_t(at)].engram.hasher.emplace(*c.engram, uint64_t(at));
  for (int i = 0; i < c.n_layers(); ++i) {
    const MixerSpec& m = c.mixer(i);
    if (m.kind == MixerKind::mla) layers_[size_t(i)].mla.rope = mla_rope(m);
    else if (m.rope) layers_[size_t(i)].attn.rope = rope_table(*m.rope, m.rope->rotary_dim ? m.rope->rotary_dim : m.head_dim);
  }
}

torch::Tensor Model::forward(const torch::Tensor& input) {
  const ModelConfig& c = config_;
  if (input.dim() != 2 || input.size(1) == 0)
    throw std::invalid_argument("train::Model::forward: expected token ids [B, T] with T > 0");
  const torch::Tensor tokens = input.to(torch::kInt64);
  if (tokens.numel() && (tokens.min().item<int64_t>() < 0 || tokens.max().item<int64_t>() >= c.rows()))
    throw std::out_of_range("train::Model::forward: a token id outside the vocabulary (" + std::to_string(c.rows()) +
                            " rows)");
  const int64_t B = tokens.size(0), T = tokens.size(1), L = c.n_layers();
  const Layout l = make_layout(tokens, eot_);
  routing_.clear();

  Residual r(c);
  torch::Tensor e = embed_.index_select(0, tokens.flatten()).view({B, T, c.d_model});
  if (c.embedding_scale != 1.0) e = e * c.embedding_scale;
  r.start(e);
  if (engram_) r.g = engram_lookup(engram_tables_, engram_rows(*engram_, l));

  std::vector<KvEntries> kv(static_cast<size_t>(L));           // per attention layer with a cache of its own
  std::vector<MlaLatents> latents(static_cast<size_t>(L));     // per MLA layer
  std::vector<torch::Tensor> scores(static_cast<size_t>(L));   // per full layer its sparse layers select by
  std::vector<bool> scored(static_cast<size_t>(L), false);
  for (int i = 0; i < L; ++i)
    if (c.mixer(i).kind == MixerKind::sparse_reuse) scored[size_t(c.cache_owner(i))] = true;

  for (int i = 0; i < L; ++i) {
    const LayerParams& w = layers_[size_t(i)];
    const MixerSpec& m = c.mixer(i);
    r.begin_layer(i);
    if (w.engram.hasher) r.add_engram(w.engram, l);
    for (int j : bridges_at_[size_t(i)]) {
      const LayerParams& bridged = layers_[size_t(j)];
      const torch::Tensor h = rmsnorm(r.input(i, false, bridged.kv_bridge, bridged.attn_mhc), bridged.attn_norm, c);
      if (c.mixer(j).kind == MixerKind::mla) latents[size_t(j)] = mla_latents(bridged.mla, c.mixer(j), c, l, h);
      else kv[size_t(j)] = project_kv(bridged.attn, c.mixer(j), c, l, h);
    }
    torch::Tensor xn = rmsnorm(r.input(i, false, w.attn_res, w.attn_mhc), w.attn_norm, c);
    const int owner = c.cache_owner(i);
    if (c.layers[size_t(i)].kv.kind == KvSourceKind::own && c.has_cache(i)) {
      if (m.kind == MixerKind::mla) latents[size_t(i)] = mla_latents(w.mla, m, c, l, xn);
      else if (m.kind == MixerKind::attention || m.kind == MixerKind::relu2_attention)
        kv[size_t(i)] = project_kv(w.attn, m, c, l, xn);
    }
    torch::Tensor* group_scores = scored[size_t(i)] ? &scores[size_t(i)] : nullptr;
    torch::Tensor out;
    switch (m.kind) {
      case MixerKind::attention:  // the span is the cache's: its owner's window
        out = window_attention(w.attn, m, c, l, xn, kv[size_t(owner)], c.mixer(owner).window, group_scores);
        break;
      case MixerKind::relu2_attention:
        out = relu2_attention(w.attn, m, c, l, xn, kv[size_t(owner)], group_scores);
        break;
      case MixerKind::sparse_reuse:
        out = sparse_attention(w.attn, m, c, l, xn, kv[size_t(owner)], scores[size_t(owner)]);
        break;
      case MixerKind::mla:
        out = mla_attention(w.mla, m, c, l, xn, latents[size_t(i)]);
        break;
      case MixerKind::gdn:
      case MixerKind::gdn2:
        out = gated_deltanet(w.gdn, m, c, l, xn);
        break;
    }
    r.add(out, w.attn_post_norm);

    xn = rmsnorm(r.input(i, true, w.ffn_res, w.ffn_mhc), w.ffn_norm, c);
    const FfnSpec& f = c.ffn(i);
    if (f.kind == FfnKind::dense) {
      out = dense_ffn(f, w.dense, xn);
    } else {
      routing_.push_back(Routing{i, {}, {}});
      out = moe_ffn(f, w.moe, xn, &routing_.back());
    }
    r.add(out, w.ffn_post_norm);
  }

  torch::Tensor logits = linear_map(rmsnorm(r.output(final_res_, final_mhc_), final_norm_, c), lm_head_);
  if (c.logit_softcap > 0) logits = c.logit_softcap * torch::tanh(logits / c.logit_softcap);
  if (c.vocab_pad > 0) {
    torch::Tensor pad = torch::arange(c.rows(), tokens.options()) >= c.vocab_size;
    logits = logits.masked_fill(pad, -std::numeric_limits<double>::infinity());
  }
  return logits;
}

}  // namespace wren::train
