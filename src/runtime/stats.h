// runtime/: what a decode step reads, from the model as it is stored (not an assumed
// precision): the roofline's numerator.
#pragma once

#include <cstdint>

#include "model/model.h"

namespace wren {

// Bytes one decode token reads at batch 1, by what they are.
struct TokenBytes {
  double weights = 0;  // every always-used tensor in its stored type, top_k / E of each
                       // expert stack, one embedding row; ReLU^2 down projections scaled by
                       // the firing fraction (dead_neuron_skip reads only fired rows)
  double kv = 0;       // K/V (f32 caches) at the context the step sees
  double engram = 0;   // the engram rows the token's n-grams name
  double lm_head = 0;  // the whole head in its stored type (the pre-score's are measured:
                       // Session::last_lm_head)
  double total() const { return weights + kv + engram + lm_head; }
};

TokenBytes bytes_per_token(const Model& m, int64_t context_tokens, double firing_fraction = 1.0);

// Bytes of K/V (f32 caches) one decode step reads at context n.
double cache_bytes_per_token(const Model& m, int64_t n);

}  // namespace wren
