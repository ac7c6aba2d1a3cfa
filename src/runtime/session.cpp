// The forward pass. Per token (NOTES.md 1-2):
//   e = E[token]; the residual state starts from e (the stream, mHC's n copies, or the
//   attention-residual sources e and g = engram(n-grams ending here))
//   for each layer i:
//     Nenya engram before i: gated rows added into every stream
//     bridged layers j whose K/V are mixed at i's attention: K/V_j from their own mix, appended
//     attention input = the stream / mix_i(sources) / mHC read  -> RMSNorm -> mixer -> written back
//     FFN input       = likewise                                -> RMSNorm -> FFN   -> written back
//   logits = W_head RMSNorm(the stream / mix_final(e, g, B_0..) / mHC read-out)
// A non-final prompt token stops at the exit layer E after filling E's own cache entry: every
// cache of layers >= E is then filled (bridges to points <= E ran on the way).
#include "runtime/session.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>

#include "config/layer_plan.h"
#include "kernels/ops.h"
#include "model/engram.h"
#include "runtime/session_budget.h"

namespace wren {

Session::Session(std::shared_ptr<const Model> model, const SessionOptions& options)
    : model_(std::move(model)), pool_(&kernels::ThreadPool::shared(std::max(1, options.threads))), probe_(options.probe),
      lm_head_(options.lm_head) {
  const ModelConfig& c = model_->config;
  if (probe_ && !probe_->fits(c))
    throw std::invalid_argument("sparsity probe: made for another model shape than " + c.name);
  context_ = options.context > 0 ? options.context : c.context_length;
  check_session_memory(c, context_);  // before the first allocation
  d_ = c.d_model;
  streams_ = c.residual.kind == ResidualKind::mhc ? c.residual.streams : 1;
  const int L = c.n_layers();
  kv_.resize(size_t(L)), mla_.resize(size_t(L)), gdn_.resize(size_t(L)), engram_gate_.resize(size_t(L));
  scores_.resize(size_t(L));
  last_experts_.resize(size_t(L));
  int max_order = 0;
  for (int i = 0; i < L; ++i) {
    const MixerSpec& m = c.mixer(i);
    const bool own = c.has_cache(i);
    if (own && (m.kind == MixerKind::attention || m.kind == MixerKind::relu2_attention)) {
      const bool ring = m.window > 0 && m.window < context_;
      kv_[size_t(i)].init(m.n_kv_heads * m.head_dim, ring ? m.window : context_, ring);
    }
    if (m.kind == MixerKind::mla) {
      mla_[size_t(i)].init(m, context_);
      mla_scratch_.reserve(m, context_);
    }
    if (m.kind == MixerKind::gdn || m.kind == MixerKind::gdn2) {
      gdn_[size_t(i)].init(m);
      gdn_scratch_.reserve(m, d_, 1);
    }
    // A full layer records its per-KV-head scores only for the sparse layers that select by them.
    if (m.kind == MixerKind::sparse_reuse) {
      const int owner = c.cache_owner(i);
      scores_[size_t(owner)].resize(size_t(c.mixer(owner).n_kv_heads) * size_t(context_));
    }
    if (model_->layers[size_t(i)].engram_hasher) {
      engram_gate_[size_t(i)].init(streams_, d_, c.engram->conv_kernel);
      max_order = std::max(max_order, model_->layers[size_t(i)].engram_hasher->max_order());
    }
  }
  if (model_->engram) max_order = std::max(max_order, model_->engram->max_order());
  ngram_.resize(size_t(max_order));
  if (model_->engram) engram_rows_.resize(size_t(model_->engram->tables()));
  const int n_blocks = residual_blocks(c);
  e_.resize(size_t(d_)), g_.resize(size_t(d_)), partial_.resize(size_t(d_)), x_.resize(size_t(streams_ * d_));
  blocks_.assign(size_t(n_blocks), std::vector<float>(size_t(d_)));
  h_.resize(size_t(d_)), xn_.resize(size_t(d_)), out_.resize(size_t(d_)), tmp_.resize(size_t(d_));
  mix_weights_.resize(size_t(n_blocks + 3));
  sources_.x.reserve(size_t(n_blocks + 3));
  mhc_scratch_.reserve(streams_, d_);
  attn_.reserve(c, context_);
  ffn_.reserve(c);
  history_.reserve(size_t(context_));
  if (lm_head_.prescore && model_->lm_head_prescore) lm_scratch_.reserve(model_->lm_head);
}

double Session::cache_bytes_per_token() const {
  double bytes = 0;
  for (const KvCache& kv : kv_)
    if (!kv.empty() && !kv.ring) bytes += 2.0 * kv.kv_dim * sizeof(float);
  for (const MlaCache& m : mla_) bytes += double(m.latent_dim + m.key_dim) * sizeof(float);
  return bytes;
}

double Session::fixed_state_bytes() const {
  double bytes = 0;
  for (const KvCache& kv : kv_)
    if (kv.ring) bytes += double(kv.k.size() + kv.v.size()) * sizeof(float);
  for (const GdnState& g : gdn_) bytes += double(g.S.size() + g.conv_q.size() + g.conv_k.size() + g.conv_v.size()) * sizeof(float);
  for (const EngramGateState& e : engram_gate_) bytes += double(e.history.size()) * sizeof(float);
  return bytes;
}

void Session::prefill(std::span<const int32_t> tokens, float* logits, bool early_exit) {
  if (tokens.empty()) throw std::invalid_argument("prefill: no tokens");
  for (size_t t = 0; t + 1 < tokens.size(); ++t) forward(tokens[t], early_exit ? nullptr : logits);
  forward(tokens.back(), logits);
}

void Session::decode(int32_t token, float* logits) { forward(token, logits); }

// The last `order` token ids up to this one, oldest first; positions before the start are the pad.
std::span<const int32_t> Session::ngram_context(int order) {
  for (int k = 0; k < order; ++k) {
    const int64_t p = position() - order + k;
    ngram_[size_t(k)] = p >= 0 ? history_[size_t(p)] : EngramHasher::kPad;
  }
  return std::span<const int32_t>(ngram_.data(), size_t(order));
}

void Session::embed(int32_t token) {
  const ModelConfig& c = model_->config;
  if (token < 0 || token >= c.rows())
    throw std::out_of_range("token id " + std::to_string(token) + " outside the vocabulary (" + std::to_string(c.rows()) + " rows)");
  if (position() >= context_) throw std::runtime_error("context full: the session holds " + std::to_string(context_) + " tokens");
  kernels::decode_row(model_->embed, token, e_.data());
  if (c.embedding_scale != 1.0)
    for (float& v : e_) v *= float(c.embedding_scale);
  history_.push_back(token);
  if (model_->engram)
    engram_lookup(*model_->engram, model_->engram_tables, ngram_context(model_->engram->max_order()), g_.data(), engram_rows_);
  if (c.residual.kind == ResidualKind::mhc) mhc_init_streams(e_.data(), streams_, d_, x_.data());
  else std::copy(e_.begin(), e_.end(), x_.begin());
  finished_blocks_ = 0;
  partial_empty_ = true;
  std::fill(partial_.begin(), partial_.end(), 0.0f);
}

// The input a sublayer (or a bridge) reads before its norm: the stream, the mix of the
// attention-residual sources that exist at this point (config/layer_plan.h), or mHC's read of
// the streams; for mHC it also fills `boundary`, whose write and mixing coefficients the
// caller hands to add_output.
const float* Session::sublayer_input(int layer, bool ffn, const MixWeights& mix, const MhcWeights& mhc,
                                     MhcBoundary& boundary) {
  const ModelConfig& c = model_->config;
  const float eps = float(c.norm.eps);
  switch (c.residual.kind) {
    case ResidualKind::plain:
      return x_.data();
    case ResidualKind::mhc:
      mhc_coefficients(mhc, streams_, d_, eps, c.residual.sinkhorn_iters, x_.data(), boundary, mhc_scratch_);
      mhc_read(boundary, streams_, d_, x_.data(), h_.data());
      return h_.data();
    case ResidualKind::attn_residuals:
      break;
  }
  gather_residual_sources(sublayer_sources(c, layer, ffn, finished_blocks_, partial_empty_));
  attn_res_mix(mix, sources_, d_, eps, c.norm.unit_offset, mix_weights_.data(), h_.data(), tmp_.data());
  return h_.data();
}

void Session::gather_residual_sources(const ResidualSourceSet& set) {
  gather_sources<const float*>(set, e_.data(), g_.data(), [&](int b) { return blocks_[size_t(b)].data(); },
                               partial_.data(), sources_.x);
}

void Session::add_output(const float* out, const Vec& post_norm, const MhcBoundary& boundary) {
  const ModelConfig& c = model_->config;
  if (!post_norm.empty()) {  // sandwich norm: the output is normalised before it is added
    kernels::rmsnorm(out, post_norm.data(), d_, float(c.norm.eps), c.norm.unit_offset, tmp_.data());
    out = tmp_.data();
  }
  switch (c.residual.kind) {
    case ResidualKind::plain: kernels::axpy(1.0f, out, d_, x_.data()); break;
    case ResidualKind::mhc: mhc_write(boundary, streams_, d_, out, x_.data(), mhc_scratch_); break;
    case ResidualKind::attn_residuals:
      kernels::axpy(1.0f, out, d_, partial_.data());
      partial_empty_ = false;
      break;
  }
}

// K/V of the layers bridged to this layer's attention point, each from its own mix.
void Session::bridge_kv(int layer) {
  const ModelConfig& c = model_->config;
  for (int j : model_->bridges_at[size_t(layer)]) {
    const LayerWeights& w = model_->layers[size_t(j)];
    const float* h = sublayer_input(layer, false, w.kv_bridge, w.attn_mhc, bridge_boundary_);
    kernels::rmsnorm(h, w.attn_norm.data(), d_, float(c.norm.eps), c.norm.unit_offset, xn_.data());
    fill_cache(j, xn_.data());
  }
}

void Session::fill_cache(int i, const float* x) {
  const ModelConfig& c = model_->config;
  const LayerWeights& w = model_->layers[size_t(i)];
  const int64_t pos = position() - 1;
  if (c.mixer(i).kind == MixerKind::mla) mla_append(w.mla, c.mixer(i), c, x, pos, mla_[size_t(i)], mla_scratch_, pool_);
  else append_kv({w.attn, c.mixer(i), c, x, pos, attn_, pool_}, kv_[size_t(i)]);
}

void Session::run_mixer(int i, const float* x, float* out) {
  const ModelConfig& c = model_->config;
  const MixerSpec& m = c.mixer(i);
  const LayerWeights& w = model_->layers[size_t(i)];
  const int64_t pos = position() - 1;
  const int owner = c.cache_owner(i);
  const bool own_kv = c.layers[size_t(i)].kv.kind == KvSourceKind::own && c.has_cache(i);
  const bool recurrent = m.kind == MixerKind::gdn || m.kind == MixerKind::gdn2;
  const bool mla = m.kind == MixerKind::mla;
  if (own_kv && !recurrent && !mla) fill_cache(i, x);
  const GroupScores kept{scores_[size_t(i)].empty() ? nullptr : scores_[size_t(i)].data(), context_};
  const AttentionStep step{w.attn, m, c, x, pos, attn_, pool_};
  switch (m.kind) {
    case MixerKind::attention:
      window_attention(step, kv_[size_t(owner)], kept, out);
      break;
    case MixerKind::relu2_attention:
      relu2_attention(step, kv_[size_t(owner)], kept, out, probe_ ? &probe_->layers[size_t(i)].attention : nullptr);
      break;
    case MixerKind::sparse_reuse:
      sparse_attention(step, c.mixer(owner), kv_[size_t(owner)], GroupScores{scores_[size_t(owner)].data(), context_}, out);
      break;
    case MixerKind::mla:
      if (own_kv)  // this token's cache entry and its attention share their projections' region
        mla_decode(w.mla, m, c, x, pos, mla_[size_t(i)], mla_scratch_, out, pool_);
      else
        mla_attention_absorbed(w.mla, m, c, x, pos, mla_[size_t(i)], mla_scratch_, out, pool_);
      break;
    case MixerKind::gdn:
    case MixerKind::gdn2:
      gdn_decode(w.gdn, m, c, x, gdn_[size_t(i)], gdn_scratch_, out, pool_);
      break;
  }
}

void Session::run_ffn(int i, const float* x, float* out) {
  const ModelConfig& c = model_->config;
  const FfnSpec& f = c.ffn(i);
  const LayerWeights& w = model_->layers[size_t(i)];
  FfnProbe* probe = probe_ ? &probe_->layers[size_t(i)].ffn : nullptr;
  std::fill(out, out + d_, 0.0f);
  if (f.kind == FfnKind::dense) {
    dense_ffn(w.dense, {f, x, out, ffn_, pool_, probe});
  } else {
    last_experts_[size_t(i)].resize(size_t(f.top_k));
    moe_ffn(w.moe, d_, {f, x, out, ffn_, pool_, probe}, last_experts_[size_t(i)].data());
  }
}

void Session::forward(int32_t token, float* logits) {
  const Model& m = *model_;
  const ModelConfig& c = m.config;
  const float eps = float(c.norm.eps);
  embed(token);
  for (int i = 0; i < c.n_layers(); ++i) {
    const LayerWeights& w = m.layers[size_t(i)];
    if (starts_block(c, i)) {
      std::copy(partial_.begin(), partial_.end(), blocks_[size_t(finished_blocks_++)].begin());
      std::fill(partial_.begin(), partial_.end(), 0.0f);
      partial_empty_ = true;
    }
    if (w.engram_hasher)
      engram_gate_add(w.engram, *w.engram_hasher, ngram_context(w.engram_hasher->max_order()), x_.data(), streams_, d_,
                      eps, c.norm.unit_offset, engram_gate_[size_t(i)], engram_scratch_, pool_);
    bridge_kv(i);
    const float* h = sublayer_input(i, false, w.attn_res, w.attn_mhc, boundary_);
    kernels::rmsnorm(h, w.attn_norm.data(), d_, eps, c.norm.unit_offset, xn_.data());
    if (!logits && i >= m.prefill_exit) {  // early exit: only this layer's own cache entry remains
      if (c.layers[size_t(i)].kv.kind == KvSourceKind::own && c.has_cache(i)) fill_cache(i, xn_.data());
      return;
    }
    run_mixer(i, xn_.data(), out_.data());
    add_output(out_.data(), w.attn_post_norm, boundary_);
    h = sublayer_input(i, true, w.ffn_res, w.ffn_mhc, boundary_);
    kernels::rmsnorm(h, w.ffn_norm.data(), d_, eps, c.norm.unit_offset, xn_.data());
    run_ffn(i, xn_.data(), out_.data());
    add_output(out_.data(), w.ffn_post_norm, boundary_);
  }
  if (logits) finish(logits);  // a model with no exit layer runs every layer for every token
}

void Session::finish(float* logits) {
  const Model& m = *model_;
  const ModelConfig& c = m.config;
  const float eps = float(c.norm.eps);
  const float* h = x_.data();
  if (c.residual.kind == ResidualKind::attn_residuals) {
    std::copy(partial_.begin(), partial_.end(), blocks_[size_t(finished_blocks_++)].begin());
    gather_residual_sources(final_sources(c, finished_blocks_));
    attn_res_mix(m.final_res, sources_, d_, eps, c.norm.unit_offset, mix_weights_.data(), h_.data(), tmp_.data());
    h = h_.data();
  } else if (c.residual.kind == ResidualKind::mhc) {
    mhc_readout(c.residual.readout, m.final_mhc, streams_, d_, eps, x_.data(), h_.data(), mhc_scratch_);
    h = h_.data();
  }
  kernels::rmsnorm(h, m.final_norm.data(), d_, eps, c.norm.unit_offset, xn_.data());
  last_lm_head_ = lm_head_logits(m.lm_head, m.lm_head_prescore.get(), lm_head_, xn_.data(), logits, lm_scratch_, pool_);
  if (c.logit_softcap > 0)  // monotone, so the pre-score's candidates stay the best; -inf stays -inf
    for (int v = 0; v < c.rows(); ++v)
      if (logits[v] != -INFINITY) logits[v] = float(c.logit_softcap * std::tanh(logits[v] / c.logit_softcap));
  for (int v = c.vocab_size; v < c.rows(); ++v) logits[v] = -INFINITY;
}

}  // namespace wren
