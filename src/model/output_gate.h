// model/: the output gate of a batch's attention heads, shared by the softmax / ReLU^2 /
// sparse layers (attention_batch_output) and MLA (mla_batch_output).
#pragma once

#include <cstdint>

namespace wren {

// o_t *= sigmoid(gate_t) for n rows of `width` values each (gate is overwritten).
void gate_rows(float* o, float* gate, int64_t width, int64_t n);

}  // namespace wren
