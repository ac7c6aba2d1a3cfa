// wren perplexity: perplexity and bits per byte of a text file, as llama-perplexity measures
// it: the token stream is cut into windows of the context length; each window is evaluated
// from a fresh session and only its second half is scored, so every scored token sees at
// least half a window of context.
//   PPL = exp(mean NLL),  bits per byte = sum NLL / ln 2 / bytes of the scored tokens' text
#include <CLI/CLI.hpp>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <sstream>

#include "runtime/model_files.h"
#include "runtime/session.h"
#include "text/tokenizer.h"
#include "tools/commands.h"

namespace wren::tools {

namespace {

struct PerplexityArgs {
  std::string model, file;
  int64_t context = 0;
  int threads = 2;
  int64_t max_windows = 0;
};

// -log p(target) under softmax(logits), in nats.
double nll(const std::vector<float>& logits, int vocab, int32_t target) {
  float top = -INFINITY;
  for (int v = 0; v < vocab; ++v) top = std::max(top, logits[size_t(v)]);
  double sum = 0;
  for (int v = 0; v < vocab; ++v) sum += std::exp(double(logits[size_t(v)] - top));
  return std::log(sum) - double(logits[size_t(target)] - top);
}

void run(const PerplexityArgs& a) {
  auto model = open_model(a.model);
  const text::Tokenizer tok = text::Tokenizer::load(a.model + "/tokenizer.json");
  std::ifstream in(a.file, std::ios::binary);
  if (!in) throw std::runtime_error(a.file + ": cannot open");
  std::stringstream ss;
  ss << in.rdbuf();
  const std::vector<int32_t> tokens = tok.encode(ss.str(), false);
  const int64_t n_ctx = a.context ? a.context : std::min<int64_t>(model->config.context_length, 512);
  if (n_ctx < 2) throw std::runtime_error("--context must be at least 2");
  const int64_t windows_in_file = int64_t(tokens.size()) / n_ctx;
  const int64_t windows = a.max_windows ? std::min(a.max_windows, windows_in_file) : windows_in_file;
  if (windows < 1)
    throw std::runtime_error(a.file + ": " + std::to_string(tokens.size()) + " tokens, fewer than one window of " +
                             std::to_string(n_ctx));
  const int vocab = model->config.vocab_size;
  std::vector<float> logits(size_t(model->config.rows()));
  double total_nll = 0, bytes = 0;
  int64_t scored = 0;
  auto t0 = std::chrono::steady_clock::now();
  for (int64_t w = 0; w < windows; ++w) {
    Session session(model, {.context = n_ctx, .threads = a.threads});
    const int32_t* window = tokens.data() + w * n_ctx;
    for (int64_t i = 0; i + 1 < n_ctx; ++i) {
      session.decode(window[i], logits.data());
      if (i + 1 < n_ctx / 2) continue;
      total_nll += nll(logits, vocab, window[i + 1]);
      bytes += double(tok.token_to_piece(window[i + 1]).size());
      ++scored;
    }
    const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::fprintf(stderr, "\r[%lld/%lld] perplexity %.4f  (%.0f tokens/s, ETA %.0f s)   ", (long long)(w + 1),
                 (long long)windows, std::exp(total_nll / double(scored)), double((w + 1) * n_ctx) / elapsed,
                 elapsed / double(w + 1) * double(windows - w - 1));
  }
  std::fprintf(stderr, "\n");
  std::printf("file %s: %lld windows of %lld tokens, %lld tokens scored\n", a.file.c_str(), (long long)windows,
              (long long)n_ctx, (long long)scored);
  std::printf("perplexity %.4f\nbits per byte %.4f\n", std::exp(total_nll / double(scored)), total_nll / std::log(2.0) / bytes);
}

}  // namespace

void register_perplexity(CLI::App& app) {
  auto* cmd = app.add_subcommand("perplexity", "perplexity and bits per byte of a text file");
  static PerplexityArgs a;
  cmd->add_option("-m,--model", a.model, "model directory")->required();
  cmd->add_option("file", a.file, "UTF-8 text file")->required();
  cmd->add_option("-c,--context", a.context, "window length in tokens (default: min(model context, 512))")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--windows", a.max_windows, "evaluate at most this many windows")->check(CLI::NonNegativeNumber);
  cmd->add_option("-t,--threads", a.threads, "threads")->check(CLI::PositiveNumber)->capture_default_str();
  cmd->callback([] { run(a); });
}

}  // namespace wren::tools
