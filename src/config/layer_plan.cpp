#include "config/layer_plan.h"

#include <algorithm>
#include <stdexcept>

namespace wren {

void check_supported(const ModelConfig& c, const std::string& who) {
  for (auto& [name, f] : c.ffns)
    if (f.activation == Activation::swiglu_oai)
      throw std::runtime_error("model " + c.name + ": the " + who + " does not run swiglu_oai experts (ffns." + name +
                               ") yet");
}

std::vector<std::vector<int>> bridges_at(const ModelConfig& c) {
  std::vector<std::vector<int>> at(size_t(c.n_layers()));
  for (int i = 0; i < c.n_layers(); ++i)
    if (c.layers[size_t(i)].kv.kind == KvSourceKind::bridge) at[size_t(c.layers[size_t(i)].kv.layer)].push_back(i);
  return at;
}

bool has_residual_engram(const ModelConfig& c) {
  return c.engram && c.engram->placement == EngramPlacement::residual_source;
}

int residual_blocks(const ModelConfig& c) {
  return c.residual.kind == ResidualKind::attn_residuals ? c.n_layers() / c.residual.block_size : 0;
}

bool starts_block(const ModelConfig& c, int layer) {
  return c.residual.kind == ResidualKind::attn_residuals && layer > 0 && layer % c.residual.block_size == 0;
}

ResidualSourceSet sublayer_sources(const ModelConfig& c, int layer, bool ffn, int finished, bool partial_empty) {
  return {has_residual_engram(c) && layer >= 1, finished, !partial_empty || ffn};
}

ResidualSourceSet final_sources(const ModelConfig& c, int finished) { return {has_residual_engram(c), finished, false}; }

std::optional<EngramHasher> residual_engram_hasher(const ModelConfig& c) {
  if (!has_residual_engram(c)) return std::nullopt;
  return EngramHasher(*c.engram);
}

std::optional<EngramHasher> layer_engram_hasher(const ModelConfig& c, int layer) {
  if (!c.engram || c.engram->placement != EngramPlacement::gated_add) return std::nullopt;
  const std::vector<int>& at = c.engram->layers;
  if (std::find(at.begin(), at.end(), layer) == at.end()) return std::nullopt;
  return EngramHasher(*c.engram, uint64_t(layer));
}

}  // namespace wren
