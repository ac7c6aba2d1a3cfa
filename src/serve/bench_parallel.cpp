#include "serve/bench_parallel.h"

#include <algorithm>
#include <random>
#include <stdexcept>

#include "serve/scheduler.h"

namespace wren::serve {

namespace {

// One repetition at `streams` slots: the aggregate decode tokens/s.
double run_once(const std::shared_ptr<const Model>& model, const text::Tokenizer& tok, const ParallelBenchOptions& o,
                int streams, std::mt19937_64& rng) {
  const int64_t context = o.n_prompt + o.n_gen + 1;
  Scheduler sched(model, tok, {.parallel = streams, .queue = streams, .context = context, .threads = o.threads,
                               .prefill_chunk = o.n_prompt, .kv = o.kv});
  std::uniform_int_distribution<int32_t> id(0, std::min(tok.vocab_size(), model->config.rows()) - 1);
  std::vector<std::shared_ptr<Job>> jobs;
  for (int i = 0; i < streams; ++i) {
    std::vector<int32_t> prompt(size_t(o.n_prompt));
    for (int32_t& t : prompt) t = id(rng);
    jobs.push_back(std::make_shared<Job>(
        std::move(prompt), GenerationOptions{.sampling = {.temperature = 0}, .max_tokens = o.n_gen, .ignore_eos = true}));
    if (!sched.submit(jobs.back())) throw std::logic_error("bench_parallel: the queue refused a job");
  }
  for (auto& j : jobs)
    while (!j->take(1000).finished) {
    }
  const SchedulerStats s = sched.stats();
  return s.decode_seconds > 0 ? double(s.decode_tokens) / s.decode_seconds : 0;
}

}  // namespace

std::vector<ParallelBenchResult> bench_parallel(const std::shared_ptr<const Model>& model, const text::Tokenizer& tok,
                                                const ParallelBenchOptions& o) {
  if (o.streams.empty() || o.n_prompt < 1 || o.n_gen < 2 || o.repetitions < 1)
    throw std::invalid_argument("bench --parallel: needs stream counts, a prompt of at least 1 and at least 2 generated tokens");
  if (o.n_prompt + o.n_gen + 1 > model->config.context_length)
    throw std::invalid_argument("bench --parallel: prompt + generated tokens exceed the model's context of " +
                                std::to_string(model->config.context_length));
  std::mt19937_64 rng(o.seed);
  std::vector<ParallelBenchResult> out;
  for (int n : o.streams) {
    if (n < 1) throw std::invalid_argument("bench --parallel: stream counts must be positive, got " + std::to_string(n));
    run_once(model, tok, o, n, rng);  // warm-up
    ParallelBenchResult r;
    r.streams = n;
    for (int k = 0; k < o.repetitions; ++k) r.samples_ts.push_back(run_once(model, tok, o, n, rng));
    r.best_ts = *std::max_element(r.samples_ts.begin(), r.samples_ts.end());
    for (double t : r.samples_ts) r.avg_ts += t / double(r.samples_ts.size());
    out.push_back(r);
  }
  return out;
}

}  // namespace wren::serve
