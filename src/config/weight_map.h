// config/: the weight map, one function from a ModelConfig to the list of its named tensors.
// The explorer counts parameters from it, the engine loads by it, the trainer exports by it.
// The naming convention is documented in docs/weights.md; in short:
//
//   embed, lm_head, final_norm, final_res.*, final_mhc.*     model-level
//   engram.tables                                            Embla engram (own file)
//   layers.{i}.attn_norm / ffn_norm (+ _post_norm)           norms
//   layers.{i}.attn_res.* / ffn_res.* / kv_bridge.*          attention residual mixes
//   layers.{i}.attn_mhc.* / ffn_mhc.*                        mHC boundaries
//   layers.{i}.engram.*                                      Nenya engram (tables in own file)
//   layers.{i}.attn.*                                        the sequence mixer
//   layers.{i}.ffn.*                                         dense FFN or MoE (experts stacked [E, ...])
//
// Matrices are [out, in] (y = W x) except those marked neuron_rows: a ReLU^2 down
// projection stored [hidden, out], one contiguous row per hidden neuron, so that the rows
// of neurons that did not fire are never read (dead_neuron_skip).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "config/model_config.h"

namespace wren {

enum class TensorRole { matrix, norm, vector, conv, lookup, buffer };
enum class Component {
  embedding, lm_head, mixer, dense_ffn, routed_experts, shared_experts, latent_proj, router, norms,
  residual_mixing, engram_tables, engram_proj,
};
constexpr int kComponents = 12;

// How much of a tensor one token touches.
enum class Activity {
  always,  // every token reads all of it
  routed,  // expert stacks: top_k of n_experts slices
  lookup,  // tables: a few rows per token
  never,   // buffers used only at training time (balancing bias is read, but is tiny)
};

struct TensorInfo {
  std::string name;
  std::vector<int64_t> shape;
  TensorRole role = TensorRole::matrix;
  Component component = Component::mixer;
  Activity activity = Activity::always;
  int layer = -1;               // -1: not part of one layer
  double active_fraction = 1;   // routed: top_k / n_experts
  int64_t lookup_rows = 0;      // lookup: rows read per token
  bool neuron_rows = false;     // ReLU^2 down projection stored one row per hidden neuron
  bool engram_file = false;     // stored in the engram table file, read by row
  int64_t numel() const;
};

struct WeightMap {
  std::vector<TensorInfo> tensors;
  const TensorInfo* find(const std::string& name) const;
};

WeightMap build_weight_map(const ModelConfig& c);

const char* to_string(Component);
const char* to_string(TensorRole);

}  // namespace wren
