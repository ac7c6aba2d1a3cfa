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
#include "config/layer_plan.h"
#include "config/weight_slots.h"
#include "model/rope.h"
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

// The reference's slots by name (config/weight_slots.h): every tensor a torch tensor.
struct Slots {
  std::map<std::string, torch::Tensor*> named;
  void operator()(const std::string& name, torch::Tensor& t) { named[name] = &t; }
};

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
    if (!starts_block(c, i)) return;
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
    return attn_res_mix(mix, sources(sublayer_sources(c, i, ffn, int(blocks.size()), partial_empty)), c);
  }
  std::vector<torch::Tensor> sources(const ResidualSourceSet& set) const {
    std::vector<torch::Tensor> out;
    gather_sources(set, e, g, [&](int b) { return blocks[size_t(b)]; }, partial, out);
    return out;
  }
  void add(torch::Tensor out, const torch::Tensor& post_norm) {
    if (post_norm.defined()) out = rmsnorm(out, post_norm, c);  // sandwich or post norm
    if (c.residual_scale != 1.0) out = out * c.residual_scale;  // Granite: x + s f(x)
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
    return attn_res_mix(final_res, sources(final_sources(c, int(blocks.size()))), c);
  }
};

// What a forward pass keeps between layers: each cache-owning attention layer's K/V, each MLA
// layer's latents, and the scores of each full layer whose cache sparse layers select by.
struct LayerCaches {
  std::vector<KvEntries> kv;
  std::vector<MlaLatents> latents;
  std::vector<torch::Tensor> scores;
  std::vector<bool> scored;
  explicit LayerCaches(const ModelConfig& c)
      : kv(size_t(c.n_layers())), latents(size_t(c.n_layers())), scores(size_t(c.n_layers())), scored(size_t(c.n_layers()), false) {
    for (int i = 0; i < c.n_layers(); ++i)
      if (c.mixer(i).kind == MixerKind::sparse_reuse) scored[size_t(c.cache_owner(i))] = true;
  }
};

// Layer i's mixer on its normed input xn: its own cache filled first where it keeps one, then
// the mixer of its kind over the cache it reads (its owner's).
torch::Tensor mixer_forward(const LayerParams& w, const ModelConfig& c, int i, const Layout& l, const torch::Tensor& xn,
                            LayerCaches& caches) {
  const MixerSpec& m = c.mixer(i);
  const size_t at = size_t(i), owner = size_t(c.cache_owner(i));
  if (c.fills_own_cache(i)) {
    if (m.kind == MixerKind::mla) caches.latents[at] = mla_latents(w.mla, m, c, l, xn);
    else if (m.kind == MixerKind::attention || m.kind == MixerKind::relu2_attention)
      caches.kv[at] = project_kv(w.attn, m, c, l, xn);
  }
  torch::Tensor* group_scores = caches.scored[at] ? &caches.scores[at] : nullptr;
  switch (m.kind) {
    case MixerKind::attention:  // the span is the cache's: its owner's window
      return window_attention(w.attn, m, c, l, xn, caches.kv[owner], c.mixer(int(owner)).window, group_scores);
    case MixerKind::relu2_attention:
      return relu2_attention(w.attn, m, c, l, xn, caches.kv[owner], group_scores);
    case MixerKind::sparse_reuse:
      return sparse_attention(w.attn, m, c, l, xn, caches.kv[owner], caches.scores[owner]);
    case MixerKind::mla:
      return mla_attention(w.mla, m, c, l, xn, caches.latents[at]);
    case MixerKind::gdn:
    case MixerKind::gdn2:
      return gated_deltanet(w.gdn, m, c, l, xn);
    case MixerKind::short_conv:
      return gated_short_conv(w.short_conv, m, l, xn);
    case MixerKind::mamba2:
      return mamba2(w.mamba2, m, c, l, xn);
  }
  throw std::logic_error("train::Model::forward: a mixer kind without a forward");
}

}  // namespace

Model::Model(const ModelConfig& c, uint64_t seed, int32_t eot) : config_(c), map_(build_weight_map(c)), eot_(eot) {
  check_supported(c, "training reference");
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
  bridges_at_ = bridges_at(c);
  struct {
    torch::Tensor &embed, &lm_head, &engram_tables, &final_norm;
    MixParams& final_res;
    MhcParams& final_mhc;
  } model_level{embed_, lm_head_, engram_tables_, final_norm_, final_res_, final_mhc_};
  Slots top;
  slots::top(model_level, top);
  std::vector<Slots> per_layer(size_t(c.n_layers()));
  for (int i = 0; i < c.n_layers(); ++i) slots::layer(c.mixer(i).kind, layers_[size_t(i)], per_layer[size_t(i)]);
  for (const Param& p : params_) {
    auto [layer, local] = slots::split_name(p.info.name);
    Slots& s = layer < 0 ? top : per_layer[size_t(layer)];
    auto it = s.named.find(local);
    if (it == s.named.end()) throw std::runtime_error("train::Model: tensor " + p.info.name + " has no place in the reference");
    *it->second = p.tensor;
  }
  if (c.tie_embeddings) lm_head_ = embed_;
  engram_ = residual_engram_hasher(c);
  for (int i = 0; i < c.n_layers(); ++i) {
    LayerParams& l = layers_[size_t(i)];
    if (c.mixer(i).kind == MixerKind::mla) l.mla.rope = layer_rope(c.mixer(i));
    else l.attn.rope = layer_rope(c.mixer(i));
    l.engram.hasher = layer_engram_hasher(c, i);
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

  LayerCaches caches(c);
  for (int i = 0; i < L; ++i) {
    const LayerParams& w = layers_[size_t(i)];
    r.begin_layer(i);
    if (w.engram.hasher) r.add_engram(w.engram, l);
    for (int j : bridges_at_[size_t(i)]) {  // layer j's K/V (or latents) from this layer's input
      const LayerParams& bridged = layers_[size_t(j)];
      const torch::Tensor h = sublayer_norm(r.input(i, false, bridged.kv_bridge, bridged.attn_mhc), bridged.attn_norm, c);
      if (c.mixer(j).kind == MixerKind::mla) caches.latents[size_t(j)] = mla_latents(bridged.mla, c.mixer(j), c, l, h);
      else caches.kv[size_t(j)] = project_kv(bridged.attn, c.mixer(j), c, l, h);
    }
    torch::Tensor xn = sublayer_norm(r.input(i, false, w.attn_res, w.attn_mhc), w.attn_norm, c);
    torch::Tensor out = mixer_forward(w, c, i, l, xn, caches);
    r.add(out, w.attn_post_norm);

    xn = sublayer_norm(r.input(i, true, w.ffn_res, w.ffn_mhc), w.ffn_norm, c);
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
  if (c.logit_divisor != 1.0) logits = logits / c.logit_divisor;
  if (c.logit_softcap > 0) logits = c.logit_softcap * torch::tanh(logits / c.logit_softcap);
  if (c.vocab_pad > 0) {
    torch::Tensor pad = torch::arange(c.rows(), tokens.options()) >= c.vocab_size;
    logits = logits.masked_fill(pad, -std::numeric_limits<double>::infinity());
  }
  return logits;
}

}  // namespace wren::train
