// A block of query rows over the cache (model/attention.h QueryBlock), prefill's attention,
// against decode's own entry points run row by row: window_attention and relu2_attention
// with the rows' projections given (AttentionStep::projected), which write the heads'
// outputs before W_o, as finish_block does. Three layers: full softmax with sinks, a soft
// cap and GQA at head_dim 64; a sliding window whose ring is shorter than the sequence
// (the chunk's own entries overwrite its oldest keys); ReLU^2 with kept scores. Chunks of
// 24 rows cross the 64-key tiles; f32 and q8 caches. Then: two threads give one's bits, and
// the block's V-skip never reads a value row that no vector of the block weights.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "config/parse.h"
#include "kernels/threads.h"
#include "model/attention.h"
#include "model/model.h"
#include "test_util.h"

namespace wren {
namespace {

using testing_util::normal;

ModelConfig block_config() {
  return parse_model_config(Json::parse(R"({"name": "block", "d_model": 128, "vocab_size": 64, "context_length": 256,
      "mixers": {
        "full": {"kind": "attention", "n_heads": 8, "n_kv_heads": 2, "head_dim": 64, "sinks": true, "softcap": 20.0,
                 "rope": {"theta": 10000}},
        "window": {"kind": "attention", "n_heads": 4, "n_kv_heads": 2, "head_dim": 32, "window": 40,
                   "rope": {"theta": 10000}},
        "relu2": {"kind": "relu2_attention", "n_heads": 4, "n_kv_heads": 1, "head_dim": 32, "relu2_c": 1.0}},
      "ffns": {"f": {"kind": "dense", "activation": "swiglu", "hidden": 64}},
      "layers": [{"mixer": "full", "ffn": "f"}, {"mixer": "window", "ffn": "f"}, {"mixer": "relu2", "ffn": "f"}]})"),
                            "block");
}

// One layer's heads' outputs for T rows: decode's steps row by row (reference), or the block
// path in chunks of `chunk` rows. Also the kept scores, [row][kv_heads][T].
struct LayerRun {
  std::vector<float> o, kept;
};

struct LayerCase {
  const ModelConfig& c;
  const AttentionWeights& w;
  const MixerSpec& m;
  const AttentionBatch& projections;  // every row's raw q, k, v
  int64_t T;
  KvType kv;
};

KvCache make_cache(const LayerCase& l) {
  KvCache cache;
  const bool ring = l.m.window > 0;
  cache.init(l.m.n_kv_heads, l.m.head_dim, ring ? l.m.window : l.T, ring, l.kv);
  return cache;
}

LayerRun decode_rows(const LayerCase& l) {
  const int64_t width = int64_t(l.m.n_heads) * l.m.head_dim;
  LayerRun run{std::vector<float>(size_t(l.T * width)), std::vector<float>(size_t(l.T * l.m.n_kv_heads * l.T), -INFINITY)};
  KvCache cache = make_cache(l);
  AttentionScratch s;
  s.reserve(l.c, l.T);
  for (int64_t t = 0; t < l.T; ++t) {
    const Projected p = l.projections.row(t, t);
    const AttentionStep a{l.w, l.m, l.c, nullptr, t, s, nullptr, &p};
    append_kv(a, cache);
    const GroupScores kept{run.kept.data() + t * l.m.n_kv_heads * l.T, l.T};
    if (l.m.kind == MixerKind::attention) window_attention(a, cache, kept, run.o.data() + t * width);
    else relu2_attention(a, cache, kept, run.o.data() + t * width);
  }
  return run;
}

LayerRun block_rows(const LayerCase& l, int64_t chunk, kernels::ThreadPool* pool) {
  const int64_t width = int64_t(l.m.n_heads) * l.m.head_dim;
  LayerRun run{std::vector<float>(size_t(l.T * width)), std::vector<float>(size_t(l.T * l.m.n_kv_heads * l.T), -INFINITY)};
  KvCache cache = make_cache(l);
  AttentionScratch s;
  s.reserve(l.c, l.T);
  BlockState state;
  for (int64_t p0 = 0; p0 < l.T; p0 += chunk) {
    const int64_t n = std::min(chunk, l.T - p0);
    std::vector<float> q(size_t(n * l.projections.q_width));
    std::vector<int64_t> pos(static_cast<size_t>(n));
    std::vector<GroupScores> kept(static_cast<size_t>(n));
    for (int64_t t = 0; t < n; ++t) {
      pos[size_t(t)] = p0 + t;
      std::copy_n(l.projections.row(p0 + t, p0 + t).q, l.projections.q_width, q.data() + t * l.projections.q_width);
      finish_query(l.w, l.m, l.c, p0 + t, q.data() + t * l.projections.q_width);
      kept[size_t(t)] = {run.kept.data() + (p0 + t) * l.m.n_kv_heads * l.T, l.T};
    }
    const QueryBlock b{l.w, l.m, cache, q.data(), l.projections.q_width, pos.data(), n, kept.data(), state, pool};
    start_block(b);
    const int64_t cached = cache.count;
    attend_block_keys(b, 0, cached);
    for (int64_t t = p0; t < p0 + n; ++t) {
      const Projected p = l.projections.row(-1, t);
      append_kv({l.w, l.m, l.c, nullptr, t, s, nullptr, &p}, cache);
    }
    attend_block_keys(b, cached, cache.count);
    finish_block(b, run.o.data() + p0 * width, width);
  }
  return run;
}

// |a - b| <= tol (|b| + 1) for every element, finite where b is.
void expect_near(const std::vector<float>& a, const std::vector<float>& b, double tol, const std::string& what) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::isinf(b[i])) {
      ASSERT_EQ(a[i], b[i]) << what << " at " << i;
      continue;
    }
    ASSERT_NEAR(a[i], b[i], tol * (std::fabs(b[i]) + 1)) << what << " at " << i;
  }
}

TEST(AttentionBlock, EqualsDecodeRowByRow) {
  const ModelConfig c = block_config();
  auto model = testing_util::random_model(c, 11);
  const int64_t T = 150, chunk = 24;
  const std::vector<float> x = normal(size_t(T * c.d_model), 1.0f, 12);
  kernels::ThreadPool pool(2);
  for (int i = 0; i < c.n_layers(); ++i) {
    const AttentionWeights& w = model->layers[size_t(i)].attn;
    AttentionBatch projections;
    attention_batch_inputs({w, c.mixer(i), x.data(), c.d_model, T, true, x.data(), T}, projections, nullptr);
    for (KvType kv : {KvType::f32, KvType::bf16, KvType::f16, KvType::q8}) {
      SCOPED_TRACE("layer " + std::to_string(i) + " kv " + to_string(kv));
      const LayerCase l{c, w, c.mixer(i), projections, T, kv};
      const LayerRun ref = decode_rows(l), one = block_rows(l, chunk, nullptr), two = block_rows(l, chunk, &pool);
      expect_near(one.o, ref.o, 2e-5, "heads' outputs");
      expect_near(one.kept, ref.kept, 2e-5, "kept scores");
      ASSERT_EQ(one.o, two.o) << "two threads changed the bits";
      // A window's ring must have been overrun, or the test would not cover the phases.
      if (l.m.window > 0) {
        ASSERT_LT(l.m.window, T);
      }
    }
  }
}

// ReLU^2's block reads a V row only when some vector of the block weights its key: the rows
// no head of the block's rows weights (all logits <= 0, in double) become NaN, and the
// outputs stay the same. One row per block (its four heads), so that some keys are unweighted.
TEST(AttentionBlock, ReluBlockNeverReadsUnweightedValueRows) {
  const ModelConfig c = block_config();
  auto model = testing_util::random_model(c, 13);
  const int layer = 2;
  const MixerSpec& m = c.mixer(layer);
  ASSERT_EQ(m.kind, MixerKind::relu2_attention);
  const AttentionWeights& w = model->layers[size_t(layer)].attn;
  const int64_t T = 90, dh = m.head_dim;
  const std::vector<float> x = normal(size_t(T * c.d_model), 1.0f, 14);
  AttentionBatch projections;
  attention_batch_inputs({w, m, x.data(), c.d_model, T, true, x.data(), T}, projections, nullptr);
  KvCache cache;
  cache.init(m.n_kv_heads, int(dh), T, false, KvType::f32);
  AttentionScratch s;
  s.reserve(c, T);
  for (int64_t t = 0; t < T; ++t) {
    const Projected p = projections.row(-1, t);
    append_kv({w, m, c, nullptr, t, s, nullptr, &p}, cache);
  }
  for (int64_t n : {1}) {
    SCOPED_TRACE("rows " + std::to_string(n));
    const int64_t p0 = T - n;
    std::vector<float> q(size_t(n * projections.q_width));
    std::vector<int64_t> pos(static_cast<size_t>(n));
    for (int64_t t = 0; t < n; ++t) {
      pos[size_t(t)] = p0 + t;
      std::copy_n(projections.row(p0 + t, p0 + t).q, projections.q_width, q.data() + t * projections.q_width);
      finish_query(w, m, c, p0 + t, q.data() + t * projections.q_width);
    }
    const auto run = [&](const KvCache& kv) {
      BlockState state;
      const QueryBlock b{w, m, kv, q.data(), projections.q_width, pos.data(), n, nullptr, state, nullptr};
      start_block(b);
      attend_block_keys(b, 0, kv.count);
      std::vector<float> o(size_t(n * m.n_heads * dh));
      finish_block(b, o.data(), m.n_heads * dh);
      return o;
    };
    const std::vector<float> clean = run(cache);
    KvCache poisoned = cache;
    int64_t nan_rows = 0;
    std::vector<float> buf(static_cast<size_t>(dh)), v(size_t(m.n_kv_heads * dh));
    for (int64_t j = 0; j < T; ++j) {
      bool weighted = false;
      for (int64_t t = 0; t < n; ++t)
        for (int h = 0; h < m.n_heads && j <= pos[size_t(t)]; ++h) {
          const float* k = cache.key(j, h / (m.n_heads / m.n_kv_heads), buf.data());
          double dot = 0;
          for (int i = 0; i < dh; ++i) dot += double(q[size_t(t * projections.q_width + h * dh + i)]) * k[i];
          weighted |= dot > 0;
        }
      if (weighted) continue;
      std::fill(v.begin(), v.end(), NAN);  // every KV head's value of key j (one KV head here)
      poisoned.values().write(j, v.data());
      ++nan_rows;
    }
    ASSERT_GT(nan_rows, 0) << "no key was unweighted: the test would prove nothing";
    const std::vector<float> after = run(poisoned);
    for (size_t i = 0; i < clean.size(); ++i) ASSERT_EQ(after[i], clean[i]) << i;
  }
}

}  // namespace
}  // namespace wren
