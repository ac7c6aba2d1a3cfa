// Softmax attention with GQA: the token at `pos` attends every position its cache holds (a
// ring of the last `window` tokens for a window layer, everything for a full layer).
//   p_hj = softmax_j(q_h . k_j / sqrt(d_h)),  o_h = sum_j p_hj v_j
// (the scale and an optional tanh soft cap of the logits are the config's).
// With sinks (gpt-oss) each head has one more logit in the softmax's denominator that
// carries no value. Per KV head, each cached K row and V row is read (decoded) once for all
// query heads of its group.
#include <cmath>

#include "kernels/ops.h"
#include "model/attention.h"

namespace wren {

void window_attention(const AttentionStep& a, const KvCache& cache, GroupScores scores, float* out) {
  const AttentionWeights& w = a.w;
  const MixerSpec& m = a.m;
  AttentionScratch& s = a.s;
  const int64_t pos = a.pos;
  step_query(a);
  const int dh = m.head_dim, group = m.n_heads / m.n_kv_heads;
  const float scale = (m.scale > 0 ? float(m.scale) : 1.0f / std::sqrt(float(dh))) * w.rope.score_scale;
  const float cap = float(m.softcap);  // Gemma 2: logit = cap tanh(logit / cap)
  const int64_t first = cache.first(), n = pos + 1 - first;
  float* p = s.scores.data();  // [group][n]
  float* buf = s.rows.data();
  clear_group_scores(scores, m.n_kv_heads, pos + 1);
  for (int g = 0; g < m.n_kv_heads; ++g) {
    const float* q = s.q.data() + int64_t(g) * group * dh;
    for (int64_t j = 0; j < n; ++j) {
      const float* k = cache.key(first + j, g, buf);
      for (int h = 0; h < group; ++h) {
        float logit = kernels::dot(q + h * dh, k, dh) * scale;
        if (cap > 0) logit = cap * std::tanh(logit / cap);
        p[h * n + j] = logit;
      }
    }
    for (int h = 0; h < group; ++h) {
      float* ph = p + h * n;
      record_group_scores(scores, g, first, ph, n);
      const float sink = w.sinks.empty() ? -INFINITY : w.sinks[size_t(g * group + h)];
      float top = sink;
      for (int64_t j = 0; j < n; ++j) top = std::max(top, ph[j]);
      double sum = std::exp(double(sink - top));
      for (int64_t j = 0; j < n; ++j) sum += ph[j] = std::exp(ph[j] - top);
      const float inv = float(1.0 / sum);
      for (int64_t j = 0; j < n; ++j) ph[j] *= inv;
    }
    float* o = s.o.data() + int64_t(g) * group * dh;
    std::fill(o, o + group * dh, 0.0f);
    for (int64_t j = 0; j < n; ++j) {
      const float* v = cache.value(first + j, g, buf);
      for (int h = 0; h < group; ++h) kernels::axpy(p[h * n + j], v, dh, o + h * dh);
    }
  }
  step_output(a, out);
}

}  // namespace wren
