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
  kernels::top_k_in_order(scores, n, top_k, out);
  // The union, in position order: the top keys older than the recent window, then the whole
  // window.
  const int64_t first_recent = n - recent;
  int64_t count = 0;
  for (int i = 0; i < top_k && out[i] < first_recent; ++i) ++count;
  for (int64_t j = first_recent; j < n; ++j) out[count++] = int32_t(j);
  return count;
}

void sparse_attention(const AttentionStep& a, const MixerSpec& owner, const KvCache& cache, GroupScores owner_scores,
                      float* out) {
  const MixerSpec& m = a.m;
  AttentionScratch& s = a.s;
  step_query(a);
  const int dh = m.head_dim, kv_heads = owner.n_kv_heads, group = m.n_heads / kv_heads;
  const float scale = 1.0f / std::sqrt(float(dh));
  const int64_t n = a.pos + 1;
  // Per KV head its selection (at most n keys) in s.selected[g n ..], made once per owner's
  // scores (the last sparse layer's may be this one's), then items of (KV head, chunk of its
  // selection) as window_attention's, with one chunk count for all heads.
  int64_t* counts = s.selected_count.data();
  const AttentionScratch::Selection selection{owner_scores.data, a.pos, m.top_k, m.recent};
  if (s.selection != selection) {
    kernels::run_items(a.pool, kv_heads, [&](int64_t g) {
      counts[g] = select_keys(owner_scores.data + g * owner_scores.stride, n, m.top_k, m.recent, s.selected.data() + g * n);
    });
    s.selection = selection;
  }
  int64_t longest = 0;
  for (int g = 0; g < kv_heads; ++g) longest = std::max(longest, counts[g]);
  const int64_t chunks = key_chunks(longest);
  const kernels::Int8Heads q8 = int8_query(s, cache, m.n_heads, dh);
  kernels::run_items(a.pool, kv_heads * chunks, [&](int64_t i) {
    const int g = int(i / chunks);
    const GroupKeys k{.cache = cache, .g = g, .q = s.q.data() + int64_t(g) * group * dh, .heads = group, .n = counts[g],
                      .p = s.scores.data() + int64_t(g) * group * n, .scale = scale,
                      .positions = s.selected.data() + g * n, .q8 = q8.at(g * group)};
    const int64_t j0 = std::min(k.n, i % chunks * kChunkKeys);
    softmax_chunk(k, j0, std::min(k.n, j0 + kChunkKeys), s.chunk(i));
  });
  for (int g = 0; g < kv_heads; ++g)
    combine_softmax(s, g * chunks, chunks, group, dh, nullptr, s.o.data() + int64_t(g) * group * dh);
  step_output(a, out);
}

}  // namespace wren
