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
  double kv = 0;       // K/V caches at the context the step sees, and the recurrent states
  double engram = 0;   // the engram rows the token's n-grams name
  double lm_head = 0;  // the whole head in its stored type (the pre-score's are measured:
                       // Session::last_lm_head)
  double total() const { return weights + kv + engram + lm_head; }
};

// cache_value_bytes: bytes a cache value is stored in, scales included (f32 4, f16 2, q8
// 1 + 2 / G: Session::cache_bytes_per_token(c, type) / its f32 figure x 4).
TokenBytes bytes_per_token(const Model& m, int64_t context_tokens, double firing_fraction = 1.0,
                           double cache_value_bytes = 4.0);

// Bytes of K/V caches and recurrent states one decode step reads at context n: the caches'
// values at cache_value_bytes each, the recurrent states whole in f32 (their storage in every
// cache type), as the explorer counts them (explore/cost_model.cpp).
double cache_bytes_per_token(const Model& m, int64_t n, double cache_value_bytes = 4.0);

}  // namespace wren
