// bench/: the machine's read bandwidth, the roofline's denominator. BM_ReadBandwidth is the
// probe `wren bench` uses (kernels/bandwidth.h: Highway loads, one contiguous part per
// thread, touched first by its reader, best of 5 passes). BM_ReadBandwidthAvx2 is an
// independent check of it: a plain AVX2 load loop, its own threads and buffers, the same
// 1 GiB in total; the two should agree within a few percent at every thread count.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <barrier>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "kernels/bandwidth.h"

namespace {

constexpr size_t kBytes = size_t(1) << 30;
constexpr int kPasses = 5;

void BM_ReadBandwidth(benchmark::State& state) {
  const int threads = int(state.range(0));
  double best = 0;
  for (auto _ : state) {
    const wren::kernels::Bandwidth b = wren::kernels::measure_read_bandwidth({.bytes = kBytes, .threads = threads, .passes = kPasses});
    benchmark::DoNotOptimize(b.checksum);
    best = b.best;
  }
  state.counters["GB/s"] = best / 1e9;
}
BENCHMARK(BM_ReadBandwidth)->Arg(1)->Arg(2)->ArgName("threads")->Iterations(1)->Unit(benchmark::kMillisecond);

#if defined(__x86_64__)
__attribute__((target("avx2"))) uint64_t avx2_sum(const __m256i* p, size_t n) {
  __m256i s0 = _mm256_setzero_si256(), s1 = s0, s2 = s0, s3 = s0;
  for (size_t i = 0; i + 4 <= n; i += 4) {
    s0 = _mm256_add_epi64(s0, _mm256_load_si256(p + i));
    s1 = _mm256_add_epi64(s1, _mm256_load_si256(p + i + 1));
    s2 = _mm256_add_epi64(s2, _mm256_load_si256(p + i + 2));
    s3 = _mm256_add_epi64(s3, _mm256_load_si256(p + i + 3));
  }
  alignas(32) uint64_t lanes[4];
  _mm256_store_si256(reinterpret_cast<__m256i*>(lanes), _mm256_add_epi64(_mm256_add_epi64(s0, s1), _mm256_add_epi64(s2, s3)));
  return lanes[0] + lanes[1] + lanes[2] + lanes[3];
}

void BM_ReadBandwidthAvx2(benchmark::State& state) {
  if (!__builtin_cpu_supports("avx2")) {
    state.SkipWithError("no AVX2 on this CPU");
    return;
  }
  const int threads = int(state.range(0));
  const size_t part = kBytes / size_t(threads);
  double best = 0;
  for (auto _ : state) {
    std::barrier sync(threads);
    std::vector<double> seconds(kPasses);
    std::vector<uint64_t> sums(static_cast<size_t>(threads));
    std::chrono::steady_clock::time_point start;
    auto worker = [&](int t) {
      auto* buf = static_cast<__m256i*>(std::aligned_alloc(64, part));
      std::memset(buf, 1, part);
      for (int p = 0; p < kPasses; ++p) {
        sync.arrive_and_wait();
        if (t == 0) start = std::chrono::steady_clock::now();
        sync.arrive_and_wait();
        sums[size_t(t)] += avx2_sum(buf, part / sizeof(__m256i));
        sync.arrive_and_wait();
        if (t == 0) seconds[size_t(p)] = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      }
      std::free(buf);
    };
    std::vector<std::thread> others;
    for (int t = 1; t < threads; ++t) others.emplace_back(worker, t);
    worker(0);
    for (auto& th : others) th.join();
    benchmark::DoNotOptimize(sums.data());
    best = double(part) * threads / *std::min_element(seconds.begin(), seconds.end());
  }
  state.counters["GB/s"] = best / 1e9;
}
BENCHMARK(BM_ReadBandwidthAvx2)->Arg(1)->Arg(2)->ArgName("threads")->Iterations(1)->Unit(benchmark::kMillisecond);
#endif

}  // namespace
