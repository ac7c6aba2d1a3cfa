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
#include "model/attention.h"
#include "model/attn_residuals.h"
#include "model/engram_gate.h"
#include "model/ffn.h"
#include "model/gated_deltanet.h"
#include "model/lm_head.h"
#include "model/mhc.h"
#include "model/mla.h"
#include "model/mamba2.h"
#include "model/short_conv.h"
#include "model/tensor.h"
#include "model/weights.h"

namespace wren {





struct LayerWeights {
  Vec attn_norm, ffn_norm, attn_post_norm, ffn_post_norm;
  MixWeights attn_res, ffn_res, kv_bridge;  // attention residuals
  MhcWeights attn_mhc, ffn_mhc;             // mHC boundaries
  EngramGateWeights engram;                 // Nenya engram added before this layer
  std::optional<EngramHasher> engram_hasher;
  AttentionWeights attn;                    // the mixer: one of these by its kind
  MlaWeights mla;
  GdnWeights gdn;
  ShortConvWeights short_conv;
  Mamba2Weights mamba2;
  FfnWeights dense;
  MoeWeights moe;
};

struct Model {
  ModelConfig config;
  WeightMap map;
  int prefill_exit = 0;
  MatrixView embed, lm_head;
  std::shared_ptr<const LmHeadPrescore> lm_head_prescore;  // its 4-bit copy (model/lm_head.h), or null
  Vec final_norm;
  MixWeights final_res;
  MhcWeights final_mhc;
  MatrixView engram_tables;              // Embla: [total rows, row_dim]
  std::optional<EngramHasher> engram;    // Embla: the residual-source engram
  std::vector<LayerWeights> layers;
  std::vector<std::vector<int>> bridges_at;  // bridges_at[i]: layers whose K/V is mixed at layer i's attention
  std::shared_ptr<const WeightSource> storage;  // keeps the views' memory alive
  std::shared_ptr<const PackedWeights> packed;  // the matrices' decode-order copies (model/weights.h)
};

// Resolves every weight-map tensor of `c` from `source` (which the Model keeps alive).
// Throws when a mechanism the config names is not implemented by the engine yet.
std::shared_ptr<const Model> load_model(const ModelConfig& c, std::shared_ptr<const WeightSource> source);

}  // namespace wren
