// bench/: one decode step of embla-1's full (ReLU^2) attention over a deep cache, alone:
// relu2_attention with its projections given (AttentionStep::projected), so what is timed is
// the work over the cache (scores, weights, V-skip, value sums, combine). Keys and values are
// random unit rows, as the layer's normalised keys are; the query is a key plus noise, so
// some weights are positive. Args: keys in the cache, KV type (0 f32, 2 q8), threads.
#include <benchmark/benchmark.h>

#include <cmath>
#include <random>
#include <vector>

#include "config/parse.h"
#include "kernels/ops.h"
#include "model/attention.h"

namespace {

using namespace wren;

void BM_Relu2AttentionAtDepth(benchmark::State& state) {
  const int64_t keys = state.range(0);
  const KvType type = KvType(state.range(1));
  kernels::ThreadPool pool(int(state.range(2)));
  ModelConfig c = load_preset("embla-1");
  MixerSpec m;
  for (auto& [name, spec] : c.mixers)
    if (spec.kind == MixerKind::relu2_attention) m = spec;
  const int dh = m.head_dim, kv_dim = m.n_kv_heads * dh;
  AttentionWeights w;
  w.wq.rows = int64_t(m.n_heads) * dh;
  w.q_norm.assign(size_t(dh), 1.0f);

  KvCache cache;
  cache.init(m.n_kv_heads, dh, keys + 1, false, type);
  std::mt19937 rng(1);
  std::normal_distribution<float> nd(0, 1);
  std::vector<float> k(static_cast<size_t>(kv_dim)), v(static_cast<size_t>(kv_dim));
  for (int64_t t = 0; t < keys + 1; ++t) {
    for (int i = 0; i < kv_dim; ++i) k[size_t(i)] = nd(rng), v[size_t(i)] = nd(rng);
    for (int g = 0; g < m.n_kv_heads; ++g) kernels::l2_normalize(k.data() + g * dh, dh, 1e-6f, k.data() + g * dh);
    cache.append(k.data(), v.data());
  }
  std::vector<float> q(size_t(w.wq.rows));
  for (int h = 0; h < m.n_heads; ++h)
    for (int i = 0; i < dh; ++i) q[size_t(h * dh + i)] = k[size_t(h / (m.n_heads / m.n_kv_heads) * dh + i)] + nd(rng);
  AttentionScratch s;
  s.reserve(c, keys + 1);
  std::vector<float> kept(size_t(m.n_kv_heads) * size_t(keys + 1)), out(size_t(w.wq.rows));
  const Projected projected{.q = q.data()};
  for (auto _ : state) {
    relu2_attention({w, m, c, nullptr, keys, s, &pool, &projected}, cache, {kept.data(), keys + 1}, out.data());
    benchmark::DoNotOptimize(out.data());
  }
  state.SetBytesProcessed(int64_t(state.iterations()) * int64_t(double(keys + 1) * cache.bytes_per_token()));
  state.SetLabel(std::string(to_string(type)) + " " + kernels::active_int8_path());
}
BENCHMARK(BM_Relu2AttentionAtDepth)
    ->Args({16384, 2, 1})->Args({16384, 2, 2})->Args({16384, 0, 2})
    ->ArgNames({"keys", "kv", "threads"})->UseRealTime()->Unit(benchmark::kMillisecond);

}  // namespace
