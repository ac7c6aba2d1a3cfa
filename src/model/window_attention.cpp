// Softmax attention with GQA: the token at `pos` attends every position its cache holds (a
// ring of the last `window` tokens for a window layer, everything for a full layer).
//   p_j = softmax_j(q . k_j / sqrt(d_h)),  o = sum_j p_j v_j
// (the scale and an optional tanh soft cap of the logits are the config's).
// With sinks (gpt-oss) each head has one more logit in the softmax's denominator that
// carries no value.
#include <cmath>

#include "kernels/ops.h"
#include "model/attention.h"

namespace wren {

void window_attention(const AttentionStep& a, const KvCache& cache, GroupScores scores, float* out) {
  const AttentionWeights& w = a.w;
  const MixerSpec& m = a.m;
  AttentionScratch& s = a.s;
  const int64_t pos = a.pos;
  project_query(w, m, a.c, a.x, pos, s.q.data(), a.pool);
  const int dh = m.head_dim, group = m.n_heads / m.n_kv_heads;
  const float scale = (m.scale > 0 ? float(m.scale) : 1.0f / std::sqrt(float(dh))) * w.rope.score_scale;
  const float cap = float(m.softcap);  // Gemma 2: logit = cap tanh(logit / cap)
  const int64_t first = cache.first(), n = pos + 1 - first;
  float* p = s.scores.data();
  clear_group_scores(scores, m.n_kv_heads, pos + 1);
  for (int h = 0; h < m.n_heads; ++h) {
    const float* q = s.q.data() + h * dh;
    const int kv = (h / group) * dh;
    float top = -INFINITY;
    for (int64_t j = 0; j < n; ++j) {
      p[j] = kernels::dot(q, cache.key(first + j) + kv, dh) * scale;
      if (cap > 0) p[j] = cap * std::tanh(p[j] / cap);
      top = std::max(top, p[j]);
    }
    record_group_scores(scores, h / group, first, p, n);
    const float sink = w.sinks.empty() ? -INFINITY : w.sinks[size_t(h)];
    top = std::max(top, sink);
    double sum = std::exp(double(sink - top));
    for (int64_t j = 0; j < n; ++j) sum += p[j] = std::exp(p[j] - top);
    float* o = s.o.data() + h * dh;
    std::fill(o, o + dh, 0.0f);
    for (int64_t j = 0; j < n; ++j) kernels::axpy(float(p[j] / sum), cache.value(first + j) + kv, dh, o);
  }
  project_output(w, m, a.x, s, out, a.pool);
}

}  // namespace wren
