// train/: the libtorch reference of the model, the spec in code and the oracle the engine is
// tested against. A train::Model holds every tensor of the weight map as a torch parameter
// (named exactly as in the weight map, same shape and layout, initialised by init_rows) and
// runs a batch of whole sequences at once, mirroring the engine's per-token walk
// (runtime/session.cpp) step for step:
//
//   e = scale E[x]; the stream x = e, mHC's n copies of e, or the attention-residual sources
//   (e, g = engram(n-grams ending here))
//   for each layer i:
//     Nenya engram before i: gated rows added into every stream
//     bridged layers j whose K/V are mixed at i's attention: K/V_j = kv(RMSNorm(mix_j(sources)))
//     attention input = the stream / mix_i(sources) / mHC read -> RMSNorm -> mixer -> written back
//     FFN input       = likewise                               -> RMSNorm -> FFN   -> written back
//   logits = W_head RMSNorm(the stream / mix_final(e, g, B_0..) / mHC read-out)
//
// Document masking (NOTES.md 4): an end-of-text token ends its document. A token attends only
// to tokens of its own document, its RoPE position counts from the document's start, and its
// n-grams take the pad id before the document's start, so each document of a packed row is
// computed exactly as if it were run alone from a fresh session. The same holds for Nenya's
// mechanisms: MLA attends within the document, the gated engram's n-grams and short conv stop
// at its start, and the Gated DeltaNet state and convs restart there.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "config/model_config.h"
#include "config/weight_map.h"
#include "train/attention.h"
#include "train/attn_residuals.h"
#include "train/engram.h"
#include "train/ffn.h"
#include "train/gated_deltanet.h"
#include "train/mamba2.h"
#include "train/short_conv.h"
#include "train/mhc.h"
#include "train/mla.h"

namespace wren::train {

// One weight-map tensor and the torch tensor holding it (a parameter, or a buffer for
// TensorRole::buffer such as the balancing bias).
struct Param {
  TensorInfo info;
  torch::Tensor tensor;
};

struct LayerParams {
  torch::Tensor attn_norm, ffn_norm, attn_post_norm, ffn_post_norm;
  MixParams attn_res, ffn_res, kv_bridge;  // attention residuals
  MhcParams attn_mhc, ffn_mhc;             // mHC boundaries
  EngramGateParams engram;                 // Nenya's engram added before this layer (hasher set)
  AttentionParams attn;                    // the mixer: one of attn, mla, gdn, short_conv, mamba2
  MlaParams mla;
  GdnParams gdn;
  ShortConvParams short_conv;
  Mamba2Params mamba2;
  FfnParams dense;
  MoeParams moe;
};

class Model : public torch::nn::Module {
 public:
  // Every tensor drawn by init_rows(c, t, seed, ...), as `wren init --seed seed` draws it.
  // `eot`: the end-of-text token id that ends a document; -1 for none. Throws for mechanisms
  // the reference does not implement (swiglu_oai, which the engine does not run either).
  Model(const ModelConfig& c, uint64_t seed, int32_t eot = -1);
  Model(const Model&) = delete;
  Model& operator=(const Model&) = delete;

  // tokens [B, T] (int64, ids < c.rows()) -> logits [B, T, c.rows()] (f32; padding rows -inf).
  torch::Tensor forward(const torch::Tensor& tokens);

  const ModelConfig& config() const { return config_; }
  const WeightMap& weight_map() const { return map_; }
  int32_t eot() const { return eot_; }
  // Every weight-map tensor, in weight-map order.
  const std::vector<Param>& params() const { return params_; }
  // A weight-map tensor by name; throws std::out_of_range for a name not in the map.
  const torch::Tensor& tensor(const std::string& name) const;
  // The routing of every MoE layer in the last forward, in layer order.
  const std::vector<Routing>& routing() const { return routing_; }

 private:
  void add_tensor(const TensorInfo& t, uint64_t seed);
  void bind_slots();

  ModelConfig config_;
  WeightMap map_;
  int32_t eot_ = -1;
  std::vector<Param> params_;
  std::map<std::string, size_t> index_;  // weight-map name -> params_ slot
  torch::Tensor embed_, lm_head_, final_norm_;
  MixParams final_res_;
  MhcParams final_mhc_;
  torch::Tensor engram_tables_;
  std::optional<EngramHasher> engram_;
  std::vector<LayerParams> layers_;
  std::vector<std::vector<int>> bridges_at_;  // bridges_at_[i]: layers whose K/V is mixed at i's attention
  std::vector<Routing> routing_;
};

}  // namespace wren::train
