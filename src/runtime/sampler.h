// runtime/: choosing the next token from logits. The order of the transforms is llama.cpp's:
// repetition penalty -> top-k -> top-p -> min-p -> temperature -> draw; temperature 0 is greedy.
#pragma once

#include <cstdint>
#include <random>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace wren {

struct SamplerParams {
  float temperature = 0.8f;     // 0: greedy (argmax)
  int top_k = 40;               // 0: off
  float top_p = 0.95f;          // 1: off
  float min_p = 0.05f;          // 0: off; keep tokens with p >= min_p * p_max
  float repeat_penalty = 1.0f;  // 1: off; logits of recent tokens: l > 0 ? l / r : l * r
  int repeat_last_n = 64;       // how many recent tokens the penalty looks at
  uint64_t seed = 0;
};

class Sampler {
 public:
  explicit Sampler(const SamplerParams& p);
  // Draws a token id from `logits` (modified in place by the penalty). `recent` is the
  // sequence so far; only its last repeat_last_n tokens are penalised.
  int32_t sample(std::span<float> logits, std::span<const int32_t> recent);
  const SamplerParams& params() const { return p_; }
  // The random generator, for saving and restoring a session's state (runtime/session_state.h).
  std::mt19937_64& generator() { return rng_; }

 private:
  struct Candidate {
    int32_t id;
    float logit;
  };
  SamplerParams p_;
  std::mt19937_64 rng_;
  // Reused across calls: after the first, sample() allocates nothing.
  std::vector<Candidate> candidates_;
  std::vector<float> probs_;
  std::vector<int32_t> top_ids_;    // top-k's ids, best first (capacity top_k)
  std::vector<int32_t> penalised_;  // distinct recent ids (capacity repeat_last_n)
};

// Stop strings: text is streamed piece by piece; a stop string may straddle pieces, so text
// that could still be the start of a stop string is held back until it is decided. The
// buffers are reserved for the longest stop string plus a few pieces, so ordinary streaming
// allocates nothing per token.
class StopMatcher {
 public:
  explicit StopMatcher(std::vector<std::string> stops);
  // Appends a piece; returns the text that is now safe to emit (a view valid until the next
  // call). Sets stopped() when a stop string is complete (the stop string and what follows
  // it are never emitted).
  std::string_view push(std::string_view piece);
  std::string_view flush();  // end of generation: release what was held back
  bool stopped() const { return stopped_; }

 private:
  static constexpr size_t kPieceReserve = 256;
  std::vector<std::string> stops_;
  std::string pending_, out_;
  bool stopped_ = false;
};

}  // namespace wren
