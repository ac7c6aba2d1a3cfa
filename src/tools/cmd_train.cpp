// wren-train (run as `wren train`): train a model from a config on text files
// (train/trainer.h) and export an engine-ready model directory. Its own binary, built only
// with libtorch (WREN_TRAIN), so that `wren` never loads torch (tools/cmd_train_launch.cpp).
#include <CLI/CLI.hpp>

#include <map>
#include <string>

#include "tools/cli_main.h"
#include "train/trainer.h"

namespace wren::tools {
namespace {

void add_train_options(CLI::App* cmd) {
  static train::TrainOptions o;
  static std::string dtype = "q8";
  static double muon_lr = o.optim.muon.lr, adam_lr = o.optim.adamw_no_decay.lr;
  cmd->add_option("config", o.config, "preset name, config JSON file or model directory")->required();
  cmd->add_option("--data", o.data, "UTF-8 text files or folders")->required();
  cmd->add_option("--tokenizer", o.tokenizer, "tokenizer.json (make one with `wren tokenizer train`)")->required();
  cmd->add_option("-o,--output", o.output, "model directory to export at the end");
  cmd->add_option("--heldout", o.heldout_files, "files held out for validation (paths or names)");
  cmd->add_option("--heldout-every", o.heldout_every, "or hold out every k-th document");
  cmd->add_option("--checkpoint", o.checkpoint, "checkpoint directory (resumed from if it exists)");
  cmd->add_option("--seq-len", o.seq_len, "tokens per row")->check(CLI::PositiveNumber)->capture_default_str();
  cmd->add_option("--batch", o.batch, "rows per step")->check(CLI::PositiveNumber)->capture_default_str();
  cmd->add_option("--steps", o.steps, "optimizer steps")->check(CLI::PositiveNumber)->capture_default_str();
  cmd->add_option("--warmup", o.warmup, "warmup steps")->check(CLI::NonNegativeNumber)->capture_default_str();
  cmd->add_option("--decay-fraction", o.decay_fraction, "share of the steps in the final 1 - sqrt(t) decay")
      ->check(CLI::Range(0.0, 1.0))->capture_default_str();
  cmd->add_option("--muon-lr", muon_lr, "peak lr of the Muon groups")->capture_default_str();
  cmd->add_option("--adam-lr", adam_lr, "peak lr of the AdamW groups (engram tables 5x)")->capture_default_str();
  cmd->add_option("--balancing", o.balancing, "expert balancing: eqb (Exact Quantile Balancing) or quantile (Nenya's)")
      ->transform(CLI::CheckedTransformer(std::map<std::string, train::Balancing>{
          {"eqb", train::Balancing::eqb}, {"quantile", train::Balancing::quantile}}))
      ->capture_default_str();
  cmd->add_option("--clip", o.clip, "gradient norm clip")->capture_default_str();
  cmd->add_option("-t,--threads", o.threads, "threads")->check(CLI::PositiveNumber)->capture_default_str();
  cmd->add_option("--seed", o.seed, "seed of init and data order")->capture_default_str();
  cmd->add_option("--eval-every", o.eval_every, "steps between held-out evaluations")->capture_default_str();
  cmd->add_option("--eval-rows", o.eval_rows, "held-out rows per evaluation")->capture_default_str();
  cmd->add_option("--checkpoint-every", o.checkpoint_every, "steps between checkpoints")->capture_default_str();
  cmd->add_option("--dtype", dtype, "export storage of matrices: f32, bf16, q8, q4")->capture_default_str();
  cmd->callback([] {
    o.optim.muon.lr = o.optim.muon_batched.lr = muon_lr;
    o.optim.adamw_no_decay.lr = o.optim.adamw_decay.lr = o.optim.adamw_head.lr = adam_lr;
    o.optim.adamw_engram.lr = 5 * adam_lr;
    o.export_type = dtype == "f32" ? kernels::DType::f32 : dtype == "bf16" ? kernels::DType::bf16
                    : dtype == "q4" ? kernels::DType::q4 : kernels::DType::q8;
    if (dtype != "f32" && dtype != "bf16" && dtype != "q8" && dtype != "q4")
      throw std::runtime_error("--dtype: \"" + dtype + "\"; expected f32, bf16, q8 or q4");
    train::run_training(o);
  });
}

}  // namespace
}  // namespace wren::tools

int main(int argc, char** argv) {
  CLI::App app{"wren train: train a model on text files and export a model directory"};
  app.name("wren train");
  wren::tools::add_train_options(&app);
  return wren::tools::run_cli(app, argc, argv);
}
