// wren perplexity: perplexity and bits per byte of a text file, as llama-perplexity measures
// it (windows of the context length, second halves scored: runtime/perplexity.h).
#include <CLI/CLI.hpp>

#include <algorithm>
#include <cstdio>

#include "runtime/model_files.h"
#include "runtime/perplexity.h"
#include "text/tokenizer.h"
#include "tools/commands.h"
#include "tools/kv_option.h"

namespace wren::tools {

namespace {

struct PerplexityArgs {
  std::string model, file, kv = "auto";
  int64_t context = 0;
  int threads = 2;
  int64_t max_windows = 0;
};

void run(const PerplexityArgs& a) {
  OpenedModel opened = open_model_and_tokenizer(a.model);
  const std::shared_ptr<const Model>& model = opened.model;
  const text::Tokenizer& tok = opened.tokenizer;
  const std::vector<int32_t> tokens = tokenize_file(tok, a.file);
  const int64_t n_ctx = window_length(model->config, a.context);
  const int64_t windows_in_file = windows_in(int64_t(tokens.size()), n_ctx);
  const int64_t windows = a.max_windows ? std::min(a.max_windows, windows_in_file) : windows_in_file;
  if (windows < 1)
    throw std::runtime_error(a.file + ": " + std::to_string(tokens.size()) + " tokens, fewer than one window of " +
                             std::to_string(n_ctx));
  WindowScore score;
  score_windows(model, tok, tokens, windows, {.context = n_ctx, .threads = a.threads, .kv = kv_choice(a.kv), .progress = stderr}, score);
  std::printf("file %s: %lld windows of %lld tokens, %lld tokens scored\n", a.file.c_str(), (long long)windows,
              (long long)n_ctx, (long long)score.scored);
  std::printf("perplexity %.4f\nbits per byte %.4f\n", score.perplexity(), score.bits_per_byte());
}

}  // namespace

void register_perplexity(CLI::App& app) {
  auto* cmd = app.add_subcommand("perplexity", "perplexity and bits per byte of a text file");
  static PerplexityArgs a;
  cmd->add_option("-m,--model", a.model, "model directory")->required();
  auto* positional = cmd->add_option("file", a.file, "UTF-8 text file");
  cmd->add_option("-f,--file", a.file, "UTF-8 text file (- for stdin)")->excludes(positional);
  cmd->callback([] {
    if (a.file.empty()) throw std::runtime_error("perplexity: give the text file (FILE or -f FILE)");
    run(a);
  });
  cmd->add_option("-c,--context", a.context, "window length in tokens (default: min(model context, 512))")
      ->check(CLI::NonNegativeNumber);
  add_kv_option(cmd, a.kv);
  cmd->add_option("--windows", a.max_windows, "evaluate at most this many windows")->check(CLI::NonNegativeNumber);
  cmd->add_option("-t,--threads", a.threads, "threads")->check(CLI::PositiveNumber)->capture_default_str();
}

}  // namespace wren::tools
