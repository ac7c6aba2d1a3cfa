// bench/: the LM head alone, exact (the stored q8 head, kernels::matvec) against the 4-bit
// pre-score with exact rescoring of the candidates (model/lm_head.h), at the Llama-3.2-1B
// head's shape (128256 x 2048, q8 group 32). x is a head row plus noise, so one row stands
// clear of the rest as after a trained model's final norm. Args: prescore (0/1), threads.
#include <benchmark/benchmark.h>

#include <memory>
#include <random>
#include <vector>

#include "kernels/ops.h"
#include "model/lm_head.h"

namespace {

using namespace wren;

struct Head {
  kernels::Matrix q8;
  std::shared_ptr<const LmHeadPrescore> pre;
  std::vector<float> x;
};

const Head& head() {
  static const Head h = [] {
    const int64_t rows = 128256, cols = 2048;
    std::mt19937 rng(1);
    std::normal_distribution<float> nd(0, 0.02f);
    std::vector<float> w(size_t(rows * cols));
    for (float& v : w) v = nd(rng);
    Head h;
    h.q8 = kernels::encode_matrix(w.data(), rows, cols, kernels::DType::q8, 32);
    h.pre = make_lm_head_prescore(h.q8.view());
    h.x.resize(size_t(cols));
    for (int64_t j = 0; j < cols; ++j) h.x[size_t(j)] = 50.0f * w[size_t(777 * cols + j)] + nd(rng) * 10.0f;
    return h;
  }();
  return h;
}

void BM_LmHead(benchmark::State& state) {
  const Head& h = head();
  const kernels::MatrixView view = h.q8.view();
  const LmHeadMode mode{.prescore = state.range(0) != 0, .keep = 1};
  kernels::ThreadPool pool(int(state.range(1)));
  LmHeadScratch s;
  s.reserve(view);
  std::vector<float> logits(size_t(view.rows));
  LmHeadRead read;
  for (auto _ : state) {
    read = lm_head_logits(view, h.pre.get(), mode, h.x.data(), logits.data(), s, &pool);
    benchmark::DoNotOptimize(logits.data());
  }
  state.SetBytesProcessed(int64_t(state.iterations()) * int64_t(read.bytes));
  state.counters["rows_rescored"] = double(read.rescored);
  state.counters["MB_read"] = read.bytes / 1e6;
  state.SetLabel(std::string(mode.prescore ? "prescore" : "exact") + " " + kernels::active_target());
}
BENCHMARK(BM_LmHead)->Args({0, 1})->Args({1, 1})->Args({0, 2})->Args({1, 2})->ArgNames({"prescore", "threads"})
    ->UseRealTime()->Unit(benchmark::kMillisecond);

}  // namespace
