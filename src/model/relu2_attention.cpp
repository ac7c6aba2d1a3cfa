// Sevren Sparse Attention (seed 000; NOTES.md 1). With q^ = RMSNorm(q), k^ = RMSNorm(k):
//   s_j = q^ . k^_j / sqrt(d_h),   w_j = max(s_j, 0)^2,   o = sum_j w_j v_j / (c + sum_j w_j)
// No position encoding. Per KV head, kKeyBlock keys at a time are scored for all query heads
// of the group, each K row decoded once; a V row is read only when some head of the group
// weights its key (V-skip per KV group): every head's weight of it is 0 otherwise, so the
// row cannot change any output. The pre-ReLU scores are also what the sparse layers that
// reuse this cache select by: per KV head, the maximum over its query heads.
#include <cmath>
#include <stdexcept>
#include <string>

#include "kernels/ops.h"
#include "model/attention.h"

namespace wren {

void relu2_weights(float* scores, int64_t n) {
  for (int64_t j = 0; j < n; ++j) scores[j] = scores[j] > 0.0f ? scores[j] * scores[j] : 0.0f;
}

void relu2_group_scores(const KvCache& cache, int g, const float* q, int heads, int64_t n, AttentionScratch& s) {
  const int dh = cache.head_dim;
  const float scale = 1.0f / std::sqrt(float(dh));
  float* score = s.scores.data();
  const float* k[kKeyBlock];
  for (int64_t j0 = 0; j0 < n; j0 += kKeyBlock) {
    const int b = int(std::min<int64_t>(kKeyBlock, n - j0));
    for (int r = 0; r < b; ++r) k[r] = cache.key(j0 + r, g, s.rows.data() + r * dh);
    for (int h = 0; h < heads; ++h)
      for (int r = 0; r < b; ++r) score[h * n + j0 + r] = kernels::dot(q + h * dh, k[r], dh) * scale;
  }
}

void relu2_group_values(const KvCache& cache, int g, int heads, int64_t n, float c, AttentionScratch& s, float* o) {
  const int dh = cache.head_dim;
  const float* w = s.scores.data();
  std::fill(o, o + heads * dh, 0.0f);
  double sum[kMaxGroup] = {};
  if (heads > kMaxGroup)
    throw std::invalid_argument("relu2 attention: " + std::to_string(heads) + " query heads per KV head, at most " +
                                std::to_string(kMaxGroup));
  int64_t read = 0;
  for (int64_t j = 0; j < n; ++j) {
    bool needed = false;
    for (int h = 0; h < heads; ++h) needed |= w[h * n + j] > 0.0f;
    if (!needed && s.v_skip) continue;  // --no-vskip reads the row anyway, to measure the saving
    ++read;
    const float* v = cache.value(j, g, s.rows.data());
    for (int h = 0; h < heads; ++h) {
      const float wj = w[h * n + j];
      if (wj > 0.0f || !s.v_skip) {
        sum[h] += wj;
        kernels::axpy(wj, v, dh, o + h * dh);
      }
    }
  }
  for (int h = 0; h < heads; ++h) {
    const float inv = float(1.0 / (c + sum[h]));
    for (int i = 0; i < dh; ++i) o[h * dh + i] *= inv;
  }
  s.v_reads.read += read;
  s.v_reads.skipped += n - read;
  s.v_reads.bytes_skipped += double(n - read) * cache.head_row_bytes();
}

void relu2_attention(const AttentionStep& a, const KvCache& cache, GroupScores scores, float* out, Relu2Probe* probe) {
  const MixerSpec& m = a.m;
  AttentionScratch& s = a.s;
  const int64_t pos = a.pos;
  step_query(a);
  const int dh = m.head_dim, group = m.n_heads / m.n_kv_heads;
  const int64_t n = pos + 1;
  clear_group_scores(scores, m.n_kv_heads, n);
  for (int g = 0; g < m.n_kv_heads; ++g) {
    relu2_group_scores(cache, g, s.q.data() + int64_t(g) * group * dh, group, n, s);
    for (int h = 0; h < group; ++h) {
      float* w = s.scores.data() + h * n;
      record_group_scores(scores, g, 0, w, n);
      relu2_weights(w, n);
      if (probe) probe->record_head(g * group + h, g, w, n, pos);
    }
    relu2_group_values(cache, g, group, n, float(m.relu2_c), s, s.o.data() + int64_t(g) * group * dh);
  }
  if (probe) probe->finish_query(pos, n);
  step_output(a, out);
}

}  // namespace wren
