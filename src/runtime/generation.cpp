#include "runtime/generation.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <stdexcept>

namespace wren {

namespace {
double seconds_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}
}  // namespace

LmHeadMode lm_head_for(const SamplerParams& p, bool prescore) {
  if (!prescore || p.repeat_penalty != 1.0f) return {.prescore = false};
  if (p.temperature <= 0.0f) return {.prescore = true, .keep = 1};
  if (p.top_k > 0) return {.prescore = true, .keep = p.top_k};
  return {.prescore = false};
}

void check_finite_logits(std::span<const float> logits, int64_t rows, const ModelConfig& c, int64_t position) {
  const int64_t n = std::min<int64_t>(rows, int64_t(logits.size()));
  for (int64_t v = 0; v < n; ++v) {
    const float x = logits[size_t(v)];
    if (std::isnan(x) || x == INFINITY)
      throw std::runtime_error((c.name.empty() ? std::string("model") : "model " + c.name) + ": logit of token " +
                               std::to_string(v) + " is " + (std::isnan(x) ? "NaN" : "+Inf") + " at position " +
                               std::to_string(position) + " (NaN or Inf in the weights, or an overflow)");
  }
}

Generation::Generation(Session& session, const text::Tokenizer& tok, const GenerationOptions& o)
    : session_(session), tok_(tok), o_(o), sampler_(o.sampling), stop_(o.stops), decoder_(tok, true),
      logits_(size_t(session.vocab_rows())) {}

void Generation::prefill(std::span<const int32_t> prompt, bool early_exit) {
  if (session_.position() + int64_t(prompt.size()) + o_.max_tokens > session_.context())
    throw std::runtime_error("prompt (" + std::to_string(prompt.size()) + " tokens) + " + std::to_string(o_.max_tokens) +
                             " new tokens exceed the context of " + std::to_string(session_.context()));
  const auto t0 = std::chrono::steady_clock::now();
  session_.prefill(prompt, logits_.data(), early_exit);
  times_.prefill_s += seconds_since(t0);
  times_.prompt_tokens += int64_t(prompt.size());
  done_ = o_.max_tokens == 0;
}

std::string_view Generation::choose() {
  if (done_) return {};
  const auto t0 = std::chrono::steady_clock::now();
  // Rows the tokenizer has no text for (a model vocabulary padded past it) are never sampled.
  std::fill(logits_.begin() + std::min<int64_t>(tok_.vocab_size(), int64_t(logits_.size())), logits_.end(), -INFINITY);
  check_finite_logits(logits_, tok_.vocab_size(), session_.model().config, session_.position());
  const int32_t next = sampler_.sample(logits_, session_.history());
  const bool end = (o_.eos && next == *o_.eos) ||
                   std::find(o_.end_tokens.begin(), o_.end_tokens.end(), next) != o_.end_tokens.end();
  if (!o_.ignore_eos && end) {
    done_ = end_ = true;
    return {};
  }
  ++times_.generated;
  chosen_ = next;
  const std::string_view text = stop_.push(decoder_.push(next));
  length_ = !stop_.stopped() && times_.generated >= o_.max_tokens;
  done_ = stop_.stopped() || length_;
  choose_s_ = seconds_since(t0);
  return text;
}

void Generation::advance() {
  const auto t0 = std::chrono::steady_clock::now();
  session_.decode(chosen_, logits_.data());
  advanced(seconds_since(t0));
}

void Generation::advanced(double seconds) {
  times_.decode_s += choose_s_ + seconds;
  ++times_.decode_steps;
  times_.lm_head_bytes += session_.last_lm_head().bytes;
  times_.lm_head_rescored += double(session_.last_lm_head().rescored);
}

std::string Generation::finish() {
  done_ = true;
  std::string out(stop_.push(decoder_.finish()));
  out += stop_.flush();
  return out;
}

}  // namespace wren
