// bench/: the decode stream alone. A token reads every weight once; this reads ~1 GiB of
// packed q8 / q4 rows through model/region.h's run_products, as decode runs them, and reports
// GB/s next to the read-bandwidth probe's at the same thread count (`roofline_%`): what the
// kernels and the pool reach with nothing else in the way. Three shapes: Llama-3.2-1B's FFN
// (8192 x 2048 and 2048 x 8192, one region per matrix), nenya's latent experts (384 x 384,
// eight matrices to a region as a MoE layer's chosen experts), nenya's d = 960 (960 x 960,
// eight to a region) and OLMoE-1B-7B's experts (gate and up 1024 x 2048, down 2048 x 1024,
// eight to a region): short rows stream slower, most of all at 2 threads (docs/engine.md).
//
//   build/wren_bench --benchmark_filter=DecodeStream
#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <map>
#include <memory>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "kernels/bandwidth.h"
#include "kernels/huge_pages.h"
#include "kernels/ops.h"
#include "kernels/threads.h"
#include "model/region.h"

namespace {

using namespace wren;
using namespace wren::kernels;

constexpr double kTarget = double(size_t(1) << 30);

struct Shape {
  const char* name;
  std::vector<std::pair<int64_t, int64_t>> matrices;  // distinct random ones, then copies
  size_t per_region;
};
const Shape kShapes[] = {{"llama-ffn", {{8192, 2048}, {2048, 8192}}, 1},
                         {"nenya-experts", {{384, 384}, {384, 384}, {384, 384}}, 8},
                         {"nenya-d", {{960, 960}, {960, 960}}, 8},
                         {"olmoe-experts", {{1024, 2048}, {1024, 2048}, {2048, 1024}}, 8}};

// The matrices of the stream: a few distinct random ones, packed, then copied until the
// stream holds kTarget bytes (the values repeat, the addresses do not: memory sees a
// gigabyte of distinct rows).
struct Stream {
  std::vector<Matrix> originals;
  HugeArena arena;
  std::vector<MatrixView> views;
  double bytes = 0;

  Stream(DType type, const Shape& shape) {
    std::mt19937 rng(7);
    std::normal_distribution<float> nd(0, 1);
    for (auto [rows, cols] : shape.matrices) {
      std::vector<float> v(size_t(rows * cols));
      for (float& x : v) x = nd(rng);
      originals.push_back(encode_matrix(v.data(), rows, cols, type, 32));
    }
    while (bytes < kTarget)
      for (const Matrix& m : originals) {
        MatrixView w = m.view();
        const size_t n = m.values.size(), s = m.scales.size() * sizeof(F16);
        auto* packed = arena.allocate(n);
        pack_for_dot(w, packed);
        auto* scales = arena.allocate(s);
        std::memcpy(scales, m.scales.data(), s);
        w.packed = packed, w.scales = reinterpret_cast<const F16*>(scales);
        views.push_back(w);
        bytes += double(w.bytes());
      }
  }
};

// The streams of one shape at a time (each is a gigabyte; BM_DecodeStreamTypes reads the q8
// and the q4 one in turn): made when first asked for, the other shape's dropped.
const Stream& stream_of(DType type, int shape) {
  static std::map<std::pair<DType, int>, std::unique_ptr<Stream>> made;
  std::erase_if(made, [&](const auto& kv) { return kv.first.second != shape; });
  std::unique_ptr<Stream>& s = made[{type, shape}];
  if (!s) s = std::make_unique<Stream>(type, kShapes[shape]);
  return *s;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.size() % 2 ? v[v.size() / 2] : (v[v.size() / 2 - 1] + v[v.size() / 2]) / 2;
}

// One pass of a, then one of b, per iteration (back to back, so both see the same neighbours):
// the medians of their GB/s and of the per-pair ratio b / a.
struct PairedRates {
  double a, b, b_over_a;
};
template <class A, class B>
PairedRates paired_passes(benchmark::State& state, double bytes_a, A& a, double bytes_b, B& b) {
  std::vector<double> rate_a, rate_b, ratio;
  for (auto _ : state) {
    rate_a.push_back(bytes_a / a() / 1e9);
    rate_b.push_back(bytes_b / b() / 1e9);
    ratio.push_back(rate_b.back() / rate_a.back());
  }
  return {median(rate_a), median(rate_b), median(ratio)};
}

// One pass over the stream in regions of `per` matrices, as decode runs a layer's products:
// its seconds.
struct StreamPass {
  const Stream& s;
  size_t per;
  ThreadPool& pool;
  std::vector<float> x = std::vector<float>(8192), y = std::vector<float>(per * 8192);
  std::vector<Product> region;

  StreamPass(const Stream& stream, size_t per_region, ThreadPool& p) : s(stream), per(per_region), pool(p) {
    for (size_t i = 0; i < x.size(); ++i) x[i] = float(int(i % 17) - 8) * 0.1f;
  }
  double operator()() {
    const auto t0 = std::chrono::steady_clock::now();
    for (const MatrixView& w : s.views) {
      region.push_back({.w = w, .x = x.data(), .y = y.data() + 8192 * region.size()});
      if (region.size() == per) run_products(region, &pool), region.clear();
    }
    if (!region.empty()) run_products(region, &pool), region.clear();
    benchmark::DoNotOptimize(y.data());
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }
};

void BM_DecodeStream(benchmark::State& state, DType type) {
  const int threads = int(state.range(0)), shape = int(state.range(1));
  const Stream& s = stream_of(type, shape);
  StreamPass pass(s, kShapes[shape].per_region, ThreadPool::shared(threads));
  double best = 1e30;
  for (auto _ : state) best = std::min(best, pass());
  const Bandwidth probe = measure_read_bandwidth({.threads = threads, .passes = 3});
  state.counters["GB/s"] = s.bytes / best / 1e9;
  state.counters["probe_GB/s"] = probe.best / 1e9;
  state.counters["roofline_%"] = 100.0 * s.bytes / best / probe.best;
  state.counters["regions/s"] = double((s.views.size() + pass.per - 1) / pass.per) / best;
  state.SetLabel(std::string(to_string(type)) + " " + kShapes[shape].name + " " + active_int8_path() + ", best pass");
}

// The integer paths this CPU runs (kernels::supported_int8_paths, scalar left out) over the
// same stream, one pass of each in turn, iterations times. A host whose neighbours move its
// bandwidth by a quarter from one minute to the next (Zen 5 under KVM, 2026-12-05) moves
// passes run back to back alike, so the ratio of such passes separates paths that runs minutes
// apart cannot: `vs_PATH` is the median over iterations of (the default path's pass time /
// PATH's), >1 where PATH streams faster; `GB/s_PATH` the median pass of each.
void BM_DecodeStreamPaths(benchmark::State& state, DType type) {
  const int threads = int(state.range(0)), shape = int(state.range(1));
  const Stream& s = stream_of(type, shape);
  StreamPass pass(s, kShapes[shape].per_region, ThreadPool::shared(threads));
  const std::string chosen = active_int8_path();
  std::vector<std::string> paths{chosen};
  for (const char* p : supported_int8_paths())
    if (p != chosen && std::string(p) != "scalar") paths.emplace_back(p);
  std::vector<std::vector<double>> seconds(paths.size());
  for (auto _ : state)
    for (size_t k = 0; k < paths.size(); ++k) {
      set_int8_path(paths[k].c_str());
      seconds[k].push_back(pass());
    }
  set_int8_path(nullptr);
  for (size_t k = 0; k < paths.size(); ++k) {
    std::vector<double> ratio(seconds[k].size());
    for (size_t i = 0; i < ratio.size(); ++i) ratio[i] = seconds[0][i] / seconds[k][i];
    state.counters["GB/s_" + paths[k]] = s.bytes / median(seconds[k]) / 1e9;
    if (k > 0) state.counters["vs_" + paths[k]] = median(ratio);
  }
  state.SetLabel(std::string(to_string(type)) + " " + kShapes[shape].name + ", vs_PATH = " + chosen +
                 "'s pass time / PATH's, median over paired passes");
}

// The q8 and the q4 stream of one shape, one pass of each in turn, iterations times: the
// rows' bytes per second of q4 over q8's (`q4_per_byte_vs_q8`, the median of the per-pair
// ratios). Decode tokens at q4 run bytes_q8 / bytes_q4 (~1.89 for rows of whole groups) times
// as fast as at q8 exactly when this is 1; passes back to back see the same neighbours.
void BM_DecodeStreamTypes(benchmark::State& state) {
  const int threads = int(state.range(0)), shape = int(state.range(1));
  const Stream& q8 = stream_of(DType::q8, shape);
  const Stream& q4 = stream_of(DType::q4, shape);
  StreamPass pass8(q8, kShapes[shape].per_region, ThreadPool::shared(threads));
  StreamPass pass4(q4, kShapes[shape].per_region, ThreadPool::shared(threads));
  const PairedRates r = paired_passes(state, q8.bytes, pass8, q4.bytes, pass4);
  state.counters["GB/s_q8"] = r.a;
  state.counters["GB/s_q4"] = r.b;
  state.counters["q4_per_byte_vs_q8"] = r.b_over_a;
  state.SetLabel(std::string(kShapes[shape].name) + " " + active_int8_path() + ", medians over paired passes");
}

// A plain read of the stream's bytes (every view's values, then its scales) in the same
// regions and pieces as StreamPass, the pieces mapped to bytes by region.h's piece_rows (a
// "row" here is a byte): kernels::read_sum over each run, each thread summing into its own
// counter (a shared one would bounce its cache line between cores at every piece). The memory
// a decode pass reads, read as fast as loads alone read it.
struct ReadPass {
  const Stream& s;
  size_t per;
  ThreadPool& pool;
  // One region's parts (values, scales): their bytes, bytes per piece and first piece; grown once.
  std::vector<const uint8_t*> data;
  std::vector<int64_t> bytes, step, first;

  double operator()() {
    const auto t0 = std::chrono::steady_clock::now();
    for (size_t v0 = 0; v0 < s.views.size(); v0 += per) {
      data.clear(), bytes.clear(), first.assign(1, 0);
      for (size_t i = v0; i < std::min(s.views.size(), v0 + per); ++i) {
        const MatrixView& w = s.views[i];
        data.push_back(static_cast<const uint8_t*>(w.packed)), bytes.push_back(w.rows * w.row_bytes());
        data.push_back(reinterpret_cast<const uint8_t*>(w.scales)), bytes.push_back(w.rows * w.groups() * int64_t(sizeof(F16)));
      }
      const int64_t n = int64_t(bytes.size());
      step.assign(size_t(n), kItemBytes / kItemPieces);
      for (int64_t k = 0; k < n; ++k) first.push_back(first.back() + (bytes[size_t(k)] + step[0] - 1) / step[0]);
      pool.run_ranges(first.back(), kItemPieces, [&](int64_t begin, int64_t end) {
        thread_local uint64_t sum = 0;
        piece_rows(first.data(), step.data(), bytes.data(), n, begin, end, [&](int64_t k, int64_t b0, int64_t b1) {
          sum += read_sum(data[size_t(k)] + b0, size_t(b1 - b0) / 8 * 8);
        });
        benchmark::DoNotOptimize(sum);
      });
    }
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }
};

// The decode stream against a plain read of the same bytes: one pass of each in turn (the
// read first), 10 times. `kernel_vs_read` (the median of the per-pair ratios of the kernels'
// bytes per second to the read's) is how close the kernels come to the bandwidth of the very
// memory they read, free of the probe's own gigabyte: on the Zen 5 under KVM two 1 GiB buffers
// read up to ~10% apart, so a roofline over the probe mixes the kernels' efficiency with where
// the pages lie.
void BM_DecodeStreamVsRead(benchmark::State& state, DType type) {
  const int threads = int(state.range(0)), shape = int(state.range(1));
  const Stream& s = stream_of(type, shape);
  ThreadPool& pool = ThreadPool::shared(threads);
  StreamPass decode(s, kShapes[shape].per_region, pool);
  ReadPass read{s, kShapes[shape].per_region, pool, {}, {}, {}, {}};
  const PairedRates r = paired_passes(state, s.bytes, read, s.bytes, decode);
  state.counters["GB/s_kernel"] = r.b;
  state.counters["GB/s_read"] = r.a;
  state.counters["kernel_vs_read"] = r.b_over_a;
  state.SetLabel(std::string(to_string(type)) + " " + kShapes[shape].name + " " + active_int8_path() +
                 ", medians over paired passes");
}

// A region with no work: the caller publishes n items, both threads take theirs and the
// caller waits for the last, back to back (the worker spinning between them). The floor of
// what each of decode's regions costs beyond its reads (nenya: ~440 regions a token).
void BM_RegionHandOff(benchmark::State& state) {
  ThreadPool& pool = ThreadPool::shared(2);
  const int64_t items = state.range(0);
  struct alignas(64) Slot {
    int64_t ends = 0;
  };
  std::vector<Slot> slots(static_cast<size_t>(items));
  for (auto _ : state) pool.run_ranges(items, 1, [&](int64_t b, int64_t e) { slots[size_t(b)].ends += e; });
  benchmark::DoNotOptimize(slots.data());
  state.SetLabel("2 threads, items of no work");
}

BENCHMARK_CAPTURE(BM_DecodeStream, q8, DType::q8)->ArgsProduct({{1, 2}, {0, 1, 2, 3}})->ArgNames({"threads", "shape"})->Iterations(8)->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_DecodeStream, q4, DType::q4)->ArgsProduct({{1, 2}, {0, 1, 2, 3}})->ArgNames({"threads", "shape"})->Iterations(8)->UseRealTime()->Unit(benchmark::kMillisecond);

BENCHMARK_CAPTURE(BM_DecodeStreamPaths, q8, DType::q8)->ArgsProduct({{1, 2}, {0, 1, 2, 3}})->ArgNames({"threads", "shape"})->Iterations(10)->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_DecodeStreamPaths, q4, DType::q4)->ArgsProduct({{1, 2}, {0, 1, 2, 3}})->ArgNames({"threads", "shape"})->Iterations(10)->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_DecodeStreamVsRead, q8, DType::q8)->ArgsProduct({{1, 2}, {0, 1, 2, 3}})->ArgNames({"threads", "shape"})->Iterations(10)->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_DecodeStreamVsRead, q4, DType::q4)->ArgsProduct({{1, 2}, {0, 1, 2, 3}})->ArgNames({"threads", "shape"})->Iterations(10)->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK(BM_RegionHandOff)->Arg(2)->Arg(8)->ArgName("items")->UseRealTime();
BENCHMARK(BM_DecodeStreamTypes)->ArgsProduct({{1, 2}, {0, 1, 2, 3}})->ArgNames({"threads", "shape"})->Iterations(12)->UseRealTime()->Unit(benchmark::kMillisecond);

}  // namespace
