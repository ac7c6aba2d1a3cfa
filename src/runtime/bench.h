// runtime/: `wren bench`, on llama-bench's protocol. Every combination of prompt length,
// generated tokens, context depth and thread count is a test; a prompt test ("pp512") times
// the prefill of n_prompt random token ids, a generation test ("tg128") the decode of n_gen
// tokens (each the greedy choice from the previous logits), both after n_depth random tokens
// already in the context ("tg128 @ d4096"), untimed. Each test runs once to warm up, then
// `repetitions` times from a fresh session; tokens/s is reported as mean and standard
// deviation over the repetitions. Wren adds what a decode token reads, by kind, and the
// share of the roofline (bytes per token x tokens/s / measured read bandwidth) reached.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "kernels/bandwidth.h"
#include "model/attention.h"
#include "model/kv_cache.h"
#include "model/model.h"
#include "runtime/stats.h"

namespace wren {

struct BenchOptions {
  std::vector<int> n_prompt{512}, n_gen{128}, n_depth{0}, threads{2};
  int repetitions = 5;
  bool early_exit = true;        // --no-early-exit: every prompt token runs every layer
  bool lm_head_prescore = true;  // --lm-head exact: the whole head in its stored type
  bool v_skip = true, neuron_skip = true;  // --no-vskip, --no-neuron-skip (SessionOptions)
  bool block_attention = true;   // --attention-rows: a prompt's chunk attends row by row
  size_t probe_bytes = size_t(1) << 30;
  int probe_passes = 5;
  uint64_t seed = 1;             // of the random prompt ids
  std::optional<KvType> kv = std::nullopt;  // --kv: the KV cache storage (unset: Session's rule)
  int64_t prefill_chunk = 0;     // --chunk: tokens per prefill chunk (0: Session's default)
};

struct BenchTest {
  int n_prompt = 0, n_gen = 0, n_depth = 0, threads = 1;
  std::string name() const;  // "pp512", "tg128", "tg128 @ d4096"
};

struct BenchResult {
  BenchTest test;
  std::vector<double> samples_ts;  // tokens/s of each repetition
  double avg_ts = 0, stddev_ts = 0;
  // Generation tests: bytes one decode token read (KV at the mean context of the timed
  // steps; the LM head as measured, pre-score and rescored rows), the probe's bandwidth at
  // this thread count, and the share of the roofline reached. Zero for prompt tests.
  TokenBytes bytes;
  double lm_head_rescored = 0;  // rows per token
  double bandwidth = 0;         // bytes per second
  double roofline = 0;          // bytes.total() x avg_ts / bandwidth
  // With a paired probe: one more decode run, each step after a probe pass of its own; the
  // median over the steps of bytes.total() / step seconds / that pass's bytes per second,
  // and the passes' median bandwidth. On a shared host the best of a few passes taken
  // before the tests is a bandwidth the decode may never have had.
  double paired_roofline = 0, paired_bandwidth = 0;
  std::vector<double> paired_samples;  // each step's share of its pass's roofline
  VReads v_reads;               // ReLU^2 V rows the last repetition's decode steps read and skipped
  KvType kv = KvType::f32;      // the caches' storage the sessions used (the option, or the default rule)
};

// The tests in llama-bench's order: per thread count, per depth, the prompt tests then the
// generation tests. Throws std::invalid_argument on a bad list (negative, or nothing to run).
std::vector<BenchTest> bench_tests(const BenchOptions& o);

// Runs one test; `bandwidth` (bytes/s at test.threads) only enters the roofline, `paired`
// (a probe of test.threads readers, or null) only the paired one. Throws
// std::invalid_argument when depth + prompt + generated tokens exceed the model's context.
BenchResult run_bench_test(const std::shared_ptr<const Model>& model, const BenchTest& test, const BenchOptions& o,
                           double bandwidth, kernels::ReadProbe* paired = nullptr);

// The model's size as stored (bytes of every tensor in its type) and its parameter count.
struct ModelSize {
  double bytes = 0, params = 0;
};
ModelSize model_size(const Model& m);

}  // namespace wren
