// wren init: a randomly initialised model directory for any config, with the init scheme the
// trainer uses (config/init_rule). Written to a temporary directory, then renamed.
#include <CLI/CLI.hpp>


#include "config/parse.h"
#include "config/read_file.h"
#include "runtime/model_files.h"
#include "text/bpe_train.h"
#include "tools/commands.h"

namespace wren::tools {

namespace {

struct InitArgs {
  std::string config, out, dtype = "q8", tokenizer;
  uint64_t seed = 0;
  int group = kernels::kDefaultGroup, threads = 2;
  bool force = false;
};

kernels::DType parse_dtype(const std::string& s) {
  if (s == "f32") return kernels::DType::f32;
  if (s == "bf16") return kernels::DType::bf16;
  if (s == "q8") return kernels::DType::q8;
  if (s == "q4") return kernels::DType::q4;
  throw std::runtime_error("--dtype: \"" + s + "\"; expected f32, bf16, q8 or q4");
}

void run(const InitArgs& a) {
  const ModelConfig c = resolve_model_config(a.config);
  // Without a tokenizer, the 256 byte tokens and <|endoftext|>: enough to run any config.
  std::string tokenizer = a.tokenizer.empty() ? text::train_bpe({}, {.vocab_size = 257}).dump() : read_file(a.tokenizer);
  write_random_model(a.out, c, a.seed, parse_dtype(a.dtype), a.group, tokenizer, a.force, a.threads);
}

}  // namespace

void register_init(CLI::App& app) {
  auto* cmd = app.add_subcommand("init", "write a randomly initialised model directory for a config");
  static InitArgs a;
  cmd->add_option("config", a.config, "preset name, config JSON file or model directory")->required();
  cmd->add_option("-o,--output", a.out, "the model directory to create")->required();
  cmd->add_option("--seed", a.seed, "initialisation seed")->capture_default_str();
  cmd->add_option("--dtype", a.dtype, "storage of matrices and tables: f32, bf16, q8, q4")->capture_default_str();
  cmd->add_option("--group", a.group, "values per scale for q8 / q4")->check(CLI::PositiveNumber)->capture_default_str();
  cmd->add_option("--tokenizer", a.tokenizer, "tokenizer.json to ship (default: bytes only)");
  cmd->add_option("--threads", a.threads, "threads drawing the values")->check(CLI::PositiveNumber)->capture_default_str();
  cmd->add_flag("--force", a.force, "replace an existing model directory");
  cmd->callback([] { run(a); });
}

}  // namespace wren::tools
