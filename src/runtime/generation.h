// runtime/: the generation loop of `wren generate`: sample from the logits, stream the token
// as text (UTF-8 completed, stop strings held back), run it through the model, repeat. One
// step allocates nothing: the sampler, the stop matcher and the stream decoder reuse buffers
// reserved up front, and the session's were made with it (tested with a counting operator new).
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "model/lm_head.h"
#include "runtime/sampler.h"
#include "runtime/session.h"
#include "text/tokenizer.h"

namespace wren {

struct GenerationOptions {
  SamplerParams sampling = {};
  std::vector<std::string> stops = {};
  int max_tokens = 128;
  std::optional<int32_t> eos = std::nullopt;  // ends the generation when sampled
  std::vector<int32_t> end_tokens = {};        // more tokens that end it (a chat template's end of turn)
  bool ignore_eos = false;
};

// The LM head a sampler can use (model/lm_head.h): the pre-score keeps the exact top 1 for
// greedy and the exact top k for top-k sampling (top-p, min-p and temperature act inside
// it), so both draw from the exact head's distribution. Without top-k, or with a repetition
// penalty (which reorders logits after the head), the exact head.
LmHeadMode lm_head_for(const SamplerParams& p, bool prescore);

// NaN or +Inf in the first `rows` logits (-Inf is a masked row) means NaN / Inf weights or an
// overflow: std::runtime_error "<model>: non-finite logit ... at position P" instead of
// sampling garbage. One pass over the vocabulary, small beside the LM head that wrote it.
void check_finite_logits(std::span<const float> logits, int64_t rows, const ModelConfig& c, int64_t position);

// Time spent per kind of step. A decode step is one generated token run through the model
// (with its sampling and streaming); the last token, sampled but never run, is not one.
struct GenerationTimes {
  double prefill_s = 0, decode_s = 0;
  int64_t prompt_tokens = 0, decode_steps = 0;
  int generated = 0;  // tokens sampled and emitted
  double lm_head_bytes = 0, lm_head_rescored = 0;  // what the LM head read, summed over the decode steps
  double decode_tokens_per_s() const { return decode_steps ? double(decode_steps) / decode_s : 0; }
};

class Generation {
 public:
  // `session` is fresh or holds earlier turns; its context must hold the prompt and
  // max_tokens more.
  Generation(Session& session, const text::Tokenizer& tok, const GenerationOptions& o);

  // Runs the prompt; the first step samples from its last logits.
  void prefill(std::span<const int32_t> prompt, bool early_exit);
  // Samples one token, streams it and, unless it ends the generation, runs it. Returns the
  // text now safe to emit (a view valid until the next call).
  std::string_view step() {
    const std::string_view text = choose();
    if (!done_) advance();
    return text;
  }
  // step() in two halves, for a caller that runs several sessions' tokens together
  // (runtime/decode_batch.h): choose() samples and streams; unless done(), the chosen token
  // must then run, by advance() or by the caller into logits() followed by advanced(seconds).
  std::string_view choose();
  void advance();
  // The last token sampled and emitted (-1 before the first). The step that ends the
  // generation does not run it through the model: a caller continuing the sequence decodes it.
  int32_t chosen() const { return chosen_; }
  float* logits() { return logits_.data(); }
  void advanced(double seconds);
  bool done() const { return done_; }
  // Why it ended: max_tokens reached (OpenAI's "length"), else an end token or stop string.
  bool hit_length() const { return done_ && length_; }
  // It ended on eos or an end token: that token was sampled but not run, nor emitted.
  bool hit_end_token() const { return done_ && end_; }
  // The text held back at the end (incomplete UTF-8 as U+FFFD, a partial stop string).
  std::string finish();
  const GenerationTimes& times() const { return times_; }

 private:
  Session& session_;
  const text::Tokenizer& tok_;
  GenerationOptions o_;
  Sampler sampler_;
  StopMatcher stop_;
  text::StreamDecoder decoder_;
  std::vector<float> logits_;
  GenerationTimes times_;
  bool done_ = false, length_ = false, end_ = false;
  int32_t chosen_ = -1;
  double choose_s_ = 0;  // time of the last choose(), counted into its decode step
};

}  // namespace wren
