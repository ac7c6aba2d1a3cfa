// What every attention mechanism shares: queries, this token's keys and values, the output
// projection, and the work items a step's keys are split into (score, softmax and combine).
#include "model/attention.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>

#include "kernels/ops.h"
#include "model/output_gate.h"
#include "model/region.h"

namespace wren {

void AttentionScratch::reserve(const ModelConfig& c, int64_t context) {
  size_t width = 0, heads = 1, head = 0;
  int kv_heads = 1, group = 1;
  bool sparse = false;
  for (auto& [name, m] : c.mixers) {
    width = std::max(width, size_t(m.n_heads) * size_t(std::max(m.head_dim, m.value_dim())));
    // The scores and work items below serve the mechanisms of this file's entry points
    // (MLA and the recurrent mixers keep scratch of their own).
    const bool over_cache = m.kind == MixerKind::attention || m.kind == MixerKind::relu2_attention ||
                            m.kind == MixerKind::sparse_reuse;
    if (!over_cache) continue;
    head = std::max(head, size_t(m.head_dim));
    heads = std::max(heads, size_t(m.n_heads));
    kv_heads = std::max(kv_heads, m.n_kv_heads);
    if (m.n_kv_heads > 0) group = std::max(group, m.n_heads / m.n_kv_heads);
    sparse |= m.kind == MixerKind::sparse_reuse;
  }
  // A sparse layer's group is its owner's: n_heads / owner's n_kv_heads, at most n_heads.
  for (auto& [name, m] : c.mixers)
    if (m.kind == MixerKind::sparse_reuse) group = std::max(group, m.n_heads);
  q.resize(width), k.resize(width), v.resize(width), o.resize(width), gate.resize(width);
  scores.resize(heads * size_t(context));
  q8.resize(width), q8_scale.resize(heads), q8_sum.resize(heads);
  selected.resize(sparse ? size_t(kv_heads) * size_t(context) : 0);
  selected_count.resize(size_t(kv_heads));
  reserve_chunks(kv_heads, group, int(head), context);
}

void AttentionScratch::reserve_chunks(int kv_heads, int group, int head_dim, int64_t keys) {
  const size_t items = size_t(kv_heads) * size_t(key_chunks(keys));
  chunk_group_ = group, chunk_head_ = head_dim;
  chunk_o_.resize(items * size_t(group) * size_t(head_dim));
  chunk_sum_.resize(items * size_t(group));
  chunk_max_.resize(items * size_t(group));
  chunk_reads_.resize(items);
}

ChunkScratch AttentionScratch::chunk(int64_t item) {
  if (item < 0 || size_t(item) >= chunk_reads_.size())
    throw std::logic_error("attention: work item " + std::to_string(item) + " past the " +
                           std::to_string(chunk_reads_.size()) + " reserved");
  const size_t i = size_t(item), g = size_t(chunk_group_), dh = size_t(chunk_head_);
  return {chunk_o_.data() + i * g * dh, chunk_sum_.data() + i * g, chunk_max_.data() + i * g, chunk_reads_.data() + i};
}

KvTile& thread_tile() {
  thread_local KvTile tile;
  return tile;
}

void score_keys(const GroupKeys& k, int64_t j0, int64_t j1) {
  const int dh = k.cache.head_dim;
  KvTile& tile = thread_tile();
  for (int64_t b0 = j0; b0 < j1; b0 += KvTile::kRows) {
    const int b = int(std::min<int64_t>(KvTile::kRows, j1 - b0));
    if (k.positions)
      for (int r = 0; r < b; ++r) k.cache.key_to_tile(k.at(b0 + r), k.g, tile, r);
    else
      k.cache.keys_to_tile(k.first + b0, b, k.g, tile);
    if (k.q8.q && tile.in_q8()) kernels::scores_rows_int8(k.q8, k.heads, tile.q8, tile.scale, b, dh, k.scale, k.p + b0, k.n);
    else kernels::scores_rows(k.q, dh, k.heads, tile.rows(), b, dh, k.scale, k.p + b0, k.n);
    if (k.cap > 0)
      for (int h = 0; h < k.heads; ++h)
        for (int r = 0; r < b; ++r) {
          float& logit = k.p[h * k.n + b0 + r];
          logit = k.cap * std::tanh(logit / k.cap);
        }
  }
  record_group_scores(k.kept, k.g, k.at(j0), k.p + j0, k.n, k.heads, j1 - j0);
}

void softmax_chunk(const GroupKeys& k, int64_t j0, int64_t j1, ChunkScratch c) {
  const int dh = k.cache.head_dim;
  score_keys(k, j0, j1);
  for (int h = 0; h < k.heads; ++h) {
    const kernels::ExpSum e = kernels::exp_below_max(k.p + h * k.n + j0, j1 - j0);
    c.max[h] = e.max, c.sum[h] = e.sum;
  }
  std::fill(c.o, c.o + k.heads * dh, 0.0f);
  KvTile& tile = thread_tile();
  for (int64_t b0 = j0; b0 < j1; b0 += KvTile::kRows) {
    const int b = int(std::min<int64_t>(KvTile::kRows, j1 - b0));
    if (k.positions)
      for (int r = 0; r < b; ++r) k.cache.value_to_tile(k.at(b0 + r), k.g, tile, r);
    else
      k.cache.values_to_tile(k.first + b0, b, k.g, tile);
    kernels::weighted_sum_tile(k.p + b0, k.n, k.heads, tile.rows(), b, dh, c.o, dh);
  }
}

void combine_softmax(AttentionScratch& s, int64_t item0, int64_t chunks, int heads, int head_dim, const float* sinks,
                     float* o) {
  for (int h = 0; h < heads; ++h) {
    const float sink = sinks ? sinks[h] : -INFINITY;
    float top = sink;
    for (int64_t c = 0; c < chunks; ++c) top = std::max(top, s.chunk(item0 + c).max[h]);
    double sum = std::exp(double(sink - top));
    float* oh = o + h * head_dim;
    std::fill(oh, oh + head_dim, 0.0f);
    for (int64_t c = 0; c < chunks; ++c) {
      const ChunkScratch item = s.chunk(item0 + c);
      const float f = std::exp(item.max[h] - top);
      sum += double(f) * item.sum[h];
      kernels::axpy(f, item.o + h * head_dim, head_dim, oh);
    }
    const float inv = float(1.0 / sum);
    for (int i = 0; i < head_dim; ++i) oh[i] *= inv;
  }
}

namespace {

void add_bias(const Vec& b, float* y) {
  for (size_t i = 0; i < b.size(); ++i) y[i] += b[i];
}

// QK-norm: each head's vector (or the whole projection) RMS-normalised with its gain.
void qk_normalise(const Vec& gain, QkNorm mode, int heads, int head_dim, const ModelConfig& c, float* x) {
  if (mode == QkNorm::none) return;
  if (mode == QkNorm::full) {
    kernels::rmsnorm(x, gain.data(), int64_t(heads) * head_dim, float(c.norm.eps), c.norm.unit_offset, x);
    return;
  }
  for (int h = 0; h < heads; ++h)
    kernels::rmsnorm(x + h * head_dim, gain.data(), head_dim, float(c.norm.eps), c.norm.unit_offset, x + h * head_dim);
}

void rotate(const AttentionWeights& w, const MixerSpec& m, int heads, int64_t pos, float* x) {
  if (!m.rope) return;
  const int rotary = m.rope->rotary_dim ? m.rope->rotary_dim : m.head_dim;
  kernels::rope(x, heads, m.head_dim, rotary, w.rope.freq_at(pos), pos);
  if (w.rope.magnitude != 1.0f)
    for (int h = 0; h < heads; ++h)
      for (int i = 0; i < rotary; ++i) x[h * m.head_dim + i] *= w.rope.magnitude;
}

}  // namespace

void finish_query(const AttentionWeights& w, const MixerSpec& m, const ModelConfig& c, int64_t pos, float* q) {
  add_bias(w.bq, q);
  qk_normalise(w.q_norm, m.qk_norm, m.n_heads, m.head_dim, c, q);
  rotate(w, m, m.n_heads, pos, q);
}

void project_query(const AttentionWeights& w, const MixerSpec& m, const ModelConfig& c, const float* x, int64_t pos,
                   float* q, kernels::ThreadPool* pool) {
  const Product query{w.wq, x, q};
  run_products(std::span(&query, 1), pool);
  finish_query(w, m, c, pos, q);
}

void step_query(const AttentionStep& a) {
  if (!a.projected) return project_query(a.w, a.m, a.c, a.x, a.pos, a.s.q.data(), a.pool);
  std::copy_n(a.projected->q, a.w.wq.rows, a.s.q.data());
  finish_query(a.w, a.m, a.c, a.pos, a.s.q.data());
}

bool int8_scores(const KvCache& cache) { return cache.type() == KvType::q8 && !kernels::f32_activations(); }

kernels::Int8Heads int8_query(AttentionScratch& s, const KvCache& cache, int n_heads, int head_dim) {
  if (!int8_scores(cache)) return {};
  kernels::quantize_heads(s.q.data(), n_heads, head_dim, s.q8.data(), s.q8_scale.data(), s.q8_sum.data());
  return {s.q8.data(), head_dim, s.q8_scale.data(), s.q8_sum.data()};
}

void step_output(const AttentionStep& a, float* out) {
  if (!a.projected) return project_output(a.w, a.m, a.x, a.s, out, a.pool);
  std::copy_n(a.s.o.data(), int64_t(a.m.n_heads) * a.m.value_dim(), out);
}

void append_kv(const AttentionStep& a, KvCache& cache) {
  const AttentionWeights& w = a.w;
  const MixerSpec& m = a.m;
  float* k = a.s.k.data();
  float* v = a.s.v.data();
  if (a.projected && a.projected->k) {
    std::copy_n(a.projected->k, w.wk.rows, k);
    std::copy_n(a.projected->v, w.wv.rows, v);
  } else {
    const Product kv[] = {{w.wk, a.x, k}, {w.wv, a.x, v}};
    run_products(kv, a.pool);
  }
  add_bias(w.bk, k);
  add_bias(w.bv, v);
  qk_normalise(w.k_norm, m.qk_norm, m.n_kv_heads, m.head_dim, a.c, k);
  rotate(w, m, m.n_kv_heads, a.pos, k);
  cache.append(k, v);  // stored (and quantised) in the cache's type
}

void clear_group_scores(GroupScores g, int kv_heads, int64_t end) {
  if (!g.data) return;
  for (int h = 0; h < kv_heads; ++h) std::fill(g.data + h * g.stride, g.data + h * g.stride + end, -INFINITY);
}

void record_group_scores(GroupScores g, int kv_head, int64_t first, const float* scores, int64_t ld, int heads,
                         int64_t n) {
  if (g.data) kernels::max_rows(scores, ld, heads, n, g.data + kv_head * g.stride + first);
}

void gated_output(const MatrixView& wg, const MatrixView& wo, const Vec& bo, int64_t width, const float* x, float* o,
                  float* gate, float* out, kernels::ThreadPool* pool) {
  if (present(wg)) {  // output gate: o *= sigmoid(W_g x)
    const Product g{wg, x, gate};
    run_products(std::span(&g, 1), pool);
    kernels::sigmoid(gate, width, gate);
    for (int64_t i = 0; i < width; ++i) o[i] *= gate[i];
  }
  const Product output{wo, o, out};
  run_products(std::span(&output, 1), pool);
  add_bias(bo, out);
}

void project_output(const AttentionWeights& w, const MixerSpec& m, const float* x, AttentionScratch& s, float* out,
                    kernels::ThreadPool* pool) {
  gated_output(w.wg, w.wo, w.bo, int64_t(m.n_heads) * m.value_dim(), x, s.o.data(), s.gate.data(), out, pool);
}

Projected AttentionBatch::row(int64_t tq, int64_t t) const {
  Projected p{tq >= 0 ? q.data() + tq * q_width : nullptr};
  if (k_width) p.k = k.data() + t * k_width, p.v = v.data() + t * v_width;
  return p;
}

void attention_batch_inputs(const AttentionBatchInput& in, AttentionBatch& b, kernels::ThreadPool* pool) {
  const AttentionWeights& w = in.w;
  const auto grow = [](std::vector<float>& v, int64_t n) {
    if (v.size() < size_t(n)) v.resize(size_t(n));
  };
  b.q_width = w.wq.rows;
  b.o_width = int64_t(in.m.n_heads) * in.m.value_dim();
  b.k_width = in.own_kv ? w.wk.rows : 0, b.v_width = in.own_kv ? w.wv.rows : 0;
  grow(b.q, in.n_query * b.q_width), grow(b.o, in.n_query * b.o_width);
  BatchProduct products[4];
  int count = 0;
  products[count++] = {w.wq, in.query_x, in.ldx, b.q.data(), b.q_width, in.n_query};
  if (present(w.wg)) {
    grow(b.gate, in.n_query * b.o_width);
    products[count++] = {w.wg, in.query_x, in.ldx, b.gate.data(), b.o_width, in.n_query};
  }
  if (in.own_kv) {
    grow(b.k, in.n * b.k_width), grow(b.v, in.n * b.v_width);
    products[count++] = {w.wk, in.x, in.ldx, b.k.data(), b.k_width, in.n};
    products[count++] = {w.wv, in.x, in.ldx, b.v.data(), b.v_width, in.n};
  }
  run_batch_products(std::span(products, size_t(count)), pool);
}

void gate_rows(float* o, float* gate, int64_t width, int64_t n) {
  for (int64_t t = 0; t < n; ++t) {
    float* g = gate + t * width;
    kernels::sigmoid(g, width, g);
    for (int64_t i = 0; i < width; ++i) o[t * width + i] *= g[i];
  }
}

void attention_batch_output(const AttentionWeights& w, int64_t n_query, AttentionBatch& b, float* y, int64_t ldy,
                            kernels::ThreadPool* pool) {
  if (present(w.wg)) gate_rows(b.o.data(), b.gate.data(), b.o_width, n_query);  // as gated_output
  const BatchProduct output{w.wo, b.o.data(), b.o_width, y, ldy, n_query};
  run_batch_products(std::span(&output, 1), pool);
  for (int64_t t = 0; t < n_query; ++t) add_bias(w.bo, y + t * ldy);
}

}  // namespace wren
