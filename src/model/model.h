// model/: the immutable model. Holds the config, the schedule and every layer's weights as
// kernel views (into mapped files or owned memory) and small f32 vectors. One Model serves
// any number of Sessions (runtime/); nothing here changes per token.
#pragma once

#include <memory>
#include <optional>
#include <vector>

#include "config/engram_hash.h"
#include "config/model_config.h"
#include "config/weight_map.h"
#include "kernels/types.h"
#include "model/weights.h"

namespace wren {

using kernels::MatrixView;
using Vec = std::vector<float>;  // a small parameter in f32; empty when absent

inline bool present(const MatrixView& m) { return m.rows > 0; }

// Pseudo-query and scoring gain of one attention-residual mix (or KV bridge).
struct MixWeights {
  Vec query, norm;
};

struct AttentionWeights {  // attention, relu2_attention, sparse_reuse
  MatrixView wq, wk, wv, wg, wo;  // wk / wv absent without a cache of its own; wg with output_gate
  Vec bq, bk, bv, bo, q_norm, k_norm, sinks;
  std::vector<float> rope_inv_freq;  // window / RoPE layers
};

// One FFN (dense, the shared experts, or an expert stack viewed as [E * hidden, in]).
struct FfnWeights {
  MatrixView w_gate, w_up, w_down;
  Vec b_gate, b_up, b_down;
};

struct MoeWeights {
  MatrixView router;
  Vec router_bias, balance_bias;
  MatrixView latent_down, latent_up;
  FfnWeights experts, shared;
  MatrixView shared_gate;
};

struct LayerWeights {
  Vec attn_norm, ffn_norm, attn_post_norm, ffn_post_norm;
  MixWeights attn_res, ffn_res, kv_bridge;
  AttentionWeights attn;
  FfnWeights dense;
  MoeWeights moe;
};

struct Model {
  ModelConfig config;
  WeightMap map;
  int prefill_exit = 0;
  MatrixView embed, lm_head;
  Vec final_norm;
  MixWeights final_res;
  MatrixView engram_tables;              // Embla: [total rows, row_dim]
  std::optional<EngramHasher> engram;    // Embla: the residual-source engram
  std::vector<LayerWeights> layers;
  std::vector<std::vector<int>> bridges_at;  // bridges_at[i]: layers whose K/V is mixed at layer i's attention
  std::shared_ptr<const WeightSource> storage;  // keeps the views' memory alive
};

// Resolves every weight-map tensor of `c` from `source` (which the Model keeps alive).
// Throws when a mechanism the config names is not implemented by the engine yet.
std::shared_ptr<const Model> load_model(const ModelConfig& c, std::shared_ptr<const WeightSource> source);

}  // namespace wren
