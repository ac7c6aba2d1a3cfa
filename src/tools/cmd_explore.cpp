// wren explore: the cost model for presets, config files and Hugging Face config.json files.
#include <CLI/CLI.hpp>

#include <cstdio>

#include "config/parse.h"
#include "config/weight_map.h"
#include "explore/cost_model.h"
#include "tools/commands.h"

namespace wren::tools {

void register_explore(CLI::App& app) {
  auto* cmd = app.add_subcommand("explore", "parameters, FLOPs, state and bytes per token of model configs");
  static std::vector<std::string> models;
  cmd->add_option("models", models, "preset names, config JSON files or model directories")->required();
  cmd->callback([] {
    for (auto& m : models) {
      ModelConfig c = resolve_model_config(m);
      WeightMap w = build_weight_map(c);
      auto p = explore::count_params(c, w);
      std::printf("%s total %lld active_incl_emb %.0f active %.0f excl_head %.0f\n", c.name.c_str(),
                  (long long)p.total_all, p.active_incl_embedding, p.active_excl_embedding, p.active_excl_head);
      for (int k = 0; k < kComponents; ++k)
        std::printf("  %-16s %14lld %14.0f\n", to_string(Component(k)), (long long)p.total[k], p.active[k]);
    }
  });
}

}  // namespace wren::tools
