// Sparse reuse layers (seed 000; NOTES.md 1). No keys or values of their own: per KV head of
// the full layer they lean on, take the top_k keys by that layer's pre-ReLU score for this
// token (max over the head's query group, so keys scored just below zero rank next), union
// the `recent` most recent positions, and run an ordinary softmax over that selection:
//   p_j = softmax_{j in sel}(q^ . k^_j / sqrt(d_h)),  o = sum_{j in sel} p_j v_j.
#include <algorithm>
#include <cmath>

#include "kernels/ops.h"
#include "model/attention.h"

namespace wren {

int64_t select_keys(const float* scores, int64_t n, int top_k, int recent, int32_t* out) {
  if (n <= int64_t(top_k) + recent) {
    for (int64_t j = 0; j < n; ++j) out[j] = int32_t(j);
    return n;
  }
  kernels::top_k(scores, n, top_k, out);
  // The union: the top keys older than the recent window, then the whole window.
  const int64_t first_recent = n - recent;
  int64_t count = 0;
  for (int i = 0; i < top_k; ++i)
    if (out[i] < first_recent) out[count++] = out[i];
  std::sort(out, out + count);
  for (int64_t j = first_recent; j < n; ++j) out[count++] = int32_t(j);
  return count;
}

void sparse_attention(const AttentionStep& a, const MixerSpec& owner, const KvCache& cache, GroupScores owner_scores,
                      float* out) {
  const MixerSpec& m = a.m;
  AttentionScratch& s = a.s;
  const int64_t pos = a.pos;
  step_query(a);
  const int dh = m.head_dim, group = m.n_heads / owner.n_kv_heads;
  const float scale = 1.0f / std::sqrt(float(dh));
  const int64_t n = pos + 1;
  int32_t* sel = s.selected.data();
  float* p = s.scores.data();  // [group][count]
  float* buf = s.rows.data();
  for (int g = 0; g < owner.n_kv_heads; ++g) {
    const int64_t count = select_keys(owner_scores.data + g * owner_scores.stride, n, m.top_k, m.recent, sel);
    const float* q = s.q.data() + int64_t(g) * group * dh;
    // The gather: each selected K row, then each V row, decoded once for the group's heads.
    for (int64_t i = 0; i < count; ++i) {
      const float* k = cache.key(sel[i], g, buf);
      for (int h = 0; h < group; ++h) p[h * count + i] = kernels::dot(q + h * dh, k, dh) * scale;
    }
    for (int h = 0; h < group; ++h) kernels::softmax(p + h * count, count);
    float* o = s.o.data() + int64_t(g) * group * dh;
    std::fill(o, o + group * dh, 0.0f);
    for (int64_t i = 0; i < count; ++i) {
      const float* v = cache.value(sel[i], g, buf);
      for (int h = 0; h < group; ++h) kernels::axpy(p[h * count + i], v, dh, o + h * dh);
    }
  }
  step_output(a, out);
}

}  // namespace wren
