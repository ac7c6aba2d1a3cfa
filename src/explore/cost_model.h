// explore/: the cost model (seeds 003/004, the Kolibri explorer, extended to every Wren
// mechanism; NOTES.md section 3). Pure functions of a ModelConfig and its WeightMap:
// parameters, FLOPs, sequence-mixer state and bytes read per decode token. Knows nothing
// of kernels or of how the engine runs.
#pragma once

#include <array>
#include <map>
#include <string>
#include <vector>

#include "config/model_config.h"
#include "config/weight_map.h"

namespace wren::explore {

// ---- Parameters -------------------------------------------------------------------

struct ParamCounts {
  std::array<int64_t, kComponents> total{};   // stored parameters by component
  std::array<double, kComponents> active{};   // multiplied per token (routed: x top_k/E; lookups: 0)
  std::map<MixerKind, int64_t> mixer_total;   // sequence-mixer projections by kind
  int64_t total_all = 0;
  // The competing "active parameters" conventions, each named (NOTES.md sections 2-3):
  double active_incl_embedding = 0;  // stored minus engram tables minus unused routed experts (Nenya A11)
  double active_excl_embedding = 0;  // weights a token multiplies: input embedding (a lookup) left out
  double active_excl_head = 0;       // ... and the LM head left out too ("non-embedding")
  int64_t lookup_values = 0;         // values a token looks up (embedding row + engram rows)
};
ParamCounts count_params(const ModelConfig& c, const WeightMap& w);

// ---- FLOPs ---------------------------------------------------------------------------

enum class Phase { training, prefill, decode };

// FLOPs for one token at context length n. Training counts forward + both backward
// products (x3, seeds 003/004); prefill and decode are forward only. Training and prefill
// average over the causal positions of an n-token sequence (n/2 keys per full layer);
// decode is the token at position n. Prefill skips what early exit skips (NOTES.md 1).
struct Flops {
  double params = 0;                       // 2 x active matrix weights (x3 in training)
  std::map<MixerKind, double> attention;   // score and value products, by mixer kind
  double mixing = 0;                       // attention-residual / mHC mixes (their non-matrix part)
  double total() const;
};
Flops flops_per_token(const ModelConfig& c, const WeightMap& w, double n, Phase phase);

// ---- Sequence-mixer state ------------------------------------------------------------

// Elements stored per sequence, and read per decode step, at context n, by mixer kind.
// Attention caches are KV-precision values; recurrent states and convolution tails f32.
struct State {
  std::map<MixerKind, double> stored;  // elements held per sequence
  std::map<MixerKind, double> read;    // elements read by one decode step
  double recurrent_stored = 0;         // the part of `stored` that is recurrent (f32)
  double stored_total() const;
  double read_total() const;
};
State state(const ModelConfig& c, double n, double v_read_fraction = 1.0);

// ---- Bytes read per decode token --------------------------------------------------------

// A storage precision in bytes per value: "f32", "bf16", "int8" and "int4" (each with one
// bf16 scale per group of `group` values: 8-bit is 1 + 2/group bytes).
struct Precision {
  std::string name = "bf16";
  double bytes = 2.0;
};
Precision parse_precision(const std::string& text);  // "int8", "int4:g64", "bf16", "f32"

struct DecodeKnobs {
  Precision weights{"bf16", 2.0};
  Precision head{"bf16", 2.0};         // LM head (seed 002 scores it at 4-bit)
  Precision kv{"bf16", 2.0};
  Precision engram{"bf16", 2.0};
  double firing_fraction = 1.0;        // ReLU^2 neurons that fire (dead_neuron_skip reads only these rows)
  double v_read_fraction = 1.0;        // ReLU^2 attention: fraction of V rows read (V-skip)
  bool engram_from_storage = false;    // engram rows come from storage, not memory
  double bandwidth_gbs = 50.0;         // memory bandwidth for the tokens/s ceiling
};

struct DecodeBytes {
  std::array<double, kComponents> weights{};  // by component
  double state = 0;                            // sequence-mixer state read
  double storage = 0;                          // bytes read from storage (engram rows), not memory
  double memory_total() const;                 // what the memory bandwidth must carry
  double tokens_per_second(double bandwidth_gbs) const;
};
DecodeBytes decode_bytes(const ModelConfig& c, const WeightMap& w, double n, const DecodeKnobs& k);

// The KV cache growth per token of the caches that grow with context, in bytes.
double cache_bytes_per_token(const ModelConfig& c, const Precision& kv);

}  // namespace wren::explore
