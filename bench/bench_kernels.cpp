// bench/: Google Benchmark of the kernels against the machine's memory bandwidth.
//
// Decode is memory-bound: a matvec reads every weight byte once, so its bytes/s (values +
// scales, SetBytesProcessed) compared with the read bandwidth (bench/bench_memory.cpp)
// says how close a kernel runs to the roofline.
#include <benchmark/benchmark.h>

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

// Args: rows, cols, threads.
template <DType kType>
void BM_Matvec(benchmark::State& state) {
  const int64_t rows = state.range(0), cols = state.range(1);
  const Matrix m = encode_matrix(random_vector(rows * cols, 1).data(), rows, cols, kType, 32);
  const MatrixView w = m.view();
  const auto x = random_vector(cols, 2);
  std::vector<float> y(static_cast<size_t>(rows));
  ThreadPool pool(int(state.range(2)));
  for (auto _ : state) {
    matvec(w, x.data(), y.data(), &pool);
    benchmark::DoNotOptimize(y.data());
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(int64_t(state.iterations()) * w.bytes());
  state.SetLabel(std::string(to_string(kType)) + " " + active_target());
}

void MatvecArgs(benchmark::internal::Benchmark* b) {
  for (int threads : {1, 2})
    for (auto [rows, cols] : {std::pair{2048, 2048}, {4096, 2048}}) b->Args({rows, cols, threads});
  b->ArgNames({"rows", "cols", "threads"})->UseRealTime();
}
BENCHMARK_TEMPLATE(BM_Matvec, DType::f32)->Apply(MatvecArgs);
BENCHMARK_TEMPLATE(BM_Matvec, DType::bf16)->Apply(MatvecArgs);
BENCHMARK_TEMPLATE(BM_Matvec, DType::q8)->Apply(MatvecArgs);
BENCHMARK_TEMPLATE(BM_Matvec, DType::q4)->Apply(MatvecArgs);

// Prefill: W read once per tile of tokens. Args: tokens, threads. Items = tokens.
void BM_MatmulQ8(benchmark::State& state) {
  const int64_t rows = 2048, cols = 2048, tokens = state.range(0);
  const Matrix m = encode_matrix(random_vector(rows * cols, 1).data(), rows, cols, DType::q8, 32);
  const auto x = random_vector(tokens * cols, 2);
  std::vector<float> y(static_cast<size_t>(tokens * rows));
  ThreadPool pool(int(state.range(1)));
  for (auto _ : state) {
    matmul(m.view(), x.data(), tokens, y.data(), &pool);
    benchmark::DoNotOptimize(y.data());
  }
  state.SetItemsProcessed(int64_t(state.iterations()) * tokens);
  state.counters["GFLOP/s"] = benchmark::Counter(2.0 * rows * cols * tokens * double(state.iterations()),
                                                 benchmark::Counter::kIsRate);
}
BENCHMARK(BM_MatmulQ8)->Args({64, 1})->Args({256, 1})->Args({256, 2})->ArgNames({"tokens", "threads"})->UseRealTime();

}  // namespace

BENCHMARK_MAIN();
