// The batched layer steps of forward_batch (runtime/session.h): a batch's rows meet each
// projection matrix of a layer once, as one GEMM per matrix (model/region.h), while each row's
// cache entry, attention and residual update still run in row order, so every row sees the
// caches exactly as token-by-token decode would leave them.
//   attention / ReLU^2 / sparse layers: Q, K, V, gate, O   (attention_batch)
//   MLA: W_kva, W_q or W_qa + W_qb, W_g, W_o              (mla_batch)
//   Gated DeltaNet: the chunked form; short conv: batched projections   (recurrent_batch)
//   the gated engram's W_value, W_key; bridged layers' K/V  (engram_batch, fill_bridges)
#include <algorithm>

#include "model/engram.h"
#include "model/region.h"
#include "runtime/session.h"

namespace wren {

Session& Session::enter_row(std::span<const BatchRow> rows, const BatchScratch& b, int32_t j) {
  Session& s = *rows[size_t(j)].session;
  s.use(s.rows_[size_t(b.state_of[size_t(j)])]);
  return s;
}

void Session::recurrent_batch(int i, std::span<const BatchRow> rows, BatchScratch& b) {
  Session& s = *rows[0].session;
  const ModelConfig& c = s.model().config;
  const int64_t d = c.d_model, n = int64_t(b.active.size());
  if (b.xn.size() < size_t(n * d)) b.xn.resize(size_t(n * d)), b.xq.resize(size_t(n * d));
  b.attends.assign(size_t(n), 0);
  int64_t live = 0;
  for (int64_t a = 0; a < n; ++a) {
    const int32_t j = b.active[size_t(a)];
    enter_row(rows, b, j);  // one session: every row is s
    if (s.mixer_input(i, rows[size_t(j)].all_layers, b.xn.data() + live * d, true, batched_row(i, rows, b, a)))
      b.attends[size_t(a)] = 1, ++live;
  }
  if (!s.model().bridges_at[size_t(i)].empty()) fill_bridges(i, rows, b);  // every row's, before any leaves
  live = 0;
  for (int64_t a = 0; a < n; ++a)
    if (b.attends[size_t(a)]) b.active[size_t(live++)] = b.active[size_t(a)];
  b.active.resize(size_t(live));
  float *x = b.x.data(), *y = b.y.data();
  const LayerWeights& w = s.model().layers[size_t(i)];
  if (c.mixer(i).kind == MixerKind::short_conv)
    short_conv_prefill(w.short_conv, c.mixer(i), b.xn.data(), live, s.short_conv_[size_t(i)], s.short_conv_scratch_, y, s.pool_);
  else if (c.mixer(i).kind == MixerKind::mamba2)
    mamba2_prefill(w.mamba2, c.mixer(i), c, b.xn.data(), live, s.mamba2_[size_t(i)], s.mamba2_scratch_, y, s.pool_);
  else
    gdn_prefill(w.gdn, c.mixer(i), c, b.xn.data(), live, s.gdn_[size_t(i)], s.gdn_scratch_, y, s.pool_);
  for (int64_t a = 0; a < live; ++a) {
    enter_row(rows, b, b.active[size_t(a)]).mixer_output(i, y + a * d, x + a * d);
  }
}

BatchedRow Session::batched_row(int i, std::span<const BatchRow> rows, BatchScratch& b, int64_t a) {
  const Model& m = rows[0].session->model();
  const int64_t n = int64_t(b.active.size()), d = m.config.d_model;
  BatchedRow r;
  if (n < 2) return r;
  if (m.layers[size_t(i)].engram_hasher) r.engram = engram_gate_row(b.engram, a);
  const int64_t bridges = int64_t(m.bridges_at[size_t(i)].size());
  if (bridges > 0) {
    if (b.bridge_x.size() < size_t(n * bridges * d)) b.bridge_x.resize(size_t(n * bridges * d));
    r.bridge_x = b.bridge_x.data() + a * bridges * d;
  }
  return r;
}

void Session::fill_bridges(int i, std::span<const BatchRow> rows, BatchScratch& b) {
  Session& s0 = *rows[0].session;
  const Model& m = s0.model();
  const ModelConfig& c = m.config;
  const std::vector<int>& bridged = m.bridges_at[size_t(i)];
  const int64_t n = int64_t(b.active.size()), d = c.d_model, ldx = int64_t(bridged.size()) * d;
  const auto grow = [](std::vector<float>& v, int64_t size) {
    if (v.size() < size_t(size)) v.resize(size_t(size));
  };
  for (size_t k = 0; k < bridged.size(); ++k) {
    const int jl = bridged[k];
    const MixerSpec& spec = c.mixer(jl);
    const LayerWeights& w = m.layers[size_t(jl)];
    const float* x = b.bridge_x.data() + int64_t(k) * d;
    if (spec.kind == MixerKind::mla) {
      mla_batch_inputs({w.mla, spec, c, x, ldx, n, true, nullptr, 0}, b.mla, s0.pool_);
      for (int64_t a = 0; a < n; ++a) {
        Session& s = enter_row(rows, b, b.active[size_t(a)]);
        mla_append_projected(w.mla, spec, c, b.mla.kv_row(a), s.r_->pos, s.mla_[size_t(jl)]);
      }
      continue;
    }
    const int64_t kw = w.attn.wk.rows, vw = w.attn.wv.rows;
    grow(b.bridge_k, n * kw), grow(b.bridge_v, n * vw);
    const BatchProduct kv[] = {{w.attn.wk, x, ldx, b.bridge_k.data(), kw, n}, {w.attn.wv, x, ldx, b.bridge_v.data(), vw, n}};
    run_batch_products(kv, s0.pool_);
    for (int64_t a = 0; a < n; ++a) {
      const Projected p{nullptr, b.bridge_k.data() + a * kw, b.bridge_v.data() + a * vw};
      enter_row(rows, b, b.active[size_t(a)]).fill_cache(jl, x + a * ldx, &p);
    }
  }
}

void Session::engram_batch(int i, std::span<const BatchRow> rows, BatchScratch& b) {
  const LayerWeights& w = rows[0].session->model().layers[size_t(i)];
  const EngramHasher& hasher = *w.engram_hasher;
  const int64_t n = int64_t(b.active.size());
  engram_gate_batch_reserve(w.engram, hasher, n, b.engram);
  for (int64_t a = 0; a < n; ++a) {
    const int32_t j = b.active[size_t(a)];
    Session& s = enter_row(rows, b, j);
    engram_lookup(hasher, w.engram.tables, s.ngram_context(hasher.max_order()), b.engram.e_row(a), b.engram.rows);
  }
  engram_gate_batch_project(w.engram, n, b.engram, rows[0].session->pool_);
}

int64_t Session::batch_inputs(int i, std::span<const BatchRow> rows, BatchScratch& b) {
  const int64_t d = rows[0].session->model().config.d_model, n = int64_t(b.active.size());
  if (b.xn.size() < size_t(n * d)) b.xn.resize(size_t(n * d)), b.xq.resize(size_t(n * d));
  b.attends.assign(size_t(n), 0);
  int64_t nq = 0;
  for (int64_t a = 0; a < n; ++a) {
    const int32_t j = b.active[size_t(a)];
    Session& s = enter_row(rows, b, j);
    float* xn = b.xn.data() + a * d;
    if (!s.mixer_input(i, rows[size_t(j)].all_layers, xn, false, batched_row(i, rows, b, a))) continue;
    b.attends[size_t(a)] = 1;
    std::copy_n(xn, d, b.xq.data() + nq++ * d);
  }
  if (!rows[0].session->model().bridges_at[size_t(i)].empty()) fill_bridges(i, rows, b);
  return nq;
}

void Session::batch_outputs(int i, std::span<const BatchRow> rows, BatchScratch& b) {
  const int64_t d = rows[0].session->model().config.d_model, n = int64_t(b.active.size());
  float *x = b.x.data(), *y = b.y.data();
  int64_t live = 0;
  for (int64_t a = 0; a < n; ++a) {
    if (!b.attends[size_t(a)]) continue;
    const int32_t j = b.active[size_t(a)];
    Session& s = enter_row(rows, b, j);
    s.mixer_output(i, y + live * d, x + live * d);
    b.active[size_t(live++)] = j;
  }
  b.active.resize(size_t(live));
}

void Session::attention_batch(int i, std::span<const BatchRow> rows, BatchScratch& b) {
  Session& s0 = *rows[0].session;
  const Model& m = s0.model();
  const ModelConfig& c = m.config;
  const MixerSpec& spec = c.mixer(i);
  const AttentionWeights& w = m.layers[size_t(i)].attn;
  const bool own_kv = c.fills_own_cache(i);
  const int64_t d = c.d_model, n = int64_t(b.active.size());
  // 1. Every row's normed input; the rows that go on attend, the others (early exit) only
  // add their cache entry.
  const int64_t nq = batch_inputs(i, rows, b);
  if (nq == 0 && !own_kv) {
    b.active.clear();
    return;
  }
  // 2. The projections, one GEMM per matrix.
  attention_batch_inputs({w, spec, b.xn.data(), d, n, own_kv, b.xq.data(), nq}, b.attention, s0.pool_);
  // 3. The cache entries and the attention: a prompt's rows as one block of queries, or row
  // by row in order (each row's entry, then its attention over the rows before it).
  if (nq > 0 && block_attends(i, rows, b)) {
    attention_block(i, rows, b, nq);
  } else {
    for (int64_t a = 0, q = 0; a < n; ++a) {
      Session& s = enter_row(rows, b, b.active[size_t(a)]);
      const bool attends = b.attends[size_t(a)];
      const Projected p = b.attention.row(attends ? q : -1, a);
      if (attends) s.run_mixer(i, b.xq.data() + q * d, b.attention.o_row(q), &p), ++q;
      else if (own_kv) s.fill_cache(i, b.xn.data() + a * d, &p);
    }
  }
  // 4. The output GEMM, then each row's residual write and FFN input.
  attention_batch_output(w, nq, b.attention, b.y.data(), d, s0.pool_);
  batch_outputs(i, rows, b);
}

bool Session::block_attends(int i, std::span<const BatchRow> rows, const BatchScratch& b) {
  Session& s0 = *rows[0].session;
  const ModelConfig& c = s0.model().config;
  const MixerKind kind = c.mixer(i).kind;
  if ((kind != MixerKind::attention && kind != MixerKind::relu2_attention) || s0.probe_ || !s0.block_attention_)
    return false;
  for (int32_t j : b.active)
    if (rows[size_t(j)].session != &s0) return false;  // rows of several sessions: decode_batch
  const KvCache& cache = s0.kv_[size_t(c.cache_owner(i))];
  const bool own_kv = c.fills_own_cache(i);
  // Appending the chunk must not overwrite a key a row still reads: a ring holds the chunk; a
  // cache another layer fills already holds every row's key, and must keep the oldest too.
  if (own_kv) return !cache.ring || int64_t(b.active.size()) <= cache.capacity;
  return !cache.ring;
}

void Session::attention_block(int i, std::span<const BatchRow> rows, BatchScratch& b, int64_t nq) {
  Session& s0 = *rows[0].session;
  const ModelConfig& c = s0.model().config;
  const MixerSpec& spec = c.mixer(i);
  const AttentionWeights& w = s0.model().layers[size_t(i)].attn;
  const bool own_kv = c.fills_own_cache(i);
  KvCache& cache = s0.kv_[size_t(c.cache_owner(i))];
  AttentionBatch& ab = b.attention;
  std::vector<float>& kept_scores = s0.scores_[size_t(i)];
  ab.positions.resize(size_t(nq));
  ab.kept.assign(size_t(nq), GroupScores{});
  for (int64_t a = 0, q = 0; a < int64_t(b.active.size()); ++a) {
    if (!b.attends[size_t(a)]) continue;
    const TokenState& r = s0.rows_[size_t(b.state_of[size_t(b.active[size_t(a)])])];
    ab.positions[size_t(q)] = r.pos;
    if (!kept_scores.empty()) ab.kept[size_t(q)] = {kept_scores.data() + int64_t(r.slot) * s0.scores_stride_, s0.context_};
    finish_query(w, spec, c, r.pos, ab.q.data() + q * ab.q_width);
    ++q;
  }
  const QueryBlock block{w, spec, cache, ab.q.data(), ab.q_width, ab.positions.data(), nq,
                         kept_scores.empty() ? nullptr : ab.kept.data(), ab.block, s0.pool_};
  if (!kept_scores.empty()) s0.attn_.forget_selection();  // sparse_attention's selection is stale
  start_block(block);
  const int64_t cached = cache.count;  // the keys before the chunk's own
  attend_block_keys(block, 0, cached);
  if (own_kv) {
    const int64_t d = c.d_model;
    for (int64_t a = 0; a < int64_t(b.active.size()); ++a) {
      const Projected p = ab.row(-1, a);
      enter_row(rows, b, b.active[size_t(a)]).fill_cache(i, b.xn.data() + a * d, &p);
    }
    attend_block_keys(block, cached, cache.count);
  }
  finish_block(block, ab.o.data(), ab.o_width);
}

void Session::mla_batch(int i, std::span<const BatchRow> rows, BatchScratch& b) {
  Session& s0 = *rows[0].session;
  const Model& m = s0.model();
  const ModelConfig& c = m.config;
  const MixerSpec& spec = c.mixer(i);
  const MlaWeights& w = m.layers[size_t(i)].mla;
  const bool own_kv = c.fills_own_cache(i);
  const int64_t d = c.d_model, n = int64_t(b.active.size());
  const int64_t nq = batch_inputs(i, rows, b);
  if (nq == 0 && !own_kv) {
    b.active.clear();
    return;
  }
  mla_batch_inputs({w, spec, c, b.xn.data(), d, n, own_kv, b.xq.data(), nq}, b.mla, s0.pool_);
  // Row by row in order: the cache entry, then the absorbed attention over positions 0..pos.
  for (int64_t a = 0, q = 0; a < n; ++a) {
    const int32_t j = b.active[size_t(a)];
    Session& s = enter_row(rows, b, j);
    MlaCache& cache = s.mla_[size_t(i)];
    if (own_kv) mla_append_projected(w, spec, c, b.mla.kv_row(a), s.r_->pos, cache);
    if (b.attends[size_t(a)])
      mla_attend_projected(w, spec, b.mla.q_row(q), s.r_->pos, cache, s.mla_scratch_, b.mla.o_row(q), s.pool_), ++q;
  }
  mla_batch_output(w, nq, b.mla, b.y.data(), d, s0.pool_);
  batch_outputs(i, rows, b);
}

}  // namespace wren
