// Sevren Sparse Attention (seed 000; NOTES.md 1). With q^ = RMSNorm(q), k^ = RMSNorm(k):
//   s_j = q^ . k^_j / sqrt(d_h),   w_j = max(s_j, 0)^2,   o = sum_j w_j v_j / (c + sum_j w_j)
// No position encoding. The work is split into items of (KV head, chunk of kChunkKeys keys)
// run across the pool; an item scores its keys for all query heads of the group, each K row
// decoded once, and reads a V row only when some head of the group weights its key (V-skip
// per KV group): every head's weight of it is 0 otherwise, so the row cannot change any
// output. Its partial sums are added per head in chunk order. The pre-ReLU scores are also
// what the sparse layers that reuse this cache select by: per KV head, the maximum over its
// query heads.
#include <algorithm>
#include <cmath>

#include "kernels/ops.h"
#include "model/attention.h"

namespace wren {

void relu2_weights(float* scores, int64_t n) {
  for (int64_t j = 0; j < n; ++j) scores[j] = scores[j] > 0.0f ? scores[j] * scores[j] : 0.0f;
}

void relu2_chunk(const GroupKeys& k, int64_t j0, int64_t j1, bool v_skip, ChunkScratch c) {
  const int dh = k.cache.head_dim;
  score_keys(k, j0, j1, c.rows);
  for (int h = 0; h < k.heads; ++h) {
    float* w = k.p + h * k.n;
    relu2_weights(w + j0, j1 - j0);
    double sum = 0;
    for (int64_t j = j0; j < j1; ++j) sum += w[j];
    c.sum[h] = sum;
  }
  std::fill(c.o, c.o + k.heads * dh, 0.0f);
  // Runs of consecutive rows to read, kKeyBlock at most, go to one call with their weights
  // where they lie in p (row `first + r` of the run is column first + r).
  const float* value[kKeyBlock];
  int64_t read = 0, first = j0;
  int b = 0;
  auto add_run = [&] {
    if (b) kernels::add_weighted_rows(k.p + first, k.n, k.heads, value, b, dh, v_skip, c.o, dh);
    b = 0;
  };
  for (int64_t j = j0; j < j1; ++j) {
    bool needed = false;
    for (int h = 0; h < k.heads; ++h) needed |= k.p[h * k.n + j] > 0.0f;
    if (!needed && v_skip) {  // --no-vskip reads the row anyway, to measure the saving
      add_run();
      continue;
    }
    ++read;
    if (b == 0) first = j;
    value[b] = k.cache.value(k.at(j), k.g, c.rows + b * dh);
    if (++b == kKeyBlock) add_run();
  }
  add_run();
  *c.reads = {read, (j1 - j0) - read, double((j1 - j0) - read) * k.cache.head_row_bytes()};
}

void combine_relu2(AttentionScratch& s, int64_t item0, int64_t chunks, int heads, int head_dim, float c, float* o) {
  for (int h = 0; h < heads; ++h) {
    float* oh = o + h * head_dim;
    std::fill(oh, oh + head_dim, 0.0f);
    double sum = 0;
    for (int64_t i = 0; i < chunks; ++i) {
      const ChunkScratch item = s.chunk(item0 + i);
      sum += item.sum[h];
      kernels::axpy(1.0f, item.o + h * head_dim, head_dim, oh);
    }
    const float inv = float(1.0 / (c + sum));
    for (int i = 0; i < head_dim; ++i) oh[i] *= inv;
  }
  for (int64_t i = 0; i < chunks; ++i) {
    const VReads& r = *s.chunk(item0 + i).reads;
    s.v_reads.read += r.read, s.v_reads.skipped += r.skipped, s.v_reads.bytes_skipped += r.bytes_skipped;
  }
}

void relu2_group(const KvCache& cache, int g, const float* q, int heads, int64_t n, float c, AttentionScratch& s,
                 float* o) {
  const GroupKeys k{.cache = cache, .g = g, .q = q, .heads = heads, .n = n, .p = s.scores.data(),
                    .scale = 1.0f / std::sqrt(float(cache.head_dim))};
  const int64_t chunks = key_chunks(n);
  for (int64_t i = 0; i < chunks; ++i) relu2_chunk(k, i * kChunkKeys, std::min(n, (i + 1) * kChunkKeys), s.v_skip, s.chunk(i));
  combine_relu2(s, 0, chunks, heads, cache.head_dim, c, o);
}

void relu2_attention(const AttentionStep& a, const KvCache& cache, GroupScores scores, float* out, Relu2Probe* probe) {
  const MixerSpec& m = a.m;
  AttentionScratch& s = a.s;
  step_query(a);
  const int dh = m.head_dim, group = m.n_heads / m.n_kv_heads;
  const int64_t n = a.pos + 1, chunks = key_chunks(n);
  clear_group_scores(scores, m.n_kv_heads, n);
  kernels::run_items(a.pool, m.n_kv_heads * chunks, [&](int64_t i) {
    const int g = int(i / chunks);
    const GroupKeys k{.cache = cache, .g = g, .q = s.q.data() + int64_t(g) * group * dh, .heads = group, .n = n,
                      .p = s.scores.data() + int64_t(g) * group * n, .scale = attention_scale(a.w, m), .kept = scores};
    const int64_t j0 = i % chunks * kChunkKeys;
    relu2_chunk(k, j0, std::min(n, j0 + kChunkKeys), s.v_skip, s.chunk(i));
  });
  for (int g = 0; g < m.n_kv_heads; ++g) {
    combine_relu2(s, g * chunks, chunks, group, dh, float(m.relu2_c), s.o.data() + int64_t(g) * group * dh);
    if (probe)
      for (int h = 0; h < group; ++h) probe->record_head(g * group + h, g, s.scores.data() + (g * group + h) * n, n, a.pos);
  }
  if (probe) probe->finish_query(a.pos, n);
  step_output(a, out);
}

}  // namespace wren
