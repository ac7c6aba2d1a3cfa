// bench/: Google Benchmark of the kernels against the machine's memory bandwidth.
//
// Decode is memory-bound: a matvec reads every weight byte once, so its bytes/s (values +
// scales, SetBytesProcessed) compared with the read bandwidth (bench/bench_memory.cpp)
// says how close a kernel runs to the roofline.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
#include <memory>
#include <random>
#include <vector>

#include "kernels/ops.h"
#include "kernels/threads.h"
#include "kernels/types.h"

namespace {

using namespace wren::kernels;

std::vector<float> random_vector(int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0, 1);
  std::vector<float> v(static_cast<size_t>(n));
  for (auto& x : v) x = nd(rng);
  return v;
}

// y = W x. Args: rows, cols, threads. q8 / q4 run once per integer dot path this CPU
// supports (set_int8_path; the label names it and the Highway target of f32 / bf16), so
// the paths can be compared on one machine; the matvec includes quantising x. `packed`:
// the matrix carries its decode-order copy (pack_for_dot), as a loaded model's matrices do.
void BM_Matvec(benchmark::State& state, DType type, const char* path, bool packed) {
  const int64_t rows = state.range(0), cols = state.range(1);
  const Matrix m = encode_matrix(random_vector(rows * cols, 1).data(), rows, cols, type, 32);
  MatrixView w = m.view();
  std::vector<uint8_t> copy;
  if (packed) {
    copy.resize(m.values.size());
    pack_for_dot(w, copy.data());
    w.packed = copy.data();
  }
  const auto x = random_vector(cols, 2);
  std::vector<float> y(static_cast<size_t>(rows));
  ThreadPool pool(int(state.range(2)));
  set_int8_path(path);
  for (auto _ : state) {
    matvec(w, x.data(), y.data(), &pool);
    benchmark::DoNotOptimize(y.data());
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(int64_t(state.iterations()) * w.bytes());
  state.SetLabel(std::string(to_string(type)) + " " + (path ? path : active_target()) + (packed ? " packed" : ""));
  set_int8_path(nullptr);
}

void MatvecArgs(benchmark::internal::Benchmark* b) {
  for (int threads : {1, 2})
    // Llama-3.2-1B's shapes, then nenya's: d = 960 (3 blocks of 256 and a 6-group tail) and
    // an expert's 384 x 384 (1 block and a 4-group tail), GDN-2's low-rank gate rows (1536 x 32:
    // one group a row); 512 x 2048 sits in L2 at q8 and q4 (1 MB, 0.5 MB), the kernels' compute
    // ceiling.
    for (auto [rows, cols] : {std::pair{2048, 2048}, {2048, 8192}, {8192, 2048}, {8192, 8192}, {4096, 960}, {384, 384},
                              {1536, 32}, {512, 2048}})
      b->Args({rows, cols, threads});
  b->ArgNames({"rows", "cols", "threads"})->UseRealTime();
}

void RegisterMatvec() {
  for (DType t : {DType::f32, DType::bf16})
    benchmark::RegisterBenchmark((std::string("BM_Matvec/") + to_string(t)).c_str(), BM_Matvec, t,
                                 nullptr, false)->Apply(MatvecArgs);
  for (DType t : {DType::q8, DType::q4})
    for (const char* path : supported_int8_paths())
      for (bool packed : {false, true})
        benchmark::RegisterBenchmark((std::string("BM_Matvec/") + to_string(t) + "/" + path + (packed ? "/packed" : "")).c_str(),
                                     BM_Matvec, t, path, packed)->Apply(MatvecArgs);
}

// Prefill: W read once per tile of tokens. Args: tokens, threads. Items = tokens.
// q8 / q4 on their packed (decode-order) copies, as a loaded model's matrices are, once per
// integer dot path this CPU runs; the product includes quantising the batch.
void BM_Matmul(benchmark::State& state, DType type, const char* path) {
  const int64_t rows = 2048, cols = 2048, tokens = state.range(0);
  const Matrix m = encode_matrix(random_vector(rows * cols, 1).data(), rows, cols, type, 32);
  MatrixView w = m.view();
  std::vector<uint8_t> copy(m.values.size());
  pack_for_dot(w, copy.data());
  w.packed = copy.data();
  const auto x = random_vector(tokens * cols, 2);
  std::vector<float> y(static_cast<size_t>(tokens * rows));
  ThreadPool pool(int(state.range(1)));
  set_int8_path(path);
  std::vector<QuantizedActivation> xq;
  for (auto _ : state) {
    quantize_batch(x.data(), tokens, cols, cols, 32, xq);
    const ActivationBatch batch{x.data(), cols, xq.data(), tokens};
    parallel_rows(&pool, rows, 64, [&](int64_t r0, int64_t r1) { matmul_range(w, batch, y.data(), rows, r0, r1); });
    benchmark::DoNotOptimize(y.data());
  }
  state.SetItemsProcessed(int64_t(state.iterations()) * tokens);
  state.counters["GMAC/s"] = benchmark::Counter(double(rows) * cols * tokens * double(state.iterations()),
                                                benchmark::Counter::kIsRate);
  state.SetLabel(std::string(to_string(type)) + " " + path);
  set_int8_path(nullptr);
}

void RegisterMatmul() {
  for (DType t : {DType::q8, DType::q4})
    for (const char* path : supported_int8_paths())
      benchmark::RegisterBenchmark((std::string("BM_Matmul/") + to_string(t) + "/" + path).c_str(), BM_Matmul, t, path)
          ->Args({64, 1})->Args({256, 1})->Args({256, 2})->ArgNames({"tokens", "threads"})->UseRealTime();
}

// One activation quantised for the integer path, as each decode matvec does on the caller
// before its region: time per call for an expert's 384, nenya's d = 960, and 3,840 (mHC's
// four streams, an FFN's hidden width); rows: the ActivationRows bits (1 q8, 2 q4, 3 both).
void BM_QuantizeActivation(benchmark::State& state) {
  const int64_t n = state.range(0);
  const auto x = random_vector(n, 2);
  QuantizedActivation xq;
  for (auto _ : state) {
    quantize_activation(x.data(), n, 32, xq, unsigned(state.range(1)));
    benchmark::DoNotOptimize(xq.q.data());
  }
  state.SetItemsProcessed(int64_t(state.iterations()) * n);
  state.SetLabel(active_target());
}
BENCHMARK(BM_QuantizeActivation)->ArgsProduct({{384, 960, 3840}, {1, 2, 3}})->ArgNames({"n", "rows"});

// GDN-2's state read, S^T a and S^T b, over 1 GiB of 128 x 128 f32 states (one per head and
// layer in decode, each from memory): `kernel` 0 reads each state as the step did before
// state_products, in lists of 64 rows through weighted_sum_tile; 1 is state_products. GB/s
// of state read, best pass; the two run in one process, so compare them side by side.
void BM_StateProducts(benchmark::State& state) {
  constexpr int64_t kDim = 128, kStates = (int64_t(1) << 30) / (kDim * kDim * int64_t(sizeof(float)));
  static const std::vector<float> states = random_vector(kStates * kDim * kDim, 21);
  const auto a = random_vector(kDim, 22), b = random_vector(kDim, 23);
  std::vector<float> y(2 * kDim);
  double best = 1e30;
  for (auto _ : state) {
    const auto t0 = std::chrono::steady_clock::now();
    for (int64_t h = 0; h < kStates; ++h) {
      const float* S = states.data() + h * kDim * kDim;
      if (state.range(0) == 1) {
        state_products(S, kDim, kDim, a.data(), b.data(), y.data(), y.data() + kDim);
        continue;
      }
      std::fill(y.begin(), y.end(), 0.0f);
      const float* rows[64];
      for (int64_t i0 = 0; i0 < kDim; i0 += 64) {
        for (int64_t j = 0; j < 64; ++j) rows[j] = S + (i0 + j) * kDim;
        weighted_sum_tile(a.data() + i0, b.data() - a.data(), 2, {.f32 = rows}, 64, kDim, y.data(), kDim);
      }
    }
    best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    benchmark::DoNotOptimize(y.data());
  }
  state.counters["GB/s"] = double(states.size() * sizeof(float)) / best / 1e9;
}
BENCHMARK(BM_StateProducts)->Arg(0)->Arg(1)->ArgName("kernel")->Iterations(5)->Unit(benchmark::kMillisecond);

// ReLU^2 down rows, y += sum_i c_i W[r_i, :] over the fired rows (add_rows on one thread, as
// each of relu2_down's items runs it). Args: rows of W (a q8 / q4 [rows][2048] matrix: 512
// rows sit in L2, 16384 rows are read from memory), fired share in percent. Bytes: the fired
// rows and their scales.
void BM_AddRows(benchmark::State& state, DType type) {
  const int64_t rows = state.range(0), cols = 2048, percent = state.range(1);
  const Matrix m = encode_matrix(random_vector(rows * cols, 1).data(), rows, cols, type, 32);
  std::vector<int32_t> fired;
  std::mt19937 rng(3);
  for (int64_t r = 0; r < rows; ++r)
    if (int64_t(rng() % 100) < percent) fired.push_back(int32_t(r));
  const auto coeffs = random_vector(int64_t(fired.size()), 2);
  std::vector<float> y(static_cast<size_t>(cols));
  for (auto _ : state) {
    add_rows(m.view(), fired.data(), coeffs.data(), int64_t(fired.size()), y.data(), nullptr);
    benchmark::DoNotOptimize(y.data());
  }
  state.SetBytesProcessed(int64_t(state.iterations()) * int64_t(fired.size()) * m.view().row_bytes() +
                          int64_t(state.iterations()) * int64_t(fired.size()) * (cols / 32) * 2);
  state.SetLabel(std::string(to_string(type)) + " " + active_target());
}
BENCHMARK_CAPTURE(BM_AddRows, q8, DType::q8)->Args({512, 50})->Args({16384, 50})->Args({16384, 100})->ArgNames({"rows", "fired"})->UseRealTime();
BENCHMARK_CAPTURE(BM_AddRows, q4, DType::q4)->Args({512, 50})->Args({16384, 50})->Args({16384, 100})->ArgNames({"rows", "fired"})->UseRealTime();

}  // namespace

int main(int argc, char** argv) {
  RegisterMatvec();
  RegisterMatmul();
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
