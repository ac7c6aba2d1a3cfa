// The work items of an attention step (model/attention.h): each KV head's keys split into
// chunks of kChunkKeys, run across the pool and combined in chunk order. The split softmax
// (each chunk against its own maximum, combined by e^(m_c - M)) against a plain softmax over
// all keys in double; and each entry point (full softmax, ReLU^2, sparse reuse) on a pool of
// two threads against the same steps on the caller alone: the same bits, at lengths past
// several chunks.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "config/parse.h"
#include "kernels/threads.h"
#include "model/attention.h"
#include "model/model.h"
#include "test_util.h"

namespace wren {
namespace {

using testing_util::normal;

// o_h = sum_j softmax_j(s_hj) v_j with s_hj = scale q_h . k_j and one sink logit per head,
// over the whole cache in double.
std::vector<double> plain_softmax(const KvCache& cache, int g, const float* q, int heads, int64_t n, double scale,
                                  const float* sinks) {
  const int dh = cache.head_dim;
  std::vector<float> buf(static_cast<size_t>(dh));
  std::vector<double> o(static_cast<size_t>(heads * dh), 0.0);
  for (int h = 0; h < heads; ++h) {
    std::vector<double> s(static_cast<size_t>(n));
    double top = sinks ? sinks[h] : -INFINITY;
    for (int64_t j = 0; j < n; ++j) {
      const float* k = cache.key(j, g, buf.data());
      double d = 0;
      for (int i = 0; i < dh; ++i) d += double(q[h * dh + i]) * k[i];
      s[size_t(j)] = d * scale;
      top = std::max(top, s[size_t(j)]);
    }
    double sum = sinks ? std::exp(sinks[h] - top) : 0.0;
    for (double& x : s) sum += x = std::exp(x - top);
    for (int64_t j = 0; j < n; ++j) {
      const float* v = cache.value(j, g, buf.data());
      for (int i = 0; i < dh; ++i) o[size_t(h * dh + i)] += s[size_t(j)] / sum * v[i];
    }
  }
  return o;
}

TEST(AttentionItems, SplitSoftmaxEqualsOneSoftmaxOverAllKeys) {
  const int dh = 16, heads = 3, kv_heads = 2;
  for (int64_t n : {int64_t(5), kChunkKeys, 2 * kChunkKeys + 9})
    for (bool with_sinks : {false, true}) {
      SCOPED_TRACE("n=" + std::to_string(n) + (with_sinks ? " sinks" : ""));
      KvCache cache;
      cache.init(kv_heads, dh, n, false, KvType::f32);
      const std::vector<float> k = normal(size_t(n * kv_heads * dh), 1.5f, 3), v = normal(size_t(n * kv_heads * dh), 1.0f, 4);
      for (int64_t j = 0; j < n; ++j) cache.append(k.data() + j * kv_heads * dh, v.data() + j * kv_heads * dh);
      const std::vector<float> q = normal(size_t(kv_heads * heads * dh), 1.5f, 5), sinks = normal(size_t(heads), 1.0f, 6);
      AttentionScratch s;
      s.scores.resize(size_t(heads * n));
      s.reserve_chunks(kv_heads, heads, dh, n);
      const float scale = 0.25f;
      const int64_t chunks = key_chunks(n);
      for (int g = 0; g < kv_heads; ++g) {
        const GroupKeys keys{.cache = cache, .g = g, .q = q.data() + g * heads * dh, .heads = heads, .n = n,
                             .p = s.scores.data(), .scale = scale};
        for (int64_t c = 0; c < chunks; ++c)
          softmax_chunk(keys, c * kChunkKeys, std::min(n, (c + 1) * kChunkKeys), s.chunk(g * chunks + c));
        std::vector<float> o(static_cast<size_t>(heads * dh));
        combine_softmax(s, g * chunks, chunks, heads, dh, with_sinks ? sinks.data() : nullptr, o.data());
        const std::vector<double> ref =
            plain_softmax(cache, g, keys.q, heads, n, scale, with_sinks ? sinks.data() : nullptr);
        for (size_t i = 0; i < o.size(); ++i) ASSERT_NEAR(o[i], ref[i], 2e-6) << "g=" << g << " i=" << i;
      }
    }
}

// One layer of each kind of embla-mini, its full softmax made full-context and its sparse
// selection longer than a chunk, stepped over T tokens twice: on a pool of two threads and on
// the caller alone. Every output is the same to the bit (item bounds depend on the work only).
TEST(AttentionItems, TwoThreadsGiveTheBitsOfOne) {
  ModelConfig c = load_preset("embla-mini");
  auto model = testing_util::random_model(c, 7);
  const int64_t T = 2 * kChunkKeys + 21;
  const int d = c.d_model, window = 0, full = 1, sparse = 5;
  ASSERT_EQ(c.mixer(window).kind, MixerKind::attention);
  ASSERT_EQ(c.mixer(full).kind, MixerKind::relu2_attention);
  ASSERT_EQ(c.mixer(sparse).kind, MixerKind::sparse_reuse);
  MixerSpec softmax = c.mixer(window), reuse = c.mixer(sparse);
  softmax.window = 0;
  reuse.top_k = int(kChunkKeys + 40), reuse.recent = 16;
  const MixerSpec& relu2 = c.mixer(full);
  kernels::ThreadPool pool(2);
  struct Run {
    KvCache softmax_kv, relu2_kv;
    AttentionScratch s;
    std::vector<float> kept;
  } runs[2];
  for (Run& r : runs) {
    r.softmax_kv.init(softmax.n_kv_heads, softmax.head_dim, T, false);
    r.relu2_kv.init(relu2.n_kv_heads, relu2.head_dim, T, false);
    r.s.reserve(c, T);
    r.kept.resize(size_t(relu2.n_kv_heads * T));
  }
  const std::vector<float> xs = normal(size_t(T * d), 1.0f, 8);
  std::vector<float> out[2][3];
  for (auto& o : out)
    for (auto& v : o) v.resize(size_t(d));
  for (int64_t t = 0; t < T; ++t) {
    const float* x = xs.data() + t * d;
    for (int i = 0; i < 2; ++i) {
      Run& r = runs[i];
      kernels::ThreadPool* p = i == 0 ? nullptr : &pool;
      const AttentionWeights& ws = model->layers[size_t(window)].attn;
      const AttentionWeights& wr = model->layers[size_t(full)].attn;
      append_kv({ws, softmax, c, x, t, r.s, p}, r.softmax_kv);
      window_attention({ws, softmax, c, x, t, r.s, p}, r.softmax_kv, {}, out[i][0].data());
      append_kv({wr, relu2, c, x, t, r.s, p}, r.relu2_kv);
      relu2_attention({wr, relu2, c, x, t, r.s, p}, r.relu2_kv, {r.kept.data(), T}, out[i][1].data());
      sparse_attention({model->layers[size_t(sparse)].attn, reuse, c, x, t, r.s, p}, relu2, r.relu2_kv,
                       {r.kept.data(), T}, out[i][2].data());
    }
    for (int k = 0; k < 3; ++k)
      for (int j = 0; j < d; ++j) ASSERT_EQ(out[0][k][size_t(j)], out[1][k][size_t(j)]) << "t=" << t << " kind " << k;
  }
  EXPECT_EQ(runs[0].s.v_reads.read, runs[1].s.v_reads.read);
  EXPECT_GT(runs[1].s.v_reads.skipped, 0);
}

// At depth an item takes every KV head's keys of its chunk (kWholeRowChunks): the step's
// output before the projection (s.o) and the kept scores against the ReLU^2 sums in double
// over the cache, from the step's own normalised query, at a length past that many chunks.
TEST(AttentionItems, Relu2AtDepthIsThePlainSum) {
  ModelConfig c = load_preset("embla-mini");
  auto model = testing_util::random_model(c, 9);
  const int full = 1;
  const MixerSpec& m = c.mixer(full);
  ASSERT_EQ(m.kind, MixerKind::relu2_attention);
  const int64_t T = kWholeRowChunks * kChunkKeys + 37;
  const int d = c.d_model, dh = m.head_dim, group = m.n_heads / m.n_kv_heads;
  const AttentionWeights& w = model->layers[size_t(full)].attn;
  kernels::ThreadPool pool(2);
  KvCache cache;
  cache.init(m.n_kv_heads, dh, T, false);
  AttentionScratch s;
  s.reserve(c, T);
  std::vector<float> kept(static_cast<size_t>(m.n_kv_heads * T)), out(static_cast<size_t>(d));
  const std::vector<float> xs = normal(size_t(T * d), 1.0f, 10);
  for (int64_t t = 0; t < T; ++t) append_kv({w, m, c, xs.data() + t * d, t, s, &pool}, cache);
  relu2_attention({w, m, c, xs.data() + (T - 1) * d, T - 1, s, &pool}, cache, {kept.data(), T}, out.data());
  const double scale = attention_scale(w, m);
  std::vector<float> buf(static_cast<size_t>(dh));
  for (int g = 0; g < m.n_kv_heads; ++g) {
    std::vector<double> top(static_cast<size_t>(T), -INFINITY);
    for (int h = g * group; h < (g + 1) * group; ++h) {
      std::vector<double> o(static_cast<size_t>(dh), 0.0);
      double sum = 0, size = 0;
      for (int64_t j = 0; j < T; ++j) {
        const float* k = cache.key(j, g, buf.data());
        double logit = 0;
        for (int i = 0; i < dh; ++i) logit += double(s.q[size_t(h * dh + i)]) * k[i];
        logit *= scale;
        top[size_t(j)] = std::max(top[size_t(j)], logit);
        const double weight = logit > 0 ? logit * logit : 0.0;
        const float* v = cache.value(j, g, buf.data());
        for (int i = 0; i < dh; ++i) o[size_t(i)] += weight * v[i], size += std::fabs(weight * v[i]);
        sum += weight;
      }
      for (int i = 0; i < dh; ++i)
        ASSERT_NEAR(s.o[size_t(h * dh + i)], o[size_t(i)] / (m.relu2_c + sum), 1e-5 * size / (m.relu2_c + sum))
            << "head " << h << " column " << i;
    }
    for (int64_t j = 0; j < T; ++j)
      ASSERT_NEAR(kept[size_t(g * T + j)], top[size_t(j)], 1e-4 * (1 + std::fabs(top[size_t(j)]))) << "group " << g << " key " << j;
  }
}

}  // namespace
}  // namespace wren
