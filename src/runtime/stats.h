// runtime/: what a decode step reads, from the model as it is stored (not an assumed
// precision): the roofline's numerator.
#pragma once

#include "model/model.h"

namespace wren {

// Bytes of weights one decode token reads at batch 1: every always-used tensor in its stored
// type, top_k / E of each expert stack, one embedding row and the engram rows; ReLU^2 down
// projections scaled by `firing_fraction` (dead_neuron_skip reads only fired rows).
double weight_bytes_per_token(const Model& m, double firing_fraction = 1.0);

// Bytes of K/V (f32 caches) one decode step reads at context n.
double cache_bytes_per_token(const Model& m, int64_t n);

}  // namespace wren
