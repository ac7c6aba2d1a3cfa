// tools/: every subcommand's registration function. A subcommand's callback throws on
// error; main() prints the message and exits non-zero.
#pragma once

namespace CLI { class App; }

namespace wren::tools {

void register_bench(CLI::App& app);
void register_explore(CLI::App& app);
void register_init(CLI::App& app);
void register_generate(CLI::App& app);
void register_perplexity(CLI::App& app);
void register_sparsity(CLI::App& app);
void register_tokenizer(CLI::App& app);
#ifdef WREN_WITH_TRAIN
void register_train(CLI::App& app);
#endif

inline void register_all(CLI::App& app) {
  register_bench(app);
  register_explore(app);
  register_init(app);
  register_generate(app);
  register_perplexity(app);
  register_sparsity(app);
  register_tokenizer(app);
#ifdef WREN_WITH_TRAIN
  register_train(app);  // only when built with libtorch
#endif
}

}  // namespace wren::tools
