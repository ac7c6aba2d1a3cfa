// wren sparsity: the sparsity a model has on a text, measured where the engine can exploit
// it. The text is run in wren perplexity's windows (runtime/perplexity.h) with a
// SparsityProbe attached (model/sparsity_probe.h); each window's last token is run too, so
// V-skip is counted at a query that sees the whole window (context = -c tokens).
// The statistics (zero weights, V-skip, dead neurons, expert load) are runtime/sparsity_report.h.
#include <CLI/CLI.hpp>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "model/sparsity_probe.h"
#include "runtime/model_files.h"
#include "runtime/perplexity.h"
#include "runtime/sparsity_report.h"
#include "text/tokenizer.h"
#include "tools/commands.h"

namespace wren::tools {

namespace {

using Json = nlohmann::ordered_json;

struct SparsityArgs {
  std::string model;
  std::vector<std::string> files;
  int64_t context = 0, max_windows = 0;
  int threads = 2, skip_group = 8;
  std::string format = "table";
};

void run(const SparsityArgs& a) {
  OpenedModel opened = open_model_and_tokenizer(a.model);
  const std::shared_ptr<const Model>& model = opened.model;
  const ModelConfig& c = model->config;
  const text::Tokenizer& tok = opened.tokenizer;
  const int64_t n_ctx = window_length(c, a.context);
  if (a.skip_group < 1) throw std::runtime_error("--skip-group " + std::to_string(a.skip_group) + ": must be >= 1");
  // Every file is read before the (long) run, so a missing one is reported first.
  std::vector<std::vector<int32_t>> texts;
  for (const std::string& f : a.files) {
    texts.push_back(tokenize_file(tok, f));
    if (windows_in(int64_t(texts.back().size()), n_ctx) < 1)
      throw std::runtime_error(f + ": " + std::to_string(texts.back().size()) + " tokens, fewer than one window of " +
                               std::to_string(n_ctx));
  }
  SparsityProbe probe(c, a.skip_group);
  probe.set_skip_position(n_ctx - 1);
  WindowScore score;
  const WindowOptions o{.context = n_ctx, .threads = a.threads, .probe = &probe, .run_last = true, .progress = stderr};
  for (const std::vector<int32_t>& t : texts) {
    int64_t windows = windows_in(int64_t(t.size()), n_ctx);
    if (a.max_windows) windows = std::min(windows, a.max_windows - score.windows);
    if (windows > 0) score_windows(model, tok, t, windows, o, score);
  }
  const SparsityReport r = summarise_sparsity(c, probe);
  if (a.format == "json") {
    Json out = {{"model", a.model},
                {"files", a.files},
                {"context", n_ctx},
                {"skip_group", a.skip_group},
                {"windows", score.windows},
                {"scored_tokens", score.scored},
                {"perplexity", score.perplexity()},
                {"bits_per_byte", score.bits_per_byte()},
                {"kernel_v_rows_read", score.v_reads.read},
                {"kernel_v_rows_skipped", score.v_reads.skipped},
                {"kernel_v_bytes_skipped", score.v_reads.bytes_skipped}};
    out.update(r.json);
    std::printf("%s\n", out.dump(2).c_str());
    return;
  }
  std::printf("model %s: %lld windows of %lld tokens, %lld tokens scored\n", a.model.c_str(), (long long)score.windows,
              (long long)n_ctx, (long long)score.scored);
  std::printf("perplexity %.4f\nbits per byte %.4f\n", score.perplexity(), score.bits_per_byte());
  const double v_rows = double(score.v_reads.read + score.v_reads.skipped);
  std::printf("V rows the ReLU^2 kernels skipped (no head of the KV group weights the key), every query: %.1f%% "
              "(%.1f MB)\n", v_rows > 0 ? 100 * double(score.v_reads.skipped) / v_rows : 0.0,
              score.v_reads.bytes_skipped / 1e6);
  std::printf("V-skip: groups of %d keys at each window's last query (%lld keys)\n\n", a.skip_group, (long long)n_ctx);
  std::printf("%s", r.table.c_str());
}

}  // namespace

void register_sparsity(CLI::App& app) {
  auto* cmd = app.add_subcommand("sparsity", "sparsity of a model on a text: zero attention weights, V-skip, "
                                             "dead neurons, expert load");
  static SparsityArgs a;
  cmd->add_option("-m,--model", a.model, "model directory")->required();
  cmd->add_option("files", a.files, "UTF-8 text files (held out)")->required();
  cmd->add_option("-c,--context", a.context, "window length in tokens (default: min(model context, 512))")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--max-windows,--windows", a.max_windows, "evaluate at most this many windows over all files")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--skip-group", a.skip_group, "keys per V-skip group")->capture_default_str();
  cmd->add_option("-t,--threads", a.threads, "threads")->check(CLI::PositiveNumber)->capture_default_str();
  cmd->add_option("--format", a.format, "table or json")->check(CLI::IsMember({"table", "json"}))->capture_default_str();
  cmd->callback([] { run(a); });
}

}  // namespace wren::tools
