// serve/: the server's decode benchmark (`wren bench --parallel 1,2,4,8`). For each stream
// count N, N requests of random prompt ids run through a Scheduler of N slots, greedy, to
// n_gen tokens each; the aggregate decode speed is the tokens the decode steps ran divided
// by the time of those steps (prefill chunks between them are not counted). With batched
// decode (runtime/decode_batch.h) the weights are read once per step for all streams, so on
// a bandwidth-bound model the aggregate grows with N.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "model/kv_cache.h"
#include "model/model.h"
#include "text/tokenizer.h"

namespace wren::serve {

struct ParallelBenchOptions {
  std::vector<int> streams{1, 2, 4, 8};
  int n_prompt = 32, n_gen = 64, threads = 2, repetitions = 3;
  uint64_t seed = 1;
  std::optional<KvType> kv = std::nullopt;  // the slots' cache storage (`wren bench --kv`)
};

struct ParallelBenchResult {
  int streams = 0;
  std::vector<double> samples_ts;  // aggregate decode tokens/s of each repetition
  double best_ts = 0, avg_ts = 0;
};

std::vector<ParallelBenchResult> bench_parallel(const std::shared_ptr<const Model>& model, const text::Tokenizer& tok,
                                                const ParallelBenchOptions& o);

}  // namespace wren::serve
