// A block of query rows over the cache (model/attention.h): prefill's chunk through softmax
// and ReLU^2 attention as tiles of small matrix products. Per work item (KV head g, rows
// [t0, t1)) and tile of keys [j0, j0 + kTileKeys):
//   S = scale Q K^T               (kernels::scores_tile; Q: the rows' query heads of g)
//   S_vj = -inf / 0 outside row t's keys [lo_t, pos_t]
//   softmax:  m' = max(m, max_j S_vj),  P = e^(S - m'),  l = l e^(m - m') + sum_j P,
//             o = o e^(m - m') + P V
//   ReLU^2:   P = max(S, 0)^2,  l += sum_j P,  o += P V
// A V row that no vector of the item weights is not read (the whole block's V-skip).
#include <algorithm>
#include <cmath>

#include "kernels/ops.h"
#include "model/attention.h"

namespace wren {

namespace {

bool is_softmax(const MixerSpec& m) { return m.kind == MixerKind::attention; }

struct BlockShape {
  int group, dh, kv_heads;
  int64_t rows_per_item, blocks;
};

BlockShape block_shape(const QueryBlock& b) {
  const MixerSpec& m = b.m;
  BlockShape s{m.n_heads / m.n_kv_heads, m.head_dim, m.n_kv_heads, 1, 0};
  s.rows_per_item = std::max<int64_t>(1, kBlockVectors / s.group);
  s.blocks = (b.n + s.rows_per_item - 1) / s.rows_per_item;
  return s;
}

// One thread's tiles, grown once.
struct TileScratch {
  std::vector<float> q, kt, s, k_row;
  std::vector<int8_t> q8;  // the query vectors rounded as decode's int8 scores round them
  std::vector<float> q8_scale;
  std::vector<int32_t> q8_sum;
  void reserve(int64_t vectors, int dh) {
    const auto grow = []<class T>(std::vector<T>& v, int64_t n) {
      if (v.size() < size_t(n)) v.resize(size_t(n));
    };
    grow(q, vectors * dh), grow(kt, int64_t(dh) * kTileKeys), grow(k_row, dh);
    grow(s, vectors * kTileKeys);
    grow(q8, vectors * dh), grow(q8_scale, vectors), grow(q8_sum, vectors);
  }
  // q_v = s_v q8_v for the `vectors` query vectors: what decode multiplies a q8 cache's keys
  // by (int8_scores), so that a block's logits are decode's up to f32 rounding.
  void round_queries_to_int8(int64_t vectors, int dh) {
    kernels::quantize_heads(q.data(), vectors, dh, q8.data(), q8_scale.data(), q8_sum.data());
    for (int64_t v = 0; v < vectors; ++v)
      for (int i = 0; i < dh; ++i) q[size_t(v * dh + i)] = q8_scale[size_t(v)] * float(q8[size_t(v * dh + i)]);
  }
};

// One item: KV head g's query heads of rows [t0, t1) against the keys [key0, key1).
struct ItemKeys {
  const QueryBlock& b;
  const BlockShape& shape;
  int g;
  int64_t t0, t1, key0, key1;
};

// The tile's logits S (scaled, capped, masked to -inf outside each row's keys), each row's
// kept maxima over its heads, and the weights P in place (a softmax row's through
// fold_into_softmax, model/attention.h).
void tile_weights(const ItemKeys& it, int64_t j0, int64_t nk, float* s, float* max, double* sum, float* o) {
  const QueryBlock& b = it.b;
  const int group = it.shape.group, dh = it.shape.dh;
  const float scale = attention_scale(b.w, b.m), cap = is_softmax(b.m) ? float(b.m.softcap) : 0.0f;
  for (int64_t t = it.t0; t < it.t1; ++t) {
    // Row t's keys in the tile: [lo, hi).
    const int64_t lo = std::clamp<int64_t>(b.cache.first_for(b.pos[t]) - j0, 0, nk);
    const int64_t hi = std::clamp<int64_t>(b.pos[t] + 1 - j0, lo, nk);
    float* kept = b.kept && b.kept[t].data ? b.kept[t].data + it.g * b.kept[t].stride + j0 : nullptr;
    for (int h = 0; h < group; ++h) {
      const int64_t v = (t - it.t0) * group + h;
      float* sv = s + v * kTileKeys;
      std::fill(sv, sv + lo, -INFINITY);
      std::fill(sv + hi, sv + nk, -INFINITY);
      for (int64_t j = lo; j < hi; ++j) sv[j] *= scale;
      if (cap > 0)
        for (int64_t j = lo; j < hi; ++j) sv[j] = cap * std::tanh(sv[j] / cap);
      if (kept)
        for (int64_t j = lo; j < hi; ++j) kept[j] = std::max(kept[j], sv[j]);
      if (!is_softmax(b.m)) {  // ReLU^2: w = max(s, 0)^2 (masked keys: 0)
        float tile_sum = 0;
        for (int64_t j = 0; j < nk; ++j) tile_sum += sv[j] = sv[j] > 0.0f ? sv[j] * sv[j] : 0.0f;
        sum[v] += tile_sum;
        continue;
      }
      const float rescale = fold_into_softmax(sv, nk, max[v], sum[v]);
      if (rescale != 1.0f)
        for (int i = 0; i < dh; ++i) o[v * dh + i] *= rescale;
    }
  }
}

// K^T of a tile, kt[i kTileKeys + j] = k_j[i], each row as KvCache::key decodes it: bf16 and f16
// rows widened by the row codecs (SIMD) into `row` first, so the strided stores are all that is
// left per value.
void keys_transposed(const KvTile& keys, int64_t nk, int dh, float* row, float* kt) {
  for (int64_t j = 0; j < nk; ++j) {
    const float* k = row;
    switch (keys.type) {
      case KvType::f32: k = keys.f32[j]; break;
      case KvType::bf16: kernels::bf16_to_f32_row(keys.bf16[j], dh, row); break;
      case KvType::f16: kernels::f16_to_f32_row(keys.f16[j], dh, row); break;
      case KvType::q8:
        for (int i = 0; i < dh; ++i) row[i] = keys.scale[j] * float(keys.q8[j][i]);
        break;
    }
    for (int i = 0; i < dh; ++i) kt[i * kTileKeys + j] = k[i];
  }
}

void attend_item(const ItemKeys& it, TileScratch& ts) {
  const QueryBlock& b = it.b;
  const int group = it.shape.group, dh = it.shape.dh;
  const int64_t vectors = (it.t1 - it.t0) * group;
  ts.reserve(vectors, dh);
  // Q of the item: row t's heads g*group .. are consecutive in its query row.
  for (int64_t t = it.t0; t < it.t1; ++t)
    std::copy_n(b.q + t * b.ldq + int64_t(it.g) * group * dh, group * dh, ts.q.data() + (t - it.t0) * group * dh);
  if (int8_scores(b.cache)) ts.round_queries_to_int8(vectors, dh);
  const int64_t state0 = (int64_t(it.g) * b.n + it.t0) * group;  // the item's first vector in the state
  float* o = b.state.o.data() + state0 * dh;
  float* max = b.state.max.data() + state0;
  double* sum = b.state.sum.data() + state0;
  // The keys any row of the item may read.
  const int64_t k0 = std::max(it.key0, b.cache.first_for(b.pos[it.t0])), k1 = std::min(it.key1, b.pos[it.t1 - 1] + 1);
  for (int64_t j0 = k0; j0 < k1; j0 += kTileKeys) {
    const int64_t nk = std::min(kTileKeys, k1 - j0);
    KvTile& keys = thread_tile();
    b.cache.keys_to_tile(j0, int(nk), it.g, keys);
    keys_transposed(keys, nk, dh, ts.k_row.data(), ts.kt.data());
    kernels::scores_tile(ts.q.data(), dh, vectors, ts.kt.data(), kTileKeys, nk, dh, ts.s.data(), kTileKeys);
    tile_weights(it, j0, nk, ts.s.data(), max, sum, o);
    KvTile& values = thread_tile();
    for (int64_t j = 0; j < nk; ++j) {  // the V rows some vector weights
      bool needed = false;
      for (int64_t v = 0; v < vectors && !needed; ++v) needed = ts.s[size_t(v * kTileKeys + j)] != 0.0f;
      if (needed) b.cache.value_to_tile(j0 + j, it.g, values, int(j));
      else values.skip(int(j));
    }
    kernels::weighted_sum_tile(ts.s.data(), kTileKeys, vectors, values.rows(), nk, dh, o, dh);
  }
}

}  // namespace

float attention_scale(const AttentionWeights& w, const MixerSpec& m) {
  const float head = 1.0f / std::sqrt(float(m.head_dim));
  if (m.kind == MixerKind::relu2_attention) return head;
  return (m.scale > 0 ? float(m.scale) : head) * w.rope.score_scale;
}

void start_block(const QueryBlock& b) {
  const int64_t vectors = b.n * b.m.n_heads;
  b.state.o.assign(size_t(vectors * b.m.head_dim), 0.0f);
  b.state.max.assign(size_t(vectors), -INFINITY);
  b.state.sum.assign(size_t(vectors), 0.0);
  if (b.kept)
    for (int64_t t = 0; t < b.n; ++t) clear_group_scores(b.kept[t], b.m.n_kv_heads, b.pos[t] + 1);
}

void attend_block_keys(const QueryBlock& b, int64_t key0, int64_t key1) {
  const BlockShape shape = block_shape(b);
  kernels::run_items(b.pool, shape.kv_heads * shape.blocks, [&](int64_t i) {
    thread_local TileScratch scratch;
    const int64_t t0 = i % shape.blocks * shape.rows_per_item;
    attend_item({b, shape, int(i / shape.blocks), t0, std::min(b.n, t0 + shape.rows_per_item), key0, key1}, scratch);
  });
}

void finish_block(const QueryBlock& b, float* o, int64_t ldo) {
  const MixerSpec& m = b.m;
  const int group = m.n_heads / m.n_kv_heads, dh = m.head_dim;
  for (int g = 0; g < m.n_kv_heads; ++g)
    for (int64_t t = 0; t < b.n; ++t)
      for (int h = 0; h < group; ++h) {
        const int64_t v = (int64_t(g) * b.n + t) * group + h;
        double denom = float(m.relu2_c) + b.state.sum[size_t(v)];
        float factor = 1.0f;
        if (is_softmax(m)) {  // M = max(m, sink): o e^(m - M) / (l e^(m - M) + e^(sink - M))
          const float top = b.state.max[size_t(v)];
          const float sink = b.w.sinks.empty() ? -INFINITY : b.w.sinks[size_t(g * group + h)];
          const float both = std::max(top, sink);
          factor = std::exp(top - both);
          denom = b.state.sum[size_t(v)] * factor + std::exp(double(sink - both));
        }
        const float scale = float(factor / denom);
        const float* src = b.state.o.data() + v * dh;
        float* dst = o + t * ldo + int64_t(g * group + h) * dh;
        for (int i = 0; i < dh; ++i) dst[i] = src[i] * scale;
      }
}

}  // namespace wren
