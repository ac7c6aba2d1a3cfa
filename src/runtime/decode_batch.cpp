#include "runtime/decode_batch.h"

#include <stdexcept>
#include <string>
#include <vector>

namespace wren {

void decode_batch(std::span<Session* const> sessions, std::span<const int32_t> tokens, std::span<float* const> logits) {
  if (sessions.size() != tokens.size() || sessions.size() != logits.size())
    throw std::invalid_argument("decode_batch: " + std::to_string(sessions.size()) + " sessions, " +
                                std::to_string(tokens.size()) + " tokens and " + std::to_string(logits.size()) +
                                " logit buffers (one each expected)");
  // The caller's rows and scratch, grown once to the largest batch.
  thread_local std::vector<BatchRow> rows;
  thread_local BatchScratch scratch;
  rows.clear();
  for (size_t i = 0; i < sessions.size(); ++i) {
    if (!sessions[i]) throw std::invalid_argument("decode_batch: session " + std::to_string(i) + " is null");
    for (size_t j = 0; j < i; ++j)
      if (sessions[j] == sessions[i])
        throw std::invalid_argument("decode_batch: session " + std::to_string(i) + " repeats session " + std::to_string(j));
    rows.push_back({sessions[i], tokens[i], logits[i], true});
  }
  forward_batch(rows, scratch);
}

}  // namespace wren
