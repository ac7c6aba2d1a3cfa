#include "runtime/bench.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <random>
#include <stdexcept>
#include <thread>

#include "kernels/ops.h"
#include "runtime/session.h"

namespace wren {

std::string BenchTest::name() const {
  std::string s = n_prompt > 0 ? "pp" + std::to_string(n_prompt) : "tg" + std::to_string(n_gen);
  if (n_depth > 0) s += " @ d" + std::to_string(n_depth);
  return s;
}

std::vector<BenchTest> bench_tests(const BenchOptions& o) {
  auto check = [](const std::vector<int>& v, const char* flag, int least) {
    for (int x : v)
      if (x < least)
        throw std::invalid_argument(std::string(flag) + " " + std::to_string(x) + ": expected >= " + std::to_string(least));
  };
  check(o.n_prompt, "-p", 0), check(o.n_gen, "-n", 0), check(o.n_depth, "-d", 0), check(o.threads, "-t", 1);
  if (o.repetitions < 1) throw std::invalid_argument("-r " + std::to_string(o.repetitions) + ": expected >= 1");
  std::vector<BenchTest> tests;
  for (int t : o.threads)
    for (int d : o.n_depth) {
      for (int p : o.n_prompt)
        if (p > 0) tests.push_back({.n_prompt = p, .n_gen = 0, .n_depth = d, .threads = t});
      for (int n : o.n_gen)
        if (n > 0) tests.push_back({.n_prompt = 0, .n_gen = n, .n_depth = d, .threads = t});
    }
  if (tests.empty()) throw std::invalid_argument("nothing to run: every -p and -n is 0");
  return tests;
}

namespace {

struct Run {
  double seconds = 0;
  double lm_head_bytes = 0, lm_head_rescored = 0;  // summed over the decode steps
  VReads v_reads;                                   // ReLU^2 V rows read / skipped by the decode steps
  KvType kv = KvType::f32;                          // the session's cache storage
  // With a paired probe: each decode step's seconds and the probe's bytes/s just before it.
  std::vector<double> step_seconds, step_bandwidth;
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n == 0 ? 0 : n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

// The greedy next token, as `wren generate --temp 0` picks it.
int32_t argmax(const std::vector<float>& v) { return kernels::argmax(v.data(), int64_t(v.size())); }

// One repetition from a fresh session: the depth untimed, then the timed prompt or decode.
// With a probe, every decode step is timed alone after one probe pass (untimed): the pool's
// workers are let fall asleep first (kernels/threads.h: they spin 100 us), so they do not
// take the probe's cores.
Run run_once(const std::shared_ptr<const Model>& model, const BenchTest& t, const BenchOptions& o, std::mt19937_64& rng,
             kernels::ReadProbe* probe = nullptr) {
  const ModelConfig& c = model->config;
  std::uniform_int_distribution<int32_t> token(0, c.vocab_size - 1);
  auto random_tokens = [&](int n) {
    std::vector<int32_t> v(static_cast<size_t>(n));
    for (int32_t& x : v) x = token(rng);
    return v;
  };
  const LmHeadMode head{.prescore = o.lm_head_prescore, .keep = 1};
  Session s(model, {.context = int64_t(t.n_depth) + t.n_prompt + t.n_gen + 1, .threads = t.threads, .lm_head = head,
             .v_skip = o.v_skip, .neuron_skip = o.neuron_skip,
             .block_attention = o.block_attention, .kv = o.kv, .prefill_chunk = o.prefill_chunk});
  std::vector<float> logits(size_t(s.vocab_rows()));
  if (t.n_depth > 0) s.prefill(random_tokens(t.n_depth), logits.data(), o.early_exit);
  Run run;
  run.kv = s.kv_type();
  if (t.n_prompt > 0) {
    const std::vector<int32_t> prompt = random_tokens(t.n_prompt);
    const auto t0 = std::chrono::steady_clock::now();
    s.prefill(prompt, logits.data(), o.early_exit);
    run.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    return run;
  }
  int32_t next = t.n_depth > 0 ? argmax(logits) : token(rng);
  const VReads before = s.v_reads();
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < t.n_gen; ++i) {
    if (probe) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
      run.step_bandwidth.push_back(probe->pass());
    }
    const auto step = std::chrono::steady_clock::now();
    s.decode(next, logits.data());
    if (probe) run.step_seconds.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - step).count());
    run.lm_head_bytes += s.last_lm_head().bytes;
    run.lm_head_rescored += double(s.last_lm_head().rescored);
    next = argmax(logits);
  }
  run.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  run.v_reads = {s.v_reads().read - before.read, s.v_reads().skipped - before.skipped,
                 s.v_reads().bytes_skipped - before.bytes_skipped};
  return run;
}

}  // namespace

BenchResult run_bench_test(const std::shared_ptr<const Model>& model, const BenchTest& t, const BenchOptions& o,
                           double bandwidth, kernels::ReadProbe* paired) {
  const int64_t need = int64_t(t.n_depth) + t.n_prompt + t.n_gen + 1;
  if (need > model->config.context_length)
    throw std::invalid_argument(t.name() + ": " + std::to_string(need) + " tokens of context, more than the model's " +
                                std::to_string(model->config.context_length));
  std::mt19937_64 rng(o.seed);
  BenchResult r;
  r.test = t;
  r.kv = run_once(model, t, o, rng).kv;  // warm-up: pages mapped, caches and thread scratch grown
  Run last;
  for (int i = 0; i < o.repetitions; ++i) {
    last = run_once(model, t, o, rng);
    r.samples_ts.push_back(double(t.n_prompt > 0 ? t.n_prompt : t.n_gen) / last.seconds);
  }
  const double n = double(r.samples_ts.size());
  for (double x : r.samples_ts) r.avg_ts += x / n;
  for (double x : r.samples_ts) r.stddev_ts += (x - r.avg_ts) * (x - r.avg_ts);
  r.stddev_ts = n > 1 ? std::sqrt(r.stddev_ts / (n - 1)) : 0;  // sample standard deviation, as llama-bench
  if (t.n_gen > 0) {
    // The timed steps see contexts depth + 1 .. depth + n_gen; K/V reads grow linearly.
    // The caches in the storage this session used (a value's bytes with its share of the q8
    // scales); the recurrent states are f32 in every cache type.
    const ModelConfig& c = model->config;
    const double f32 = Session::cache_bytes_per_token(c, KvType::f32);
    const double value_bytes = f32 > 0 ? 4.0 * Session::cache_bytes_per_token(c, r.kv) / f32 : 4.0;
    r.bytes = bytes_per_token(*model, int64_t(t.n_depth) + (t.n_gen + 1) / 2, 1.0, value_bytes);
    r.v_reads = last.v_reads;
    r.bytes.lm_head = last.lm_head_bytes / t.n_gen;
    r.lm_head_rescored = last.lm_head_rescored / t.n_gen;
    r.bandwidth = bandwidth;
    r.roofline = bandwidth > 0 ? r.bytes.total() * r.avg_ts / bandwidth : 0;
    if (paired) {
      // roofline of step i = bytes / seconds_i / bandwidth_i; the median over the steps.
      const Run p = run_once(model, t, o, rng, paired);
      std::vector<double>& share = r.paired_samples;
      share.resize(p.step_seconds.size());
      for (size_t i = 0; i < share.size(); ++i) share[i] = r.bytes.total() / p.step_seconds[i] / p.step_bandwidth[i];
      r.paired_roofline = median(share);
      r.paired_bandwidth = median(p.step_bandwidth);
    }
  }
  return r;
}

ModelSize model_size(const Model& m) {
  ModelSize z;
  for (const TensorInfo& t : m.map.tensors) {
    z.params += double(t.numel());
    z.bytes += t.role == TensorRole::matrix || t.role == TensorRole::lookup ? double(m.storage->matrix(t).bytes())
                                                                             : double(t.numel()) * sizeof(float);
  }
  return z;
}

}  // namespace wren
