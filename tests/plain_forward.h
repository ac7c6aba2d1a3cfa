// A cache-free forward pass, written for the cache test: the logits of the last token of a
// sequence, computed from the token ids alone. Nothing is kept between calls and no K/V
// cache exists: each layer keeps only the normed inputs its keys and values come from, and
// every attention query forms the keys and values of every position it attends again from
// them with plain loops (projection, bias, QK-norm, RoPE; MLA: latent, norm, W_UK, W_UV), in
// double where it sums. The residual bookkeeping follows the model's description (engram,
// attention residuals, mHC, bridges) through the model/ and config/ functions that have no
// cache; recurrent layers (GDN) run from a zero state over the whole sequence.
#pragma once

#include <algorithm>
#include <cmath>
#include <numeric>
#include <span>
#include <vector>

#include "config/layer_plan.h"
#include "kernels/ops.h"
#include "model/attention.h"
#include "model/attn_residuals.h"
#include "model/engram.h"
#include "model/engram_gate.h"
#include "model/ffn.h"
#include "model/gated_deltanet.h"
#include "model/lm_head.h"
#include "model/mhc.h"
#include "model/mla.h"
#include "model/model.h"

namespace wren::testing_util {

class PlainForward {
 public:
  explicit PlainForward(const Model& m) : m_(m), c_(m.config) {}

  // The logits ([rows]; padding rows -inf) after the last of `tokens`, from nothing.
  std::vector<float> run(std::span<const int32_t> tokens) {
    start(tokens);
    for (int64_t p = 0; p < int64_t(tokens.size()); ++p) position(p);
    return finish();
  }

 private:
  using Row = std::vector<float>;
  const Model& m_;
  const ModelConfig& c_;
  std::span<const int32_t> tokens_;
  int d_ = 0, streams_ = 1;
  std::vector<std::vector<Row>> inputs_;  // per layer: the normed K/V input of every position so far
  std::vector<std::vector<Row>> group_max_;  // per full layer: this position's per-KV-head max scores
  std::vector<GdnState> gdn_;
  std::vector<ShortConvState> short_conv_;
  std::vector<Mamba2State> mamba2_;
  std::vector<EngramGateState> gate_state_;
  GdnScratch gdn_scratch_;
  ShortConvScratch short_conv_scratch_;
  Mamba2Scratch mamba2_scratch_;
  MhcScratch mhc_scratch_;
  EngramGateScratch gate_scratch_;
  FfnScratch ffn_;
  LmHeadScratch head_scratch_;
  MhcBoundary boundary_, bridge_boundary_;
  Row e_, g_, x_, partial_, h_, tmp_, xn_, out_, weights_;
  std::vector<Row> blocks_;
  int finished_ = 0;
  bool partial_empty_ = true;
  std::vector<const float*> sources_;

  void start(std::span<const int32_t> tokens) {
    tokens_ = tokens;
    d_ = c_.d_model;
    streams_ = c_.residual.kind == ResidualKind::mhc ? c_.residual.streams : 1;
    const int L = c_.n_layers();
    inputs_.assign(size_t(L), {});
    group_max_.assign(size_t(L), {});
    gdn_.assign(size_t(L), {});
    short_conv_.assign(size_t(L), {});
    mamba2_.assign(size_t(L), {});
    gate_state_.assign(size_t(L), {});
    for (int i = 0; i < L; ++i) {
      const MixerSpec& mx = c_.mixer(i);
      if (mx.kind == MixerKind::gdn || mx.kind == MixerKind::gdn2) {
        gdn_[size_t(i)].init(mx);
        gdn_scratch_.reserve(mx, d_, 1);
      }
      if (mx.kind == MixerKind::short_conv) {
        short_conv_[size_t(i)].init(mx, d_);
        short_conv_scratch_.reserve(mx, d_, 1);
      }
      if (mx.kind == MixerKind::mamba2) {
        mamba2_[size_t(i)].init(mx);
        mamba2_scratch_.reserve(mx, 1);
      }
      if (m_.layers[size_t(i)].engram_hasher) gate_state_[size_t(i)].init(streams_, d_, c_.engram->conv_kernel);
    }
    mhc_scratch_.reserve(streams_, d_);
    ffn_.reserve(c_);
    e_.assign(size_t(d_), 0), g_ = e_, partial_ = e_, h_ = e_, tmp_ = e_, xn_ = e_, out_ = e_;
    x_.assign(size_t(streams_ * d_), 0);
    blocks_.assign(size_t(residual_blocks(c_)), Row(size_t(d_)));
    weights_.assign(blocks_.size() + 3, 0);
  }

  std::vector<int32_t> ngram(int64_t p, int order) const {
    std::vector<int32_t> ctx(static_cast<size_t>(order));
    for (int k = 0; k < order; ++k) {
      const int64_t q = p + 1 - order + k;
      ctx[size_t(k)] = q >= 0 ? tokens_[size_t(q)] : EngramHasher::kPad;
    }
    return ctx;
  }

  void position(int64_t p) {
    kernels::decode_row(m_.embed, tokens_[size_t(p)], e_.data());
    for (float& v : e_) v *= float(c_.embedding_scale);
    if (m_.engram) {
      std::vector<int64_t> rows(static_cast<size_t>(m_.engram->tables()));
      engram_lookup(*m_.engram, m_.engram_tables, ngram(p, m_.engram->max_order()), g_.data(), rows);
    }
    if (c_.residual.kind == ResidualKind::mhc) mhc_init_streams(e_.data(), streams_, d_, x_.data());
    else std::copy(e_.begin(), e_.end(), x_.begin());
    finished_ = 0, partial_empty_ = true;
    std::fill(partial_.begin(), partial_.end(), 0.0f);
    const float eps = float(c_.norm.eps);
    for (int i = 0; i < c_.n_layers(); ++i) {
      const LayerWeights& w = m_.layers[size_t(i)];
      if (starts_block(c_, i)) {
        blocks_[size_t(finished_++)] = partial_;
        std::fill(partial_.begin(), partial_.end(), 0.0f);
        partial_empty_ = true;
      }
      if (w.engram_hasher)
        engram_gate_add(w.engram, *w.engram_hasher, ngram(p, w.engram_hasher->max_order()), x_.data(), streams_, d_, eps,
                        c_.norm.unit_offset, gate_state_[size_t(i)], gate_scratch_);
      for (int j : m_.bridges_at[size_t(i)]) {  // layer j's K/V input, mixed at this point
        const LayerWeights& wj = m_.layers[size_t(j)];
        const float* h = input(i, false, wj.kv_bridge, wj.attn_mhc, bridge_boundary_);
        inputs_[size_t(j)].push_back(normed(h, wj.attn_norm));
      }
      const float* h = input(i, false, w.attn_res, w.attn_mhc, boundary_);
      xn_ = normed(h, w.attn_norm);
      mixer(i, p);
      add(out_.data(), w.attn_post_norm, boundary_);
      h = input(i, true, w.ffn_res, w.ffn_mhc, boundary_);
      xn_ = normed(h, w.ffn_norm);
      std::fill(out_.begin(), out_.end(), 0.0f);
      const FfnSpec& f = c_.ffn(i);
      if (f.kind == FfnKind::dense) dense_ffn(w.dense, {f, xn_.data(), out_.data(), ffn_});
      else moe_ffn(w.moe, d_, {f, xn_.data(), out_.data(), ffn_});
      add(out_.data(), w.ffn_post_norm, boundary_);
    }
  }

  Row normed(const float* h, const Vec& gain) const {
    Row y(static_cast<size_t>(d_));
    kernels::rmsnorm(h, gain.data(), d_, float(c_.norm.eps), c_.norm.unit_offset, y.data());
    return y;
  }

  const float* input(int layer, bool ffn, const MixWeights& mix, const MhcWeights& mhc, MhcBoundary& b) {
    const float eps = float(c_.norm.eps);
    switch (c_.residual.kind) {
      case ResidualKind::plain: return x_.data();
      case ResidualKind::mhc:
        mhc_coefficients(mhc, streams_, d_, eps, c_.residual.sinkhorn_iters, x_.data(), b, mhc_scratch_);
        mhc_read(b, streams_, d_, x_.data(), h_.data(), mhc_scratch_);
        return h_.data();
      case ResidualKind::attn_residuals: break;
    }
    mix_sources(sublayer_sources(c_, layer, ffn, finished_, partial_empty_), mix);
    return h_.data();
  }

  void mix_sources(const ResidualSourceSet& set, const MixWeights& mix) {
    gather_sources<const float*>(set, e_.data(), g_.data(), [&](int b) { return blocks_[size_t(b)].data(); },
                                 partial_.data(), sources_);
    ResidualSources src;
    src.x = sources_;
    attn_res_mix(mix, src, d_, float(c_.norm.eps), c_.norm.unit_offset, weights_.data(), h_.data(), tmp_.data());
  }

  void add(const float* out, const Vec& post_norm, const MhcBoundary& b) {
    Row normed_out;
    if (!post_norm.empty()) {
      normed_out = normed(out, post_norm);
      out = normed_out.data();
    }
    switch (c_.residual.kind) {
      case ResidualKind::plain: kernels::axpy(1.0f, out, d_, x_.data()); break;
      case ResidualKind::mhc: mhc_write(b, streams_, d_, out, x_.data(), mhc_scratch_); break;
      case ResidualKind::attn_residuals:
        kernels::axpy(1.0f, out, d_, partial_.data());
        partial_empty_ = false;
        break;
    }
  }

  // --- The mixers, from the stored inputs ---------------------------------------------

  void mixer(int i, int64_t p) {
    const MixerSpec& mx = c_.mixer(i);
    const LayerWeights& w = m_.layers[size_t(i)];
    const bool own = c_.layers[size_t(i)].kv.kind == KvSourceKind::own && c_.has_cache(i);
    std::fill(out_.begin(), out_.end(), 0.0f);
    switch (mx.kind) {
      case MixerKind::gdn:
      case MixerKind::gdn2:
        gdn_decode(w.gdn, mx, c_, xn_.data(), gdn_[size_t(i)], gdn_scratch_, out_.data(), nullptr);
        return;
      case MixerKind::short_conv:  // token by token (tests/hf_fixture.h checks it against LFM2's own forward)
        short_conv_decode(w.short_conv, mx, xn_.data(), short_conv_[size_t(i)], short_conv_scratch_, out_.data(), nullptr);
        return;
      case MixerKind::mamba2:  // token by token (the trainer's chunked form and tests/hf_fixture.h check it)
        mamba2_decode(w.mamba2, mx, c_, xn_.data(), mamba2_[size_t(i)], mamba2_scratch_, out_.data(), nullptr);
        return;
      case MixerKind::mla:
        if (own) inputs_[size_t(i)].push_back(xn_);
        return mla(i, p);
      default:
        if (own) inputs_[size_t(i)].push_back(xn_);
        return attention(i, p);
    }
  }

  // Layer `owner`'s key and value of position j, formed again from its stored input.
  void key_value(int owner, int64_t j, Row& k, Row& v) const {
    const MixerSpec& mx = c_.mixer(owner);
    const AttentionWeights& w = m_.layers[size_t(owner)].attn;
    const int dkv = mx.n_kv_heads * mx.head_dim;
    const Row& x = inputs_[size_t(owner)][size_t(j)];
    k.assign(size_t(dkv), 0), v.assign(size_t(dkv), 0);
    kernels::matvec(w.wk, x.data(), k.data());
    kernels::matvec(w.wv, x.data(), v.data());
    for (size_t r = 0; r < w.bk.size(); ++r) k[r] += w.bk[r];
    for (size_t r = 0; r < w.bv.size(); ++r) v[r] += w.bv[r];
    const float eps = float(c_.norm.eps);
    if (mx.qk_norm == QkNorm::full) kernels::rmsnorm(k.data(), w.k_norm.data(), dkv, eps, c_.norm.unit_offset, k.data());
    if (mx.qk_norm == QkNorm::head)
      for (int g = 0; g < mx.n_kv_heads; ++g)
        kernels::rmsnorm(k.data() + g * mx.head_dim, w.k_norm.data(), mx.head_dim, eps, c_.norm.unit_offset,
                         k.data() + g * mx.head_dim);
    if (mx.rope) {
      const int rotary = mx.rope->rotary_dim ? mx.rope->rotary_dim : mx.head_dim;
      kernels::rope(k.data(), mx.n_kv_heads, mx.head_dim, rotary, w.rope.inv_freq.data(), j);
      for (int g = 0; g < mx.n_kv_heads; ++g)
        for (int r = 0; r < rotary; ++r) k[size_t(g * mx.head_dim + r)] *= w.rope.magnitude;
    }
  }

  static double dot(const float* a, const float* b, int n) {
    double s = 0;
    for (int r = 0; r < n; ++r) s += double(a[r]) * b[r];
    return s;
  }

  // Softmax / ReLU^2 / sparse attention of position p at layer i.
  void attention(int i, int64_t p) {
    const MixerSpec& mx = c_.mixer(i);
    const AttentionWeights& w = m_.layers[size_t(i)].attn;
    const int owner = c_.cache_owner(i);
    const MixerSpec& om = c_.mixer(owner);
    const int dh = mx.head_dim, group = mx.n_heads / om.n_kv_heads;
    Row q(static_cast<size_t>(mx.n_heads * dh));
    project_query(w, mx, c_, xn_.data(), p, q.data(), nullptr);
    const int64_t n = p + 1;
    std::vector<Row> keys(static_cast<size_t>(n)), values(static_cast<size_t>(n));
    for (int64_t j = 0; j < n; ++j) key_value(owner, j, keys[size_t(j)], values[size_t(j)]);
    const bool kept = !group_max_[size_t(i)].empty() || dependents(i);
    if (kept) group_max_[size_t(i)].assign(size_t(mx.n_kv_heads), Row(size_t(n), -INFINITY));
    Row o(size_t(mx.n_heads * mx.value_dim()), 0.0f);
    for (int h = 0; h < mx.n_heads; ++h) {
      const int g = h / group;
      const float* qh = q.data() + h * dh;
      std::vector<int64_t> attended;
      if (mx.kind == MixerKind::sparse_reuse) attended = selection(group_max_[size_t(owner)][size_t(g)], mx);
      else
        for (int64_t j = mx.window > 0 ? std::max<int64_t>(0, n - mx.window) : 0; j < n; ++j) attended.push_back(j);
      std::vector<double> s;
      for (int64_t j : attended) s.push_back(dot(qh, keys[size_t(j)].data() + g * dh, dh));
      std::vector<double> wts(s.size());
      double denom = 0;
      if (mx.kind == MixerKind::relu2_attention) {
        for (size_t r = 0; r < s.size(); ++r) {
          s[r] /= std::sqrt(double(dh));
          wts[r] = s[r] > 0 ? s[r] * s[r] : 0.0;
          denom += wts[r];
        }
        denom += mx.relu2_c;
      } else {
        const double scale = mx.kind == MixerKind::sparse_reuse ? 1.0 / std::sqrt(double(dh))
                             : (mx.scale > 0 ? mx.scale : 1.0 / std::sqrt(double(dh))) * w.rope.score_scale;
        double top = w.sinks.empty() ? -INFINITY : w.sinks[size_t(h)];
        for (double& x : s) {
          x *= scale;
          if (mx.softcap > 0) x = mx.softcap * std::tanh(x / mx.softcap);
          top = std::max(top, x);
        }
        if (!w.sinks.empty()) denom += std::exp(w.sinks[size_t(h)] - top);
        for (size_t r = 0; r < s.size(); ++r) denom += wts[r] = std::exp(s[r] - top);
      }
      if (kept)
        for (size_t r = 0; r < s.size(); ++r) {
          float& best = group_max_[size_t(i)][size_t(g)][size_t(attended[r])];
          best = std::max(best, float(s[r]));
        }
      for (size_t r = 0; r < s.size(); ++r)
        for (int e = 0; e < dh; ++e)
          o[size_t(h * dh + e)] += float(wts[r] / denom * values[size_t(attended[r])][size_t(g * dh + e)]);
    }
    Row gate(o.size());
    gated_output(w.wg, w.wo, w.bo, int64_t(o.size()), xn_.data(), o.data(), gate.data(), out_.data(), nullptr);
  }

  bool dependents(int i) const {
    for (int l = 0; l < c_.n_layers(); ++l)
      if (c_.mixer(l).kind == MixerKind::sparse_reuse && c_.cache_owner(l) == i) return true;
    return false;
  }

  // The sparse layer's keys: all when few, else the top_k by the owner's group score (ties:
  // the lower position) and the `recent` most recent.
  static std::vector<int64_t> selection(const Row& score, const MixerSpec& mx) {
    const int64_t n = int64_t(score.size());
    std::vector<int64_t> all(static_cast<size_t>(n));
    std::iota(all.begin(), all.end(), 0);
    if (n <= int64_t(mx.top_k) + mx.recent) return all;
    std::stable_sort(all.begin(), all.end(), [&](int64_t a, int64_t b) { return score[size_t(a)] > score[size_t(b)]; });
    std::vector<int64_t> out;
    for (int r = 0; r < mx.top_k; ++r)
      if (all[size_t(r)] < n - mx.recent) out.push_back(all[size_t(r)]);
    for (int64_t j = n - mx.recent; j < n; ++j) out.push_back(j);
    std::sort(out.begin(), out.end());
    return out;
  }

  // MLA with K and V materialised from every position's latent, formed again.
  void mla(int i, int64_t p) {
    const MixerSpec& mx = c_.mixer(i);
    const MlaWeights& w = m_.layers[size_t(i)].mla;
    const int H = mx.n_heads, nope = mx.qk_nope_dim, rope = mx.qk_rope_dim, dqk = nope + rope, dv = mx.v_head_dim;
    const int L = mx.kv_lora_rank, rotary = mx.rope ? (mx.rope->rotary_dim ? mx.rope->rotary_dim : rope) : 0;
    const float eps = float(c_.norm.eps);
    auto turn = [&](float* x, int heads, int stride, int64_t at) {
      if (!mx.rope) return;
      kernels::rope(x, heads, stride, rotary, w.rope.inv_freq.data(), at);
      for (int h = 0; h < heads; ++h)
        for (int r = 0; r < rotary; ++r) x[h * stride + r] *= w.rope.magnitude;
    };
    Row q(static_cast<size_t>(H * dqk));
    if (mx.q_lora_rank > 0) {
      Row qa(static_cast<size_t>(mx.q_lora_rank));
      kernels::matvec(w.wq_a, xn_.data(), qa.data());
      kernels::rmsnorm(qa.data(), w.q_a_norm.data(), mx.q_lora_rank, eps, c_.norm.unit_offset, qa.data());
      kernels::matvec(w.wq_b, qa.data(), q.data());
    } else {
      kernels::matvec(w.wq, xn_.data(), q.data());
    }
    turn(q.data() + nope, H, dqk, p);
    const int64_t n = p + 1;
    std::vector<Row> K(static_cast<size_t>(n)), V(static_cast<size_t>(n));
    for (int64_t j = 0; j < n; ++j) {
      Row kv(static_cast<size_t>(L + rope)), kn(size_t(H * nope)), v(size_t(H * dv));
      kernels::matvec(w.wkv_a, inputs_[size_t(i)][size_t(j)].data(), kv.data());
      kernels::rmsnorm(kv.data(), w.kv_a_norm.data(), L, eps, c_.norm.unit_offset, kv.data());
      turn(kv.data() + L, 1, rope, j);
      if (nope > 0) kernels::matvec(w.wk_b, kv.data(), kn.data());
      kernels::matvec(w.wv_b, kv.data(), v.data());
      K[size_t(j)].resize(size_t(H * dqk));
      for (int h = 0; h < H; ++h) {
        std::copy(kn.begin() + h * nope, kn.begin() + (h + 1) * nope, K[size_t(j)].begin() + h * dqk);
        std::copy(kv.begin() + L, kv.end(), K[size_t(j)].begin() + h * dqk + nope);
      }
      V[size_t(j)] = v;
    }
    const double scale = (mx.scale > 0 ? mx.scale : 1.0 / std::sqrt(double(dqk))) * w.rope.score_scale;
    Row o(size_t(H * dv), 0.0f);
    for (int h = 0; h < H; ++h) {
      std::vector<double> s(static_cast<size_t>(n));
      double top = -INFINITY, sum = 0;
      for (int64_t j = 0; j < n; ++j) top = std::max(top, s[size_t(j)] = dot(q.data() + h * dqk, K[size_t(j)].data() + h * dqk, dqk) * scale);
      for (double& x : s) sum += x = std::exp(x - top);
      for (int64_t j = 0; j < n; ++j)
        for (int e = 0; e < dv; ++e) o[size_t(h * dv + e)] += float(s[size_t(j)] / sum * V[size_t(j)][size_t(h * dv + e)]);
    }
    Row gate(o.size());
    gated_output(w.wg, w.wo, Vec{}, int64_t(o.size()), xn_.data(), o.data(), gate.data(), out_.data(), nullptr);
  }

  std::vector<float> finish() {
    const float eps = float(c_.norm.eps);
    const float* h = x_.data();
    if (c_.residual.kind == ResidualKind::attn_residuals) {
      blocks_[size_t(finished_++)] = partial_;
      mix_sources(final_sources(c_, finished_), m_.final_res);
      h = h_.data();
    } else if (c_.residual.kind == ResidualKind::mhc) {
      mhc_readout(c_.residual.readout, m_.final_mhc, streams_, d_, eps, x_.data(), h_.data(), mhc_scratch_);
      h = h_.data();
    }
    xn_ = normed(h, m_.final_norm);
    std::vector<float> logits(static_cast<size_t>(c_.rows()));
    head_scratch_.reserve(m_.lm_head);
    lm_head_logits(m_.lm_head, nullptr, LmHeadMode{}, xn_.data(), logits.data(), head_scratch_, nullptr);
    if (c_.logit_softcap > 0)
      for (float& v : logits) v = float(c_.logit_softcap * std::tanh(v / c_.logit_softcap));
    for (int v = c_.vocab_size; v < c_.rows(); ++v) logits[size_t(v)] = -INFINITY;
    return logits;
  }
};

}  // namespace wren::testing_util
