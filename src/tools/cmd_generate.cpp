// wren generate: load a model directory, run the prompt (prefill with early exit), then
// sample and stream text as it is produced. --stats reports speeds and bytes per token.
#include <CLI/CLI.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <iostream>

#include "runtime/model_files.h"
#include "runtime/sampler.h"
#include "runtime/session.h"
#include "runtime/stats.h"
#include "text/tokenizer.h"
#include "tools/commands.h"

namespace wren::tools {

namespace {

struct GenerateArgs {
  std::string model, prompt;
  int max_tokens = 128, threads = 2;
  int64_t context = 0;
  SamplerParams sampling;
  std::vector<std::string> stops;
  bool stats = false, no_early_exit = false, ignore_eos = false;
};

double seconds_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

void run(const GenerateArgs& a) {
  auto model = open_model(a.model);
  const text::Tokenizer tok = text::Tokenizer::load(a.model + "/tokenizer.json");
  std::vector<int32_t> prompt = tok.encode(a.prompt);
  const std::optional<int32_t> eos = tok.token_id("<|endoftext|>");
  if (prompt.empty()) prompt.push_back(eos.value_or(0));  // an empty prompt starts a document
  // Caches are allocated up front: by default hold what this run needs (at least 4096 tokens),
  // never more than the model's context.
  const int64_t need = int64_t(prompt.size()) + a.max_tokens;
  const int64_t context = a.context ? a.context : std::min<int64_t>(model->config.context_length, std::max<int64_t>(4096, need));
  Session session(model, {.context = context, .threads = a.threads});
  if (int64_t(prompt.size()) + a.max_tokens > session.context())
    throw std::runtime_error("prompt (" + std::to_string(prompt.size()) + " tokens) + " + std::to_string(a.max_tokens) +
                             " new tokens exceed the context of " + std::to_string(session.context()));
  Sampler sampler(a.sampling);
  StopMatcher stop(a.stops);
  text::StreamDecoder decoder(tok, true);
  std::vector<float> logits(size_t(session.vocab_rows()));

  std::cout << a.prompt << std::flush;
  auto t0 = std::chrono::steady_clock::now();
  session.prefill(prompt, logits.data(), !a.no_early_exit);
  const double prefill_s = seconds_since(t0);
  t0 = std::chrono::steady_clock::now();
  int generated = 0;
  for (; generated < a.max_tokens; ++generated) {
    // Rows the tokenizer has no text for (a model vocabulary padded past it) are never sampled.
    std::fill(logits.begin() + std::min<int64_t>(tok.vocab_size(), int64_t(logits.size())), logits.end(), -INFINITY);
    const int32_t next = sampler.sample(logits, session.history());
    if (!a.ignore_eos && eos && next == *eos) break;
    std::cout << stop.push(decoder.push(next)) << std::flush;
    if (stop.stopped()) break;
    if (generated + 1 < a.max_tokens) session.decode(next, logits.data());
  }
  std::cout << stop.push(decoder.finish()) << stop.flush() << "\n";
  const double decode_s = seconds_since(t0);
  if (a.stats) {
    const double weights = weight_bytes_per_token(*model), cache = cache_bytes_per_token(*model, session.position());
    std::fprintf(stderr,
                 "prompt: %zu tokens in %.3f s (%.1f tokens/s, early exit at layer %d of %d)\n"
                 "generation: %d tokens in %.3f s (%.2f tokens/s)\n"
                 "bytes read per decode token: %.1f MB weights + %.2f MB cache at %lld tokens = %.1f MB"
                 " (%.2f GB/s at this speed)\n"
                 "sequence state: %.0f bytes per token of context (f32) + %.2f MB fixed (windows, recurrent states)\n",
                 prompt.size(), prefill_s, double(prompt.size()) / prefill_s, a.no_early_exit ? model->config.n_layers() : model->prefill_exit,
                 model->config.n_layers(), generated, decode_s, generated / decode_s, weights / 1e6, cache / 1e6,
                 (long long)session.position(), (weights + cache) / 1e6, (weights + cache) * generated / decode_s / 1e9,
                 session.cache_bytes_per_token(), session.fixed_state_bytes() / 1e6);
  }
}

}  // namespace

void register_generate(CLI::App& app) {
  auto* cmd = app.add_subcommand("generate", "generate text from a prompt");
  static GenerateArgs a;
  cmd->add_option("-m,--model", a.model, "model directory")->required();
  cmd->add_option("prompt", a.prompt, "the prompt");
  cmd->add_option("-n,--max-tokens", a.max_tokens, "tokens to generate")->check(CLI::NonNegativeNumber)->capture_default_str();
  cmd->add_option("--temp", a.sampling.temperature, "temperature (0: greedy)")->check(CLI::NonNegativeNumber)->capture_default_str();
  cmd->add_option("--top-k", a.sampling.top_k, "keep the k most likely tokens (0: off)")->check(CLI::NonNegativeNumber)->capture_default_str();
  cmd->add_option("--top-p", a.sampling.top_p, "nucleus sampling (1: off)")->check(CLI::Range(0.0, 1.0))->capture_default_str();
  cmd->add_option("--min-p", a.sampling.min_p, "drop tokens below min-p x the top probability")->check(CLI::Range(0.0, 1.0))->capture_default_str();
  cmd->add_option("--repeat-penalty", a.sampling.repeat_penalty, "penalise recent tokens (1: off)")->check(CLI::PositiveNumber)->capture_default_str();
  cmd->add_option("--repeat-last-n", a.sampling.repeat_last_n, "how many recent tokens")->check(CLI::NonNegativeNumber)->capture_default_str();
  cmd->add_option("--seed", a.sampling.seed, "sampling seed")->capture_default_str();
  cmd->add_option("--stop", a.stops, "stop when this text is produced (repeatable)");
  cmd->add_option("--context", a.context, "session context in tokens (default: what the run needs, at least 4096, at most the model's)")->check(CLI::NonNegativeNumber);
  cmd->add_option("-t,--threads", a.threads, "threads")->check(CLI::PositiveNumber)->capture_default_str();
  cmd->add_flag("--stats", a.stats, "print speeds and bytes read per token");
  cmd->add_flag("--no-early-exit", a.no_early_exit, "run every layer for every prompt token");
  cmd->add_flag("--ignore-eos", a.ignore_eos, "keep generating past <|endoftext|>");
  cmd->callback([] { run(a); });
}

}  // namespace wren::tools
