// Softmax attention with GQA: the token at `pos` attends every position its cache holds (a
// ring of the last `window` tokens for a window layer, everything for a full layer).
//   p_hj = softmax_j(q_h . k_j / sqrt(d_h)),  o_h = sum_j p_hj v_j
// (the scale and an optional tanh soft cap of the logits are the config's).
// With sinks (gpt-oss) each head has one more logit in the softmax's denominator that
// carries no value. The work is split into items of (KV head, chunk of kChunkKeys keys) run
// across the pool, each reading its K and V rows once for all query heads of its group and
// keeping a partial softmax (its own maximum, sum and output), combined per head in chunk
// order (split-K decoding: the result is the one softmax over all keys).
#include <algorithm>
#include <cmath>

#include "kernels/ops.h"
#include "model/attention.h"

namespace wren {

void window_attention(const AttentionStep& a, const KvCache& cache, GroupScores scores, float* out) {
  const AttentionWeights& w = a.w;
  const MixerSpec& m = a.m;
  AttentionScratch& s = a.s;
  step_query(a);
  const int dh = m.head_dim, group = m.n_heads / m.n_kv_heads;
  const float scale = attention_scale(w, m);
  const float cap = float(m.softcap);  // Gemma 2: logit = cap tanh(logit / cap)
  const int64_t first = cache.first(), n = a.pos + 1 - first, chunks = key_chunks(n);
  if (scores.data) s.forget_selection();
  clear_group_scores(scores, m.n_kv_heads, a.pos + 1);
  const kernels::Int8Heads q8 = int8_query(s, cache, m.n_heads, dh);
  kernels::run_items(a.pool, m.n_kv_heads * chunks, [&](int64_t i) {
    const int g = int(i / chunks);
    const GroupKeys k{.cache = cache, .g = g, .q = s.q.data() + int64_t(g) * group * dh, .heads = group, .n = n,
                      .p = s.scores.data() + int64_t(g) * group * n, .scale = scale, .cap = cap, .kept = scores,
                      .first = first, .q8 = q8.at(g * group)};
    const int64_t j0 = i % chunks * kChunkKeys;
    softmax_chunk(k, j0, std::min(n, j0 + kChunkKeys), s.chunk(i));
  });
  for (int g = 0; g < m.n_kv_heads; ++g)
    combine_softmax(s, g * chunks, chunks, group, dh, w.sinks.empty() ? nullptr : w.sinks.data() + g * group,
                    s.o.data() + int64_t(g) * group * dh);
  step_output(a, out);
}

}  // namespace wren
