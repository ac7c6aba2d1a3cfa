// Sevren Sparse Attention (seed 000; NOTES.md 1). With q^ = RMSNorm(q), k^ = RMSNorm(k):
//   s_j = q^ . k^_j / sqrt(d_h),   w_j = max(s_j, 0)^2,   o = sum_j w_j v_j / (c + sum_j w_j)
// No position encoding. A key with w_j = 0 contributes nothing, so its value row is never
// read (V-skip). The pre-ReLU scores are also what the sparse layers that reuse this cache
// select by: per KV head, the maximum over its query heads.
#include <cmath>

#include "kernels/ops.h"
#include "model/attention.h"

namespace wren {

void relu2_weights(float* scores, int64_t n) {
  for (int64_t j = 0; j < n; ++j) scores[j] = scores[j] > 0.0f ? scores[j] * scores[j] : 0.0f;
}

void relu2_attention(const AttentionStep& a, const KvCache& cache, GroupScores scores, float* out, Relu2Probe* probe) {
  const MixerSpec& m = a.m;
  AttentionScratch& s = a.s;
  const int64_t pos = a.pos;
  project_query(a.w, m, a.c, a.x, pos, s.q.data(), a.pool);
  const int dh = m.head_dim, group = m.n_heads / m.n_kv_heads;
  const float scale = 1.0f / std::sqrt(float(dh));
  const int64_t n = pos + 1;
  float* score = s.scores.data();
  clear_group_scores(scores, m.n_kv_heads, n);
  for (int h = 0; h < m.n_heads; ++h) {
    const float* q = s.q.data() + h * dh;
    const int kv = (h / group) * dh;
    for (int64_t j = 0; j < n; ++j) score[j] = kernels::dot(q, cache.key(j) + kv, dh) * scale;
    record_group_scores(scores, h / group, 0, score, n);
    relu2_weights(score, n);
    if (probe) probe->record_head(h, h / group, score, n, pos);
    float* o = s.o.data() + h * dh;
    std::fill(o, o + dh, 0.0f);
    double sum = 0;
    for (int64_t j = 0; j < n; ++j)
      if (score[j] > 0.0f || !s.v_skip) {
        sum += score[j];
        kernels::axpy(score[j], cache.value(j) + kv, dh, o);
      }
    const float inv = float(1.0 / (m.relu2_c + sum));
    for (int i = 0; i < dh; ++i) o[i] *= inv;
  }
  if (probe) probe->finish_query(pos, n);
  project_output(a.w, m, a.x, s, out, a.pool);
}

}  // namespace wren
