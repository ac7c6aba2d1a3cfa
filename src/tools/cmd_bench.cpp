// wren bench: decode and prefill speed on llama-bench's protocol (runtime/bench.h), as a
// markdown table (default) or JSON (one object per test), with the read bandwidth of the
// built-in probe (kernels/bandwidth.h) at each thread count and the share of the roofline
// each generation test reaches.
#include <CLI/CLI.hpp>

#include <algorithm>
#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>

#include "kernels/bandwidth.h"
#include "kernels/ops.h"
#include "runtime/bench.h"
#include "runtime/model_files.h"
#include "serve/bench_parallel.h"
#include "text/tokenizer.h"
#include "tools/commands.h"
#include "tools/kv_option.h"

namespace wren::tools {

namespace {

struct BenchArgs {
  std::string model, output = "md", lm_head = "prescore", kv = "auto", int8_path;
  BenchOptions o;
  int probe_mib = 1024;
  bool no_early_exit = false, no_vskip = false, no_neuron_skip = false, attention_rows = false, no_paired = false;
  std::vector<int> parallel;  // not empty: the server's decode benchmark (serve/bench_parallel.h) instead
};

std::string fixed(double v, int digits) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", digits, v);
  return buf;
}

nlohmann::json to_json(const BenchArgs& a, const std::string& name, const ModelSize& z, const BenchResult& r) {
  nlohmann::json j = {{"model", name}, {"model_size", z.bytes}, {"model_n_params", z.params},
                      {"backend", std::string("CPU ") + kernels::active_target()}, {"n_threads", r.test.threads},
                      {"n_prompt", r.test.n_prompt}, {"n_gen", r.test.n_gen}, {"n_depth", r.test.n_depth},
                      {"test", r.test.name()}, {"repetitions", a.o.repetitions}, {"avg_ts", r.avg_ts},
                      {"stddev_ts", r.stddev_ts}, {"samples_ts", r.samples_ts}, {"early_exit", a.o.early_exit},
                      {"lm_head", a.lm_head}, {"v_skip", a.o.v_skip}, {"neuron_skip", a.o.neuron_skip},
                      {"block_attention", a.o.block_attention},
                      {"int8_path", kernels::active_int8_path()}, {"kv", a.kv},
                      {"type_k", to_string(r.kv)}, {"type_v", to_string(r.kv)}};  // llama-bench's names
  if (r.test.n_gen > 0) {
    j["bytes_per_token"] = {{"weights", r.bytes.weights}, {"kv", r.bytes.kv}, {"engram_rows", r.bytes.engram},
                            {"lm_head", r.bytes.lm_head}, {"total", r.bytes.total()}};
    j["lm_head_rows_rescored"] = r.lm_head_rescored;
    j["bandwidth_bytes_per_s"] = r.bandwidth;
    j["roofline_pct"] = 100 * r.roofline;
    if (r.paired_roofline > 0) {
      j["paired_roofline_pct"] = 100 * r.paired_roofline;
      j["paired_bandwidth_bytes_per_s"] = r.paired_bandwidth;
    }
    const double v_rows = double(r.v_reads.read + r.v_reads.skipped);
    j["v_rows_skipped_pct"] = v_rows > 0 ? 100 * double(r.v_reads.skipped) / v_rows : 0.0;
    j["v_bytes_skipped_per_token"] = r.v_reads.bytes_skipped / r.test.n_gen;
  }
  return j;
}

void run_parallel(const BenchArgs& a) {
  auto model = open_model(a.model);
  const text::Tokenizer tok = text::Tokenizer::load(a.model + "/tokenizer.json");
  const serve::ParallelBenchOptions o{.streams = a.parallel, .n_prompt = a.o.n_prompt.front(), .n_gen = a.o.n_gen.front(),
                                      .threads = a.o.threads.front(), .repetitions = a.o.repetitions,
                                      .kv = a.o.kv};
  std::printf("| model | backend | threads | streams | pp%d+tg%d each | aggregate decode t/s (best) | mean | per stream | vs 1 stream |\n"
              "| --- | --- | ---: | ---: | --- | ---: | ---: | ---: | ---: |\n", o.n_prompt, o.n_gen);
  double one = 0;
  for (const serve::ParallelBenchResult& r : serve::bench_parallel(model, tok, o)) {
    if (r.streams == 1) one = r.best_ts;
    std::printf("| %s | CPU %s | %d | %d | | %s | %s | %s | %s |\n", model->config.name.c_str(), kernels::active_target(),
                o.threads, r.streams, fixed(r.best_ts, 2).c_str(), fixed(r.avg_ts, 2).c_str(),
                fixed(r.best_ts / r.streams, 2).c_str(), one > 0 ? (fixed(r.best_ts / one, 2) + "x").c_str() : "");
    std::fflush(stdout);
  }
}

void run(BenchArgs a) {
  if (!a.parallel.empty()) return run_parallel(a);
  a.o.early_exit = !a.no_early_exit;
  a.o.v_skip = !a.no_vskip, a.o.neuron_skip = !a.no_neuron_skip;
  a.o.block_attention = !a.attention_rows;
  a.o.lm_head_prescore = a.lm_head == "prescore";
  a.o.kv = kv_choice(a.kv);
  a.o.probe_bytes = size_t(a.probe_mib) << 20;
  if (!a.int8_path.empty()) kernels::set_int8_path(a.int8_path.c_str());  // throws naming an unknown / unsupported path
  const std::vector<BenchTest> tests = bench_tests(a.o);
  auto model = open_model(a.model);
  const ModelSize z = model_size(*model);
  const std::string name = model->config.name;
  // One probe at a time (a buffer of --probe-mib), made at the first test of its thread count
  // (the tests come grouped by thread count): the best of its first passes is the bandwidth
  // of every test at that count, and it pairs a pass with each step of one more decode run.
  std::unique_ptr<kernels::ReadProbe> probe;
  double bandwidth = 0;
  nlohmann::json all = nlohmann::json::array();
  if (a.output == "md")
    std::printf("| model | size | params | backend | threads | test | t/s | MB/token | GB/s probe | roofline | paired |\n"
                "| --- | ---: | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n");
  for (const BenchTest& t : tests) {
    if (!probe || probe->threads() != t.threads) {
      probe.reset();
      probe = std::make_unique<kernels::ReadProbe>(a.o.probe_bytes, t.threads);
      bandwidth = 0;
      for (int p = 0; p < a.o.probe_passes; ++p) bandwidth = std::max(bandwidth, probe->pass());
    }
    const BenchResult r = run_bench_test(model, t, a.o, bandwidth, a.no_paired ? nullptr : probe.get());
    if (a.output == "json") {
      all.push_back(to_json(a, name, z, r));
      continue;
    }
    const bool tg = t.n_gen > 0;
    std::printf("| %s | %s MiB | %s M | CPU %s %s | %d | %s | %s ± %s | %s | %s | %s | %s |\n", name.c_str(),
                fixed(z.bytes / (1 << 20), 2).c_str(), fixed(z.params / 1e6, 2).c_str(), kernels::active_target(),
                kernels::active_int8_path(),
                t.threads, t.name().c_str(), fixed(r.avg_ts, 2).c_str(), fixed(r.stddev_ts, 2).c_str(),
                tg ? fixed(r.bytes.total() / 1e6, 2).c_str() : "", fixed(bandwidth / 1e9, 1).c_str(),
                tg ? (fixed(100 * r.roofline, 1) + "%").c_str() : "",
                tg && r.paired_roofline > 0 ? (fixed(100 * r.paired_roofline, 1) + "%").c_str() : "");
    std::fflush(stdout);
  }
  if (a.output == "json") std::printf("%s\n", all.dump(2).c_str());
}

}  // namespace

void register_bench(CLI::App& app) {
  auto* cmd = app.add_subcommand("bench", "prefill and decode speed on llama-bench's protocol, against the roofline");
  static BenchArgs a;
  cmd->add_option("-m,--model", a.model, "model directory")->required();
  cmd->add_option("-p,--n-prompt", a.o.n_prompt, "prompt lengths (comma separated)")->delimiter(',')->capture_default_str();
  cmd->add_option("-n,--n-gen", a.o.n_gen, "generated tokens (comma separated)")->delimiter(',')->capture_default_str();
  cmd->add_option("-d,--n-depth", a.o.n_depth, "context depths (comma separated)")->delimiter(',')->capture_default_str();
  cmd->add_option("-t,--threads", a.o.threads, "thread counts (comma separated)")->delimiter(',')->capture_default_str();
  cmd->add_option("-r,--repetitions", a.o.repetitions, "repetitions per test, after one warm-up")
      ->check(CLI::PositiveNumber)->capture_default_str();
  cmd->add_option("-o,--output", a.output, "md or json")->check(CLI::IsMember({"md", "json"}))->capture_default_str();
  cmd->add_option("--probe-mib", a.probe_mib, "buffer of the bandwidth probe (MiB)")->check(CLI::PositiveNumber)
      ->capture_default_str();
  cmd->add_flag("--no-paired", a.no_paired, "no paired roofline (one more decode run per generation test, each step "
                "after a probe pass of its own)");
  cmd->add_flag("--no-early-exit", a.no_early_exit, "run every layer for every prompt token");
  cmd->add_option("--chunk", a.o.prefill_chunk, "tokens per prefill chunk (0: the default)")
      ->check(CLI::NonNegativeNumber)->capture_default_str();
  cmd->add_flag("--no-vskip", a.no_vskip, "ReLU^2 attention reads every value row, weight 0 or not");
  cmd->add_flag("--no-neuron-skip", a.no_neuron_skip, "ReLU^2 FFNs read every down row, fired or not");
  cmd->add_flag("--attention-rows", a.attention_rows, "a prompt's chunk attends row by row (decode's steps), not as "
                "one block of queries");
  add_kv_option(cmd, a.kv);
  cmd->add_option("--int8-path", a.int8_path, "the integer dot path of q8 / q4 products (default: the best this CPU "
                 "runs; e.g. avx512vnni, avx512vnni-zmm, avx512vnni-ymm, avxvnni, avx2, neon-i8mm, neon-dotprod, scalar)");
  cmd->add_option("--lm-head", a.lm_head, "prescore (4-bit copy, candidates rescored) or exact")
      ->check(CLI::IsMember({"prescore", "exact"}))->capture_default_str();
  cmd->add_option("--parallel", a.parallel, "stream counts: aggregate decode speed of that many requests at once "
                 "through the server's scheduler (uses the first -p, -n, -t)")->delimiter(',');
  cmd->callback([] { run(a); });
}

}  // namespace wren::tools
