// tools/: every subcommand's registration function. A subcommand's callback throws on
// error; main() prints the message and exits non-zero.
#pragma once

namespace CLI { class App; }

namespace wren::tools {

void register_bench(CLI::App& app);
void register_convert(CLI::App& app);  // convert, quantize
void register_explore(CLI::App& app);
void register_init(CLI::App& app);
void register_generate(CLI::App& app);
void register_perplexity(CLI::App& app);
void register_serve(CLI::App& app);
void register_chat(CLI::App& app);
void register_sparsity(CLI::App& app);
void register_tokenizer(CLI::App& app);
void register_train(CLI::App& app);  // runs wren-train (the libtorch trainer) beside wren

inline void register_all(CLI::App& app) {
  register_bench(app);
  register_convert(app);
  register_explore(app);
  register_init(app);
  register_generate(app);
  register_perplexity(app);
  register_serve(app);
  register_chat(app);
  register_sparsity(app);
  register_tokenizer(app);
  register_train(app);
}

}  // namespace wren::tools
