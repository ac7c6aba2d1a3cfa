// runtime/: one decode step for several sessions over one Model, the server's step
// (serve/scheduler.h). Each session runs its own token and writes its own logits; the
// sessions share nothing but the model, so the result of each is what Session::decode gives.
#pragma once

#include <cstdint>
#include <span>

#include "runtime/session.h"

namespace wren {

// One decode step for several sessions over one Model: the weights are read once for all.
// sessions[i] runs tokens[i] and writes logits[i] ([vocab_rows()]). The spans have one length.
// This version is a plain loop over Session::decode (the weights are read once per session);
// the batched forward replaces it with the same contract.
void decode_batch(std::span<Session* const> sessions, std::span<const int32_t> tokens, std::span<float* const> logits);

}  // namespace wren
