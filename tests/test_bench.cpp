// `wren bench` (runtime/bench.h): the test list is every combination in llama-bench's order,
// a run's statistics follow from its samples, its bytes per token from the model's stats.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>

#include "config/parse.h"
#include "runtime/bench.h"
#include "runtime/model_files.h"
#include "runtime/session.h"
#include "runtime/stats.h"
#include "test_util.h"

namespace wren {
namespace {

const std::string kShipped = (std::filesystem::path(WREN_SOURCE_DIR) / "models" / "embla-small").string();

TEST(Bench, EveryCombinationInLlamaBenchOrder) {
  BenchOptions o;
  o.n_prompt = {16, 0}, o.n_gen = {8, 4}, o.n_depth = {0, 32}, o.threads = {1, 2};
  const std::vector<BenchTest> t = bench_tests(o);
  std::vector<std::string> names;
  for (const BenchTest& x : t) names.push_back(x.name() + "/" + std::to_string(x.threads));
  const std::vector<std::string> expected{"pp16/1", "tg8/1", "tg4/1", "pp16 @ d32/1", "tg8 @ d32/1", "tg4 @ d32/1",
                                          "pp16/2", "tg8/2", "tg4/2", "pp16 @ d32/2", "tg8 @ d32/2", "tg4 @ d32/2"};
  EXPECT_EQ(names, expected);
  o.threads = {0};
  EXPECT_THROW(bench_tests(o), std::invalid_argument);
  o.threads = {1}, o.n_prompt = {0}, o.n_gen = {0};
  EXPECT_THROW(bench_tests(o), std::invalid_argument);
}

TEST(Bench, RunOnTheShippedModel) {
  auto model = open_model(kShipped);
  BenchOptions o;
  o.repetitions = 3;
  const double bandwidth = 10e9;
  const BenchResult pp = run_bench_test(model, {.n_prompt = 16, .n_depth = 8, .threads = 1}, o, bandwidth);
  const BenchResult tg = run_bench_test(model, {.n_gen = 8, .n_depth = 8, .threads = 1}, o, bandwidth);
  for (const BenchResult* r : {&pp, &tg}) {
    ASSERT_EQ(r->samples_ts.size(), 3u);
    double mean = 0, var = 0;
    for (double x : r->samples_ts) mean += x / 3;
    for (double x : r->samples_ts) var += (x - mean) * (x - mean) / 2;
    EXPECT_NEAR(r->avg_ts, mean, 1e-9 * mean);
    EXPECT_NEAR(r->stddev_ts, std::sqrt(var), 1e-9 * mean);
  }
  EXPECT_EQ(pp.roofline, 0);
  const TokenBytes full = bytes_per_token(*model, 8 + 4);
  EXPECT_EQ(tg.bytes.weights, full.weights);
  EXPECT_EQ(tg.bytes.engram, full.engram);
  EXPECT_GT(tg.bytes.engram, 0);
  EXPECT_GT(tg.bytes.kv, 0);
  // The default cache is f16, and this model has no recurrent state: half the f32 figure.
  EXPECT_EQ(tg.kv, KvType::f16);
  EXPECT_DOUBLE_EQ(tg.bytes.kv, full.kv / 2);
  EXPECT_LT(tg.bytes.lm_head, full.lm_head);  // the pre-score read less than the whole head
  EXPECT_NEAR(tg.roofline, tg.bytes.total() * tg.avg_ts / bandwidth, 1e-12);
  EXPECT_EQ(tg.paired_roofline, 0);  // no probe given
  EXPECT_TRUE(tg.paired_samples.empty());
  o.lm_head_prescore = false;
  EXPECT_EQ(run_bench_test(model, {.n_gen = 4, .threads = 1}, o, bandwidth).bytes.lm_head, full.lm_head);
  EXPECT_THROW(run_bench_test(model, {.n_gen = 8, .n_depth = 4096, .threads = 1}, o, bandwidth), std::invalid_argument);
}

TEST(Bench, PairedRooflineHasOneSampleOfEachDecodeStep) {
  auto model = open_model(kShipped);
  BenchOptions o;
  o.repetitions = 1;
  kernels::ReadProbe probe(size_t(4) << 20, 1);
  const BenchResult tg = run_bench_test(model, {.n_gen = 7, .threads = 1}, o, 10e9, &probe);
  ASSERT_EQ(tg.paired_samples.size(), 7u);
  for (double x : tg.paired_samples) EXPECT_TRUE(std::isfinite(x) && x > 0) << x;
  std::vector<double> sorted = tg.paired_samples;
  std::sort(sorted.begin(), sorted.end());
  EXPECT_EQ(tg.paired_roofline, sorted[3]);  // the median of seven
  EXPECT_GT(tg.paired_bandwidth, 0);
  const BenchResult pp = run_bench_test(model, {.n_prompt = 8, .threads = 1}, o, 10e9, &probe);
  EXPECT_EQ(pp.paired_roofline, 0);  // prompt tests have no roofline
}

// Recurrent states are f32 whatever the caches are stored in: nenya-mini with every layer GDN-2
// (no cache at all) reads the same bytes at every cache value size and context, and the
// hybrid's reads move with the value size by its caches' part alone, which grows with context.
TEST(Bench, RecurrentStatesStayF32InEveryCacheType) {
  Json j = to_json(load_preset("nenya-mini"));
  for (Json& layer : j["layers"]) layer["mixer"] = "gdn2";
  auto recurrent = testing_util::random_model(parse_model_config(j, "nenya-mini, GDN-2 only"), 1, kernels::DType::q8);
  const double state = cache_bytes_per_token(*recurrent, 64, 4.0);
  EXPECT_GT(state, 0);
  EXPECT_EQ(cache_bytes_per_token(*recurrent, 64, 2.0), state);
  EXPECT_EQ(cache_bytes_per_token(*recurrent, 128, 1.0625), state);
  auto hybrid = testing_util::random_model(load_preset("nenya-mini"), 1, kernels::DType::q8);
  const auto cache_part = [&](int64_t n) {
    return cache_bytes_per_token(*hybrid, n, 4.0) - cache_bytes_per_token(*hybrid, n, 2.0);
  };
  EXPECT_GT(cache_part(64), 0);
  EXPECT_NEAR(cache_part(128), 2 * cache_part(64), 1e-9 * cache_part(64));  // no constant (state) part
}

}  // namespace
}  // namespace wren
