// runtime/: batched decode. Several sessions over one Model each take one more token in one
// forward pass (forward_batch, runtime/session.h): every FFN / MoE product reads its weights
// once for all of them; each session's sequence mixer runs on its own caches.
#pragma once

#include <cstdint>
#include <span>

#include "runtime/session.h"

namespace wren {

// One decode step for several sessions over one Model: the weights are read once for all.
// tokens[i] is session i's next token, logits[i] receives its logits ([vocab_rows()]; null:
// none wanted). A session may appear once. Throws std::invalid_argument for spans of
// different lengths, a repeated session or sessions over different models.
void decode_batch(std::span<Session* const> sessions, std::span<const int32_t> tokens, std::span<float* const> logits);

}  // namespace wren
