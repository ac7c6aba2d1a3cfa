// runtime/: the statistics of a SparsityProbe after a run (wren sparsity): per layer and over
// the model, as JSON and as a text table.
//   zero weights   % of (query, head, key) triples of relu2_attention layers with w = 0
//   V-skip         % of keys in all-zero groups of skip_group keys, per query head / KV head
//   dead neurons   % of ReLU^2 neurons that never fired over the text (dense, routed experts
//                  pooled, shared experts); fired per token: % of neurons that fire per token
//   load           busiest and least-used expert's share of tokens / the fair share top_k / E
#pragma once

#include <nlohmann/json.hpp>

#include <string>

#include "config/model_config.h"
#include "model/sparsity_probe.h"

namespace wren {

struct SparsityReport {
  nlohmann::ordered_json json;  // {"layers": [...], "totals": {...}}
  std::string table;            // one line per layer, then "all"
};

SparsityReport summarise_sparsity(const ModelConfig& c, const SparsityProbe& probe);

}  // namespace wren
