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

#include <unistd.h>

#include "config/layer_plan.h"
#include "kernels/ops.h"
#include "model/engram.h"
#include "runtime/session_budget.h"

namespace wren {

namespace {
// Tokens per prefill chunk. Each chunk reads every projection's weights once for all its
// rows; 64 rows of int8 activations (d_model <= 4096: 256 KB) still sit in L2 beside the
// weight tiles. Measured on the Llama-3.2-1B shape at q8, pp512 with 2 threads (a loaded
// machine, one run each): 10.2 / 12.6 / 11.5 / 11.2 / 9.4 tokens/s at chunks of 32 / 64 /
// 128 / 256 / 512: past 64 rows the weight reads are shared enough, and the rows' working
// set falls out of L2.
constexpr int64_t kPrefillChunk = 64;
// The kept scores of the full layers with sparse dependents are per row ([chunk][kv][context]):
// the chunk is cut so that they stay under this many bytes.
constexpr int64_t kMaxScoreBytes = int64_t(256) << 20;

// A sublayer's (or a bridge's) input: RMSNorm(h) with its gain, or h as it is where the
// placement normalises only the sublayer's output (post: OLMo 2's x + norm(f(x))).
void sublayer_norm(const float* h, const Vec& gain, int64_t d, const NormSpec& n, float* out) {
  if (n.placement == NormPlacement::post) {
    std::copy(h, h + d, out);
    return;
  }
  kernels::rmsnorm(h, gain.data(), d, float(n.eps), n.unit_offset, out);
}
}  // namespace

void BatchScratch::reserve(int64_t rows, const ModelConfig& c) {
  int k = 1;
  for (auto& [name, f] : c.ffns) k = std::max(k, f.top_k);
  const auto grow = [](auto& v, int64_t n) {
    if (v.size() < size_t(n)) v.resize(size_t(n));
  };
  grow(x, rows * c.d_model), grow(y, rows * c.d_model), grow(experts, rows * k);
  active.reserve(size_t(rows)), state_of.reserve(size_t(rows));
}

Session::Session(std::shared_ptr<const Model> model, const SessionOptions& options)
    : model_(std::move(model)), pool_(&kernels::ThreadPool::shared(std::max(1, options.threads))), probe_(options.probe),
      lm_head_(options.lm_head) {
  const ModelConfig& c = model_->config;
  if (probe_ && !probe_->fits(c))
    throw std::invalid_argument("sparsity probe: made for another model shape than " + c.name);
  context_ = options.context > 0 ? options.context : c.context_length;
  kv_type_ = options.kv ? *options.kv : default_kv_type(c, context_, options.kv_budget_bytes);
  check_session_memory(c, context_);  // before the first allocation
  d_ = c.d_model;
  streams_ = c.residual.kind == ResidualKind::mhc ? c.residual.streams : 1;
  const int L = c.n_layers();
  kv_.resize(size_t(L)), mla_.resize(size_t(L)), gdn_.resize(size_t(L)), engram_gate_.resize(size_t(L));
  short_conv_.resize(size_t(L)), mamba2_.resize(size_t(L));
  scores_.resize(size_t(L));
  last_experts_.resize(size_t(L));
  scores_stride_ = 0;
  for (int i = 0; i < L; ++i)
    if (c.mixer(i).kind == MixerKind::sparse_reuse)
      scores_stride_ = std::max<int64_t>(scores_stride_, int64_t(c.mixer(c.cache_owner(i)).n_kv_heads) * context_);
  if (options.prefill_chunk < 0)
    throw std::invalid_argument("prefill chunk: " + std::to_string(options.prefill_chunk) + " tokens, expected >= 0");
  const int64_t wanted = options.prefill_chunk > 0 ? options.prefill_chunk : kPrefillChunk;
  chunk_ = wanted;
  if (scores_stride_ > 0)
    chunk_ = std::clamp<int64_t>(kMaxScoreBytes / int64_t(sizeof(float)) / (scores_stride_ * L), 1, wanted);
  init_layer_states();
  reserve_rows();
  attn_.v_skip = options.v_skip, ffn_.neuron_skip = options.neuron_skip;
  block_attention_ = options.block_attention;
  history_.reserve(size_t(context_));
  if (lm_head_.prescore && model_->lm_head_prescore) lm_scratch_.reserve(model_->lm_head);
}

void Session::init_layer_states() {
  const ModelConfig& c = model_->config;
  const int L = c.n_layers();
  int max_order = 0;
  for (int i = 0; i < L; ++i) {
    const MixerSpec& m = c.mixer(i);
    const bool own = c.has_cache(i);
    if (own && (m.kind == MixerKind::attention || m.kind == MixerKind::relu2_attention)) {
      const bool ring = m.window > 0 && m.window < context_;
      kv_[size_t(i)].init(m.n_kv_heads, m.head_dim, ring ? m.window : context_, ring, kv_type_);
    }
    if (m.kind == MixerKind::mla) {
      mla_[size_t(i)].init(m, context_, kv_type_);
      mla_scratch_.reserve(m, context_);
    }
    if (m.kind == MixerKind::gdn || m.kind == MixerKind::gdn2) {
      gdn_[size_t(i)].init(m);
      gdn_scratch_.reserve(m, d_, chunk_);  // a chunk's rows run the chunked form at once
    }
    if (m.kind == MixerKind::short_conv) {
      short_conv_[size_t(i)].init(m, d_);
      short_conv_scratch_.reserve(m, d_, chunk_);
    }
    if (m.kind == MixerKind::mamba2) {
      mamba2_[size_t(i)].init(m);
      mamba2_scratch_.reserve(m, chunk_);
    }
    // A full layer records its per-KV-head scores only for the sparse layers that select by them.
    if (m.kind == MixerKind::sparse_reuse) {
      const int owner = c.cache_owner(i);
      scores_[size_t(owner)].resize(size_t(chunk_) * size_t(scores_stride_));
    }
    if (model_->layers[size_t(i)].engram_hasher) {
      engram_gate_[size_t(i)].init(streams_, d_, c.engram->conv_kernel);
      max_order = std::max(max_order, model_->layers[size_t(i)].engram_hasher->max_order());
    }
  }
  if (model_->engram) max_order = std::max(max_order, model_->engram->max_order());
  ngram_.resize(size_t(max_order));
  if (model_->engram) engram_rows_.resize(size_t(model_->engram->tables()));
}

void Session::reserve_rows() {
  const ModelConfig& c = model_->config;
  const int n_blocks = residual_blocks(c);
  rows_.resize(size_t(chunk_));
  for (int64_t r = 0; r < chunk_; ++r) {
    TokenState& t = rows_[size_t(r)];
    t.slot = int(r);
    t.e.resize(size_t(d_)), t.g.resize(size_t(d_)), t.partial.resize(size_t(d_)), t.x.resize(size_t(streams_ * d_));
    t.blocks.assign(size_t(n_blocks), std::vector<float>(size_t(d_)));
  }
  r_ = &rows_[0];
  batch_.reserve(chunk_, c);
  h_.resize(size_t(d_)), xn_.resize(size_t(d_)), out_.resize(size_t(d_)), tmp_.resize(size_t(d_));
  mix_weights_.resize(size_t(n_blocks + 3));
  sources_.x.reserve(size_t(n_blocks + 3));
  mhc_scratch_.reserve(streams_, d_);
  attn_.reserve(c, context_);
  ffn_.reserve(c);
}

double Session::cache_bytes_per_token() const {
  double bytes = 0;
  for (const KvCache& kv : kv_)
    if (!kv.empty() && !kv.ring) bytes += kv.bytes_per_token();
  for (const MlaCache& m : mla_)
    if (!m.empty()) bytes += m.bytes_per_token();
  return bytes;
}

double Session::cache_bytes_per_token(const ModelConfig& c, KvType type) {
  double bytes = 0;
  for (int i = 0; i < c.n_layers(); ++i) {
    const MixerSpec& m = c.mixer(i);
    if (m.kind == MixerKind::mla) {
      MlaCache cache;
      cache.init(m, 1, type);
      bytes += cache.bytes_per_token();
    } else if (c.has_cache(i) && (m.kind == MixerKind::attention || m.kind == MixerKind::relu2_attention) &&
               !(m.window > 0 && m.window < c.context_length)) {
      KvCache cache;
      cache.init(m.n_kv_heads, m.head_dim, 1, false, type);
      bytes += cache.bytes_per_token();
    }
  }
  return bytes;
}

KvType Session::default_kv_type(const ModelConfig& c, int64_t context, double budget_bytes) {
  if (budget_bytes <= 0) budget_bytes = 0.25 * double(sysconf(_SC_PHYS_PAGES)) * double(sysconf(_SC_PAGE_SIZE));
  return cache_bytes_per_token(c, KvType::f16) * double(context) <= budget_bytes ? KvType::f16 : KvType::q8;
}

double Session::fixed_state_bytes() const {
  double bytes = 0;
  for (const KvCache& kv : kv_)
    if (kv.ring) bytes += double(kv.bytes());
  for (const GdnState& g : gdn_) bytes += double(g.S.size() + g.conv_q.size() + g.conv_k.size() + g.conv_v.size()) * sizeof(float);
  for (const ShortConvState& s : short_conv_) bytes += double(s.tail.size()) * sizeof(float);
  for (const Mamba2State& s : mamba2_) bytes += double(s.tail.size() + s.S.size()) * sizeof(float);
  for (const EngramGateState& e : engram_gate_) bytes += double(e.history.size()) * sizeof(float);
  return bytes;
}

void Session::prefill(std::span<const int32_t> tokens, float* logits, bool early_exit) {
  if (tokens.empty()) throw std::invalid_argument("prefill: no tokens");
  if (position() + int64_t(tokens.size()) > context_)
    throw std::runtime_error("context full: the session holds " + std::to_string(context_) + " tokens, the prompt needs " +
                             std::to_string(position() + int64_t(tokens.size())));
  thread_local std::vector<BatchRow> rows;  // grown once to a chunk
  for (size_t t0 = 0; t0 < tokens.size(); t0 += size_t(chunk_)) {
    const size_t t1 = std::min(tokens.size(), t0 + size_t(chunk_));
    rows.clear();
    for (size_t t = t0; t < t1; ++t) {
      const bool last = t + 1 == tokens.size();
      rows.push_back({this, tokens[t], last ? logits : nullptr, last || !early_exit});
    }
    forward_batch(rows, batch_);
  }
}

void Session::decode(int32_t token, float* logits) {
  const BatchRow row{this, token, logits, true};
  forward_batch(std::span(&row, 1), batch_);
}

int64_t Session::extend(std::span<const int32_t> prompt, float* logits, bool early_exit) {
  const size_t have = history_.size();
  if (prompt.size() <= have || !std::equal(history_.begin(), history_.end(), prompt.begin()))
    throw std::invalid_argument("extend: the session's " + std::to_string(have) +
                                " tokens of history are not a proper prefix of the " + std::to_string(prompt.size()) +
                                "-token prompt (start a new session)");
  prefill(prompt.subspan(have), logits, early_exit);
  return int64_t(have);
}

// The last `order` token ids up to this one, oldest first; positions before the start are the pad.
std::span<const int32_t> Session::ngram_context(int order) {
  for (int k = 0; k < order; ++k) {
    const int64_t p = r_->pos + 1 - order + k;
    ngram_[size_t(k)] = p >= 0 ? history_[size_t(p)] : EngramHasher::kPad;
  }
  return std::span<const int32_t>(ngram_.data(), size_t(order));
}

void Session::embed(int32_t token) {
  const ModelConfig& c = model_->config;
  if (token < 0 || token >= c.rows())
    throw std::out_of_range("token id " + std::to_string(token) + " outside the vocabulary (" + std::to_string(c.rows()) + " rows)");
  if (position() >= context_) throw std::runtime_error("context full: the session holds " + std::to_string(context_) + " tokens");
  TokenState& r = *r_;
  kernels::decode_row(model_->embed, token, r.e.data());
  if (c.embedding_scale != 1.0)
    for (float& v : r.e) v *= float(c.embedding_scale);
  r.pos = position();
  history_.push_back(token);
  request_engram_rows_ahead();
  if (model_->engram)
    engram_lookup(*model_->engram, model_->engram_tables, ngram_context(model_->engram->max_order()), r.g.data(), engram_rows_);
  if (c.residual.kind == ResidualKind::mhc) mhc_init_streams(r.e.data(), streams_, d_, r.x.data());
  else std::copy(r.e.begin(), r.e.end(), r.x.begin());
  r.finished_blocks = 0;
  r.partial_empty = true;
  std::fill(r.partial.begin(), r.partial.end(), 0.0f);
}

void Session::request_engram_rows_ahead() {
  const auto request = [&](const EngramHasher& hasher, const MatrixView& tables) {
    engram_ahead_.resize(size_t(hasher.tables()));
    hasher.rows(ngram_context(hasher.max_order()), engram_ahead_);
    engram_requested_ += request_engram_rows(tables, engram_ahead_);
  };
  if (model_->engram) request(*model_->engram, model_->engram_tables);
  for (const LayerWeights& w : model_->layers)
    if (w.engram_hasher) request(*w.engram_hasher, w.engram.tables);
}

// The input a sublayer (or a bridge) reads before its norm: the stream, the mix of the
// attention-residual sources that exist at this point (config/layer_plan.h), or mHC's read of
// the streams; for mHC it also fills `boundary`, whose write and mixing coefficients the
// caller hands to add_output.
const float* Session::sublayer_input(int layer, bool ffn, const MixWeights& mix, const MhcWeights& mhc,
                                     MhcBoundary& boundary) {
  const ModelConfig& c = model_->config;
  const float eps = float(c.norm.eps);
  TokenState& r = *r_;
  switch (c.residual.kind) {
    case ResidualKind::plain:
      return r.x.data();
    case ResidualKind::mhc:
      mhc_coefficients(mhc, streams_, d_, eps, c.residual.sinkhorn_iters, r.x.data(), boundary, mhc_scratch_, pool_);
      mhc_read(boundary, streams_, d_, r.x.data(), h_.data(), mhc_scratch_);
      return h_.data();
    case ResidualKind::attn_residuals:
      break;
  }
  gather_residual_sources(sublayer_sources(c, layer, ffn, r.finished_blocks, r.partial_empty));
  attn_res_mix(mix, sources_, d_, eps, c.norm.unit_offset, mix_weights_.data(), h_.data(), tmp_.data());
  return h_.data();
}

void Session::gather_residual_sources(const ResidualSourceSet& set) {
  TokenState& r = *r_;
  gather_sources<const float*>(set, r.e.data(), r.g.data(), [&](int b) { return r.blocks[size_t(b)].data(); },
                               r.partial.data(), sources_.x);
}

void Session::add_output(const float* out, const Vec& post_norm, const MhcBoundary& boundary) {
  const ModelConfig& c = model_->config;
  TokenState& r = *r_;
  if (!post_norm.empty()) {  // sandwich or post norm: the output is normalised before it is added
    kernels::rmsnorm(out, post_norm.data(), d_, float(c.norm.eps), c.norm.unit_offset, tmp_.data());
    out = tmp_.data();
  }
  if (c.residual_scale != 1.0) {  // Granite: x + s f(x)
    std::transform(out, out + d_, tmp_.data(), [s = float(c.residual_scale)](float v) { return v * s; });
    out = tmp_.data();
  }
  switch (c.residual.kind) {
    case ResidualKind::plain: kernels::axpy(1.0f, out, d_, r.x.data()); break;
    case ResidualKind::mhc: mhc_write(boundary, streams_, d_, out, r.x.data(), mhc_scratch_); break;
    case ResidualKind::attn_residuals:
      kernels::axpy(1.0f, out, d_, r.partial.data());
      r.partial_empty = false;
      break;
  }
}

// K/V of the layers bridged to this layer's attention point, each from its own mix.
void Session::bridge_kv(int layer, float* bridge_x) {
  const ModelConfig& c = model_->config;
  int64_t k = 0;
  for (int j : model_->bridges_at[size_t(layer)]) {
    const LayerWeights& w = model_->layers[size_t(j)];
    const float* h = sublayer_input(layer, false, w.kv_bridge, w.attn_mhc, bridge_boundary_);
    float* xn = bridge_x ? bridge_x + k++ * d_ : xn_.data();
    sublayer_norm(h, w.attn_norm, d_, c.norm, xn);
    if (!bridge_x) fill_cache(j, xn);
  }
}

void Session::fill_cache(int i, const float* x, const Projected* projected) {
  const ModelConfig& c = model_->config;
  const LayerWeights& w = model_->layers[size_t(i)];
  const int64_t pos = r_->pos;
  if (c.mixer(i).kind == MixerKind::mla) mla_append(w.mla, c.mixer(i), c, x, pos, mla_[size_t(i)], mla_scratch_, pool_);
  else append_kv({w.attn, c.mixer(i), c, x, pos, attn_, pool_, projected}, kv_[size_t(i)]);
}

void Session::run_mixer(int i, const float* x, float* out, const Projected* projected) {
  const ModelConfig& c = model_->config;
  const MixerSpec& m = c.mixer(i);
  const LayerWeights& w = model_->layers[size_t(i)];
  const int64_t pos = r_->pos;
  const int owner = c.cache_owner(i);
  const bool own_kv = c.fills_own_cache(i);
  const bool recurrent = is_recurrent(m.kind);
  const bool mla = m.kind == MixerKind::mla;
  if (own_kv && !recurrent && !mla) fill_cache(i, x, projected);
  // Kept scores are per row: a later sparse layer of this row reads this row's, while the
  // layer has already run for the rows after it.
  const auto scores_of = [&](int layer) {
    std::vector<float>& v = scores_[size_t(layer)];
    return GroupScores{v.empty() ? nullptr : v.data() + int64_t(r_->slot) * scores_stride_, context_};
  };
  const GroupScores kept = scores_of(i);
  const AttentionStep step{w.attn, m, c, x, pos, attn_, pool_, projected};
  switch (m.kind) {
    case MixerKind::attention:
      window_attention(step, kv_[size_t(owner)], kept, out);
      break;
    case MixerKind::relu2_attention:
      relu2_attention(step, kv_[size_t(owner)], kept, out, probe_ ? &probe_->layers[size_t(i)].attention : nullptr);
      break;
    case MixerKind::sparse_reuse:
      sparse_attention(step, c.mixer(owner), kv_[size_t(owner)], scores_of(owner), out);
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
    case MixerKind::short_conv:
      short_conv_decode(w.short_conv, m, x, short_conv_[size_t(i)], short_conv_scratch_, out, pool_);
      break;
    case MixerKind::mamba2:
      mamba2_decode(w.mamba2, m, c, x, mamba2_[size_t(i)], mamba2_scratch_, out, pool_);
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

bool Session::mixer_step(int i, bool all_layers, float* ffn_x, const BatchedRow& batched) {
  if (!mixer_input(i, all_layers, xn_.data(), true, batched)) return false;
  run_mixer(i, xn_.data(), out_.data());
  mixer_output(i, out_.data(), ffn_x);
  return true;
}

bool Session::mixer_input(int i, bool all_layers, float* xn, bool fill_exit, const BatchedRow& batched) {
  const Model& m = *model_;
  const ModelConfig& c = m.config;
  const float eps = float(c.norm.eps);
  const LayerWeights& w = m.layers[size_t(i)];
  TokenState& r = *r_;
  if (starts_block(c, i)) {
    std::copy(r.partial.begin(), r.partial.end(), r.blocks[size_t(r.finished_blocks++)].begin());
    std::fill(r.partial.begin(), r.partial.end(), 0.0f);
    r.partial_empty = true;
  }
  if (w.engram_hasher && batched.engram.v)
    engram_gate_apply(w.engram, batched.engram, r.x.data(), streams_, d_, eps, c.norm.unit_offset, engram_gate_[size_t(i)],
                      engram_scratch_);
  else if (w.engram_hasher)
    engram_gate_add(w.engram, *w.engram_hasher, ngram_context(w.engram_hasher->max_order()), r.x.data(), streams_, d_,
                    eps, c.norm.unit_offset, engram_gate_[size_t(i)], engram_scratch_, pool_);
  bridge_kv(i, batched.bridge_x);
  const float* h = sublayer_input(i, false, w.attn_res, w.attn_mhc, r.boundary);
  sublayer_norm(h, w.attn_norm, d_, c.norm, xn);
  if (!all_layers && i >= m.prefill_exit) {  // early exit: only this layer's own cache entry remains
    if (fill_exit && c.fills_own_cache(i)) fill_cache(i, xn);
    return false;
  }
  return true;
}

void Session::mixer_output(int i, const float* out, float* ffn_x) {
  const ModelConfig& c = model_->config;
  const LayerWeights& w = model_->layers[size_t(i)];
  TokenState& r = *r_;
  add_output(out, w.attn_post_norm, r.boundary);
  const float* h = sublayer_input(i, true, w.ffn_res, w.ffn_mhc, r.boundary);
  sublayer_norm(h, w.ffn_norm, d_, c.norm, ffn_x);
}

void Session::ffn_step(int i, const float* ffn_out) {
  add_output(ffn_out, model_->layers[size_t(i)].ffn_post_norm, r_->boundary);
}

void Session::finish(float* logits) {
  const Model& m = *model_;
  const ModelConfig& c = m.config;
  const float eps = float(c.norm.eps);
  TokenState& r = *r_;
  const float* h = r.x.data();
  if (c.residual.kind == ResidualKind::attn_residuals) {
    std::copy(r.partial.begin(), r.partial.end(), r.blocks[size_t(r.finished_blocks++)].begin());
    gather_residual_sources(final_sources(c, r.finished_blocks));
    attn_res_mix(m.final_res, sources_, d_, eps, c.norm.unit_offset, mix_weights_.data(), h_.data(), tmp_.data());
    h = h_.data();
  } else if (c.residual.kind == ResidualKind::mhc) {
    mhc_readout(c.residual.readout, m.final_mhc, streams_, d_, eps, r.x.data(), h_.data(), mhc_scratch_, nullptr, pool_);
    h = h_.data();
  }
  kernels::rmsnorm(h, m.final_norm.data(), d_, eps, c.norm.unit_offset, xn_.data());
  LmHeadMode head = lm_head_;
  head.prescore = head.prescore && m.lm_head_prescore && lm_backoff_.try_prescore();
  last_lm_head_ = lm_head_logits(m.lm_head, m.lm_head_prescore.get(), head, xn_.data(), logits, lm_scratch_, pool_);
  if (head.prescore) lm_backoff_.record(last_lm_head_.prescored);
  if (c.logit_divisor != 1.0)  // Granite; like the soft-cap, monotone
    for (int v = 0; v < c.rows(); ++v) logits[v] = float(logits[v] / c.logit_divisor);
  if (c.logit_softcap > 0)  // monotone, so the pre-score's candidates stay the best; -inf stays -inf
    for (int v = 0; v < c.rows(); ++v)
      if (logits[v] != -INFINITY) logits[v] = float(c.logit_softcap * std::tanh(logits[v] / c.logit_softcap));
  for (int v = c.vocab_size; v < c.rows(); ++v) logits[v] = -INFINITY;
}

namespace {

// Rejects a batch before any row changes a session: rows over another model, a session with
// more rows than TokenStates, a token outside the vocabulary, a full context.
void check_batch(std::span<const BatchRow> rows, const Model& m, std::vector<int32_t>& state_of) {
  state_of.clear();
  for (size_t j = 0; j < rows.size(); ++j) {
    const Session& s = *rows[j].session;
    if (&s.model() != &m) throw std::invalid_argument("forward_batch: the rows' sessions run different models");
    int32_t before = 0;
    for (size_t k = 0; k < j; ++k) before += rows[k].session == rows[j].session;
    if (before >= s.chunk())
      throw std::invalid_argument("forward_batch: " + std::to_string(before + 1) + " rows of one session, which holds " +
                                  std::to_string(s.chunk()));
    if (rows[j].token < 0 || rows[j].token >= m.config.rows())
      throw std::out_of_range("token id " + std::to_string(rows[j].token) + " outside the vocabulary (" +
                              std::to_string(m.config.rows()) + " rows)");
    if (s.position() + before >= s.context())
      throw std::runtime_error("context full: the session holds " + std::to_string(s.context()) + " tokens");
    state_of.push_back(before);
  }
}

}  // namespace

void forward_batch(std::span<const BatchRow> rows, BatchScratch& b) {
  for (const BatchRow& r : rows)
    if (!r.session->failure_.empty())
      throw std::logic_error("session: an earlier step failed (" + r.session->failure_ +
                             "), so its caches are not whole: restore a saved state or start a new session");
  try {
    Session::forward_rows(rows, b);
  } catch (const std::exception& e) {
    for (const BatchRow& r : rows) r.session->failure_ = e.what();
    throw;
  }
}

void Session::forward_rows(std::span<const BatchRow> rows, BatchScratch& b) {
  if (rows.empty()) return;
  const Model& m = rows[0].session->model();
  const ModelConfig& c = m.config;
  const int64_t n = int64_t(rows.size()), d = c.d_model;
  b.reserve(n, c);  // grows once to the largest batch
  check_batch(rows, m, b.state_of);
  b.active.clear();
  for (int64_t j = 0; j < n; ++j) {
    Session::enter_row(rows, b, int32_t(j)).embed(rows[size_t(j)].token);
    b.active.push_back(int32_t(j));
  }
  float *x = b.x.data(), *y = b.y.data();
  for (int i = 0; i < c.n_layers() && !b.active.empty(); ++i) {
    // The mixers: an attention layer's projections as GEMMs over the rows, other mixers row
    // by row; rows that stop here (early exit) leave the batch.
    const MixerKind kind = c.mixer(i).kind;
    if (m.layers[size_t(i)].engram_hasher && b.active.size() > 1) Session::engram_batch(i, rows, b);
    const bool one_session = std::all_of(b.active.begin(), b.active.end(),
                                         [&](int32_t j) { return rows[size_t(j)].session == rows[0].session; });
    if (b.active.size() > 1 && (kind == MixerKind::attention || kind == MixerKind::relu2_attention ||
                                kind == MixerKind::sparse_reuse)) {
      Session::attention_batch(i, rows, b);
    } else if (b.active.size() > 1 && kind == MixerKind::mla) {
      Session::mla_batch(i, rows, b);
    } else if (b.active.size() > 1 && one_session &&
               is_recurrent(kind)) {
      Session::recurrent_batch(i, rows, b);  // a prompt's rows through the chunked form / batched projections
    } else {
      size_t live = 0;
      for (size_t a = 0; a < b.active.size(); ++a) {
        const int32_t j = b.active[a];
        BatchedRow batched = Session::batched_row(i, rows, b, int64_t(a));
        batched.bridge_x = nullptr;  // each row fills its bridged caches as it goes
        if (Session::enter_row(rows, b, j).mixer_step(i, rows[size_t(j)].all_layers, x + int64_t(live) * d, batched))
          b.active[live++] = j;
      }
      b.active.resize(live);
    }
    const size_t live = b.active.size();
    if (live == 0) break;
    // The FFN of every live row at once (a single row: the decode path).
    const int64_t na = int64_t(live);
    Session& s0 = Session::enter_row(rows, b, b.active[0]);
    if (na == 1) {
      s0.run_ffn(i, x, y);
    } else {
      const FfnSpec& f = c.ffn(i);
      const LayerWeights& w = m.layers[size_t(i)];
      std::fill(y, y + na * d, 0.0f);
      FfnProbe* probe = s0.probe_ ? &s0.probe_->layers[size_t(i)].ffn : nullptr;
      const FfnBatchCall call{f, x, y, na, s0.ffn_, b.ffn, s0.pool_, probe};
      if (f.kind == FfnKind::dense) {
        dense_ffn_batch(w.dense, int(d), call);
      } else {
        moe_ffn_batch(w.moe, int(d), call, b.experts.data());
        for (int64_t a = 0; a < na; ++a) {
          std::vector<int32_t>& last = rows[size_t(b.active[size_t(a)])].session->last_experts_[size_t(i)];
          last.resize(size_t(f.top_k));
          std::copy(b.experts.begin() + a * f.top_k, b.experts.begin() + (a + 1) * f.top_k, last.begin());
        }
      }
    }
    for (int64_t a = 0; a < na; ++a) Session::enter_row(rows, b, b.active[size_t(a)]).ffn_step(i, y + a * d);
  }
  for (int64_t j = 0; j < n; ++j)
    if (rows[size_t(j)].logits) Session::enter_row(rows, b, int32_t(j)).finish(rows[size_t(j)].logits);
}

}  // namespace wren
