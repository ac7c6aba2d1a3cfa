// Sevren Sparse Attention (seed 000; NOTES.md 1). With q^ = RMSNorm(q), k^ = RMSNorm(k):
//   s_j = q^ . k^_j / sqrt(d_h),   w_j = max(s_j, 0)^2,   o = sum_j w_j v_j / (c + sum_j w_j)
// No position encoding. The work is split into items of chunks of kChunkKeys keys (of one KV
// head, or of every KV head at depth) run across the pool; a (head, chunk) scores its keys for
// all query heads of the group, each K row read once as stored (int8 in a q8 cache), and
// reads a V row only when some head of the group weights its key (V-skip per KV group):
// every head's weight of it is 0 otherwise, so the row cannot change any output. Its partial sums are added per head in chunk order. The pre-ReLU scores are also
// what the sparse layers that reuse this cache select by: per KV head, the maximum over its
// query heads.
#include <algorithm>
#include <cmath>

#include "kernels/ops.h"
#include "model/attention.h"

namespace wren {

void relu2_weights(float* scores, int64_t n) { kernels::relu2(scores, n, scores); }

namespace {

// sum_j w_j in double, four running sums so that the adds do not wait on each other.
double sum_of(const float* w, int64_t n) {
  double s[4] = {};
  int64_t j = 0;
  for (; j + 4 <= n; j += 4)
    for (int u = 0; u < 4; ++u) s[u] += w[j + u];
  for (; j < n; ++j) s[0] += w[j];
  return (s[0] + s[1]) + (s[2] + s[3]);
}

}  // namespace

void relu2_chunk(const GroupKeys& k, int64_t j0, int64_t j1, bool v_skip, ChunkScratch c) {
  const int dh = k.cache.head_dim;
  score_keys(k, j0, j1);
  for (int h = 0; h < k.heads; ++h) {
    float* w = k.p + h * k.n;
    relu2_weights(w + j0, j1 - j0);
    c.sum[h] = sum_of(w + j0, j1 - j0);
  }
  std::fill(c.o, c.o + k.heads * dh, 0.0f);
  KvTile& tile = thread_tile();
  int64_t read = 0;
  for (int64_t b0 = j0; b0 < j1; b0 += KvTile::kRows) {
    const int b = int(std::min<int64_t>(KvTile::kRows, j1 - b0));
    float top[KvTile::kRows] = {};  // the key's largest weight over the heads: > 0 when some head weights it
    kernels::max_rows(k.p + b0, k.n, k.heads, b, top);
    for (int r = 0; r < b; ++r) {
      if (!(top[r] > 0.0f) && v_skip) {  // --no-vskip reads the row anyway, to measure the saving
        tile.skip(r);
        continue;
      }
      ++read;
      k.cache.value_to_tile(k.at(b0 + r), k.g, tile, r);
    }
    kernels::weighted_sum_tile(k.p + b0, k.n, k.heads, tile.rows(), b, dh, c.o, dh);
  }
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
  if (scores.data) s.forget_selection();
  clear_group_scores(scores, m.n_kv_heads, n);
  const kernels::Int8Heads q8 = int8_query(s, cache, m.n_heads, dh);
  // Items of a chunk of keys. Past kWholeRowChunks chunks an item takes every KV head's keys
  // of its chunk: the heads' rows lie side by side in the cache ([pos][kv head][head_dim]), so
  // a thread reads one sequential stream instead of every other part of one. Before that, one
  // head per item, so that short contexts still give every thread work.
  const int heads_per_item = chunks >= kWholeRowChunks ? m.n_kv_heads : 1;
  kernels::run_items(a.pool, m.n_kv_heads / heads_per_item * chunks, [&](int64_t i) {
    const int64_t j0 = i % chunks * kChunkKeys;
    for (int g = int(i / chunks) * heads_per_item, g1 = g + heads_per_item; g < g1; ++g) {
      const GroupKeys k{.cache = cache, .g = g, .q = s.q.data() + int64_t(g) * group * dh, .heads = group, .n = n,
                        .p = s.scores.data() + int64_t(g) * group * n, .scale = attention_scale(a.w, m), .kept = scores,
                        .q8 = q8.at(g * group)};
      relu2_chunk(k, j0, std::min(n, j0 + kChunkKeys), s.v_skip, s.chunk(g * chunks + i % chunks));
    }
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
