// wren generate: load a model directory, run the prompt (prefill with early exit), then
// sample and stream text as it is produced. --stats reports speeds and bytes per token.
#include <CLI/CLI.hpp>

#include <algorithm>
#include <cstdio>
#include <iostream>

#include "config/read_file.h"
#include "runtime/generation.h"
#include "runtime/model_files.h"
#include "runtime/session_budget.h"
#include "runtime/stats.h"
#include "text/tokenizer.h"
#include "tools/commands.h"
#include "tools/sampling_options.h"
#include "tools/kv_option.h"

namespace wren::tools {

namespace {

struct GenerateArgs {
  std::string model, prompt, prompt_file, lm_head = "prescore", kv = "auto";
  int threads = 2;
  int64_t context = 0;
  GenerationOptions gen;
  bool stats = false, no_early_exit = false, no_vskip = false, no_neuron_skip = false, beyond_context = false;
};

void print_stats(const GenerateArgs& a, const Model& model, const Session& session, const GenerationTimes& t) {
  const TokenBytes b = bytes_per_token(model, session.position());
  const double steps = double(std::max<int64_t>(t.decode_steps, 1));
  const double head_bytes = t.decode_steps ? t.lm_head_bytes / steps : b.lm_head;  // as the decode steps read it
  const double total = b.weights + b.kv + b.engram + head_bytes;
  std::fprintf(stderr,
               "prompt: %lld tokens in %.3f s (%.1f tokens/s, early exit at layer %d of %d)\n"
               "generation: %d tokens; %lld decode steps in %.3f s (%.2f tokens/s)\n"
               "bytes read per decode token: %.2f MB weights + %.2f KB engram rows + %.3f MB LM head (%s, %.0f rows"
               " in its stored type) + %.3f MB cache at %lld tokens = %.2f MB (%.2f GB/s at this speed)\n"
               "sequence state: %.0f bytes per token of context (%s) + %.2f MB fixed (windows, recurrent states)\n",
               (long long)t.prompt_tokens, t.prefill_s, double(t.prompt_tokens) / t.prefill_s,
               a.no_early_exit ? model.config.n_layers() : model.prefill_exit, model.config.n_layers(), t.generated,
               (long long)t.decode_steps, t.decode_s, t.decode_tokens_per_s(), b.weights / 1e6, b.engram / 1e3,
               head_bytes / 1e6, a.lm_head.c_str(), t.lm_head_rescored / steps, b.kv / 1e6,
               (long long)session.position(), total / 1e6, total * t.decode_tokens_per_s() / 1e9,
               session.cache_bytes_per_token(), to_string(session.kv_type()), session.fixed_state_bytes() / 1e6);
}

void run(GenerateArgs a) {
  if (!a.prompt_file.empty()) a.prompt = read_text_input(a.prompt_file);
  OpenedModel opened = open_model_and_tokenizer(a.model);
  const std::shared_ptr<const Model>& model = opened.model;
  const text::Tokenizer& tok = opened.tokenizer;
  check_context(a.context, model->config, a.beyond_context, a.model);
  std::vector<int32_t> prompt = tok.encode(a.prompt);
  a.gen.eos = tok.token_id("<|endoftext|>");
  if (prompt.empty()) prompt.push_back(a.gen.eos.value_or(0));  // an empty prompt starts a document
  // Caches are allocated up front: by default hold what this run needs (at least 4096 tokens),
  // never more than the model's context.
  const int64_t need = int64_t(prompt.size()) + a.gen.max_tokens;
  const int64_t context = a.context ? a.context : std::min<int64_t>(model->config.context_length, std::max<int64_t>(4096, need));
  Session session(model, {.context = context, .threads = a.threads, .lm_head = lm_head_for(a.gen.sampling, a.lm_head == "prescore"),
                           .v_skip = !a.no_vskip, .neuron_skip = !a.no_neuron_skip, .kv = kv_choice(a.kv)});
  Generation gen(session, tok, a.gen);
  std::cout << a.prompt << std::flush;
  gen.prefill(prompt, !a.no_early_exit);
  while (!gen.done()) std::cout << gen.step() << std::flush;
  std::cout << gen.finish() << "\n";
  if (a.stats) print_stats(a, *model, session, gen.times());
}

}  // namespace

void register_generate(CLI::App& app) {
  auto* cmd = app.add_subcommand("generate", "generate text from a prompt");
  static GenerateArgs a;
  SamplerParams& sp = a.gen.sampling;
  cmd->add_option("-m,--model", a.model, "model directory")->required();
  auto* text = cmd->add_option("prompt", a.prompt, "the prompt");
  cmd->add_option("-f,--file", a.prompt_file, "read the prompt from this file (- for stdin)")->excludes(text);
  cmd->add_option("-n,--max-tokens", a.gen.max_tokens, "tokens to generate")->check(CLI::NonNegativeNumber)->capture_default_str();
  add_sampling_options(cmd, sp);
  cmd->add_option("--stop", a.gen.stops, "stop when this text is produced (repeatable)");
  cmd->add_option("--context", a.context, "session context in tokens (default: what the run needs, at least 4096, at most the model's)")->check(CLI::NonNegativeNumber);
  cmd->add_flag("--beyond-context", a.beyond_context, "allow --context above the model's context_length");
  cmd->add_option("-t,--threads", a.threads, "threads")->check(CLI::PositiveNumber)->capture_default_str();
  add_kv_option(cmd, a.kv);
  cmd->add_flag("--stats", a.stats, "print speeds and bytes read per token");
  cmd->add_flag("--no-early-exit", a.no_early_exit, "run every layer for every prompt token");
  cmd->add_flag("--no-vskip", a.no_vskip, "ReLU^2 attention reads every value row, weight 0 or not");
  cmd->add_flag("--no-neuron-skip", a.no_neuron_skip, "ReLU^2 FFNs read every down row, fired or not");
  cmd->add_option("--lm-head", a.lm_head, "prescore: a 4-bit copy picks the rows the exact head rescores (same tokens); exact")
      ->check(CLI::IsMember({"prescore", "exact"}))->capture_default_str();
  cmd->add_flag("--ignore-eos", a.gen.ignore_eos, "keep generating past <|endoftext|>");
  cmd->callback([] { run(a); });
}

}  // namespace wren::tools
