// tools/: the sampling options every generating command takes (runtime/sampler.h).
#pragma once

#include <CLI/CLI.hpp>

#include "runtime/sampler.h"

namespace wren::tools {

inline void add_sampling_options(CLI::App* cmd, SamplerParams& sp) {
  cmd->add_option("--temp", sp.temperature, "temperature (0: greedy)")->check(CLI::NonNegativeNumber)->capture_default_str();
  cmd->add_option("--top-k", sp.top_k, "keep the k most likely tokens (0: off)")->check(CLI::NonNegativeNumber)->capture_default_str();
  cmd->add_option("--top-p", sp.top_p, "nucleus sampling (1: off)")->check(CLI::Range(0.0, 1.0))->capture_default_str();
  cmd->add_option("--min-p", sp.min_p, "drop tokens below min-p x the top probability")->check(CLI::Range(0.0, 1.0))->capture_default_str();
  cmd->add_option("--repeat-penalty", sp.repeat_penalty, "penalise recent tokens (1: off)")->check(CLI::PositiveNumber)->capture_default_str();
  cmd->add_option("--repeat-last-n", sp.repeat_last_n, "how many recent tokens")->check(CLI::NonNegativeNumber)->capture_default_str();
  cmd->add_option("--seed", sp.seed, "sampling seed")->capture_default_str();
}

}  // namespace wren::tools
