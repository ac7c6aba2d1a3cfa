// config/: what a ModelConfig's schedule means for one forward pass, written once for the
// engine (model/, runtime/) and the trainer (train/), which both walk it:
//   - which mechanisms the consumers run at all (check_supported);
//   - which layers' K/V are mixed at a layer's attention point (bridges_at);
//   - which residual sources a sublayer mixes under attention residuals (NOTES.md 1):
//       h_i = sum_s alpha_s v_s over v = (e, g if i >= 1, B_0 .. B_{b-1}, P if not empty or FFN)
//     and the final read-out over (e, g, B_0 .. B_last), where e is the embedding, g the
//     residual-source engram, B_b the finished block sums and P the current block's partial sum;
//   - which engram hashers exist (Embla's residual source; one per layer for Nenya's gated add).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "config/engram_hash.h"
#include "config/model_config.h"

namespace wren {

// Throws std::runtime_error naming the model and the mechanism when `c` asks for something
// the consumer (`who`: "engine", "training reference") does not run yet.
void check_supported(const ModelConfig& c, const std::string& who);

// bridges_at(c)[i]: the layers whose K/V (or MLA latents) are computed at layer i's attention
// point from their own kv_bridge mix, in layer order.
std::vector<std::vector<int>> bridges_at(const ModelConfig& c);

// --- Attention residuals --------------------------------------------------------------

// Whether the residual-source engram g exists (Embla).
bool has_residual_engram(const ModelConfig& c);
// Blocks of attention residuals: L / block_size (0 for other residuals).
int residual_blocks(const ModelConfig& c);
// Layer i opens a new block: the partial sum P becomes block B_b and restarts at 0.
bool starts_block(const ModelConfig& c, int layer);

// Which of the sources (e, g, B_0 .., P) a mix reads: e always, then these.
struct ResidualSourceSet {
  bool engram = false;  // g
  int blocks = 0;       // B_0 .. B_{blocks-1}
  bool partial = false; // P
};
// The sources of layer `layer`'s attention (ffn == false; also its bridges) or FFN mix, with
// `finished` blocks done and the partial sum empty or not.
ResidualSourceSet sublayer_sources(const ModelConfig& c, int layer, bool ffn, int finished, bool partial_empty);
// The sources of the final read-out: e, g, and all `finished` blocks (the last partial sum
// already closed into the last block).
ResidualSourceSet final_sources(const ModelConfig& c, int finished);

// The sources in the order the mix weighs them: e, g, B_0 .., P. `block(b)` gives B_b.
template <class T, class Block>
void gather_sources(const ResidualSourceSet& s, const T& e, const T& g, Block&& block, const T& partial,
                    std::vector<T>& out) {
  out.clear();
  out.push_back(e);
  if (s.engram) out.push_back(g);
  for (int b = 0; b < s.blocks; ++b) out.push_back(block(b));
  if (s.partial) out.push_back(partial);
}

// --- Engram hashers -------------------------------------------------------------------

// Embla's residual-source engram hasher, when the config has one.
std::optional<EngramHasher> residual_engram_hasher(const ModelConfig& c);
// Nenya's gated engram before layer `layer`, when it is added there: each such layer has its
// own tables and hash multipliers (salted by the layer index).
std::optional<EngramHasher> layer_engram_hasher(const ModelConfig& c, int layer);

}  // namespace wren
