#include "runtime/decode_batch.h"

#include <stdexcept>

namespace wren {

void decode_batch(std::span<Session* const> sessions, std::span<const int32_t> tokens, std::span<float* const> logits) {
  if (tokens.size() != sessions.size() || logits.size() != sessions.size())
    throw std::invalid_argument("decode_batch: " + std::to_string(sessions.size()) + " sessions, " +
                                std::to_string(tokens.size()) + " tokens, " + std::to_string(logits.size()) + " logits");
  for (size_t i = 0; i < sessions.size(); ++i) sessions[i]->decode(tokens[i], logits[i]);
}

}  // namespace wren
