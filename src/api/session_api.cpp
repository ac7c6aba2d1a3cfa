// The C API's sessions: making them, evaluation, logits, sampling (include/wren.h).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <type_traits>

#include "api/handles.h"

using namespace wren;
using namespace wren::api;

namespace wren::api {

SamplerParams checked_sampler(const wren_sampler_params& p) {
  WREN_REQUIRE(std::isfinite(p.temperature) && p.temperature >= 0, WREN_ERROR_ARGUMENT,
          "sampler: temperature " + std::to_string(p.temperature) + ": must be >= 0");
  WREN_REQUIRE(p.top_k >= 0, WREN_ERROR_ARGUMENT, "sampler: top_k " + std::to_string(p.top_k) + ": must be >= 0");
  WREN_REQUIRE(p.top_p > 0 && p.top_p <= 1, WREN_ERROR_ARGUMENT, "sampler: top_p " + std::to_string(p.top_p) + ": outside (0, 1]");
  WREN_REQUIRE(p.min_p >= 0 && p.min_p <= 1, WREN_ERROR_ARGUMENT, "sampler: min_p " + std::to_string(p.min_p) + ": outside [0, 1]");
  WREN_REQUIRE(std::isfinite(p.repeat_penalty) && p.repeat_penalty > 0, WREN_ERROR_ARGUMENT,
          "sampler: repeat_penalty " + std::to_string(p.repeat_penalty) + ": must be > 0");
  WREN_REQUIRE(p.repeat_last_n >= 0, WREN_ERROR_ARGUMENT,
          "sampler: repeat_last_n " + std::to_string(p.repeat_last_n) + ": must be >= 0");
  return {.temperature = p.temperature, .top_k = p.top_k, .top_p = p.top_p, .min_p = p.min_p,
          .repeat_penalty = p.repeat_penalty, .repeat_last_n = p.repeat_last_n, .seed = p.seed};
}

// The checks every evaluation makes before it runs anything.
void check_tokens(const wren_session& s, const int32_t* tokens, size_t n) {
  WREN_REQUIRE(tokens != nullptr, WREN_ERROR_ARGUMENT, "tokens: null pointer");
  WREN_REQUIRE(n > 0, WREN_ERROR_ARGUMENT, "tokens: none to evaluate");
  const int32_t vocab = s.session.model().config.vocab_size;
  for (size_t i = 0; i < n; ++i)
    WREN_REQUIRE(tokens[i] >= 0 && tokens[i] < vocab, WREN_ERROR_TOKEN,
            "tokens[" + std::to_string(i) + "] = " + std::to_string(tokens[i]) + ": outside the vocabulary 0.." +
                std::to_string(vocab - 1));
  const int64_t room = s.session.context() - s.session.position();
  WREN_REQUIRE(int64_t(n) <= room, WREN_ERROR_CONTEXT_FULL,
          std::to_string(n) + " tokens at position " + std::to_string(s.session.position()) + ": the context of " +
              std::to_string(s.session.context()) + " has room for " + std::to_string(room));
}

void check_logits_out(const wren_session& s, float* logits, size_t len) {
  WREN_REQUIRE(!logits || len >= s.logits.size(), WREN_ERROR_BUFFER_TOO_SMALL,
          "logits: needs " + std::to_string(s.logits.size()) + " floats, logits_len " + std::to_string(len));
}

void copy_logits(wren_session& s, float* logits) {
  s.has_logits = 1;
  if (logits) std::copy(s.logits.begin(), s.logits.end(), logits);
}

template <class T>
std::span<std::byte> value_bytes(T& v) {
  static_assert(std::is_trivially_copyable_v<T>);
  return std::as_writable_bytes(std::span<T, 1>(&v, 1));
}

// What the session holds beyond the engine's Session: its last logits and its sampler
// (settings and generator), so a restored session samples what the saved one would have.
std::vector<StateBuffer> api_state(wren_session& s) {
  return {{"api.logits", std::as_writable_bytes(std::span(s.logits))},
          {"api.has_logits", value_bytes(s.has_logits)},
          {"api.sampler_params", value_bytes(s.sampling)},
          {"api.sampler_generator", value_bytes(s.sampler.generator())}};
}

double seconds_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

}  // namespace wren::api

extern "C" {

wren_session_params wren_session_default_params(void) { return {.context = 0, .threads = 1}; }

wren_status wren_session_new(wren_model* model, const wren_session_params* params, wren_session** out) {
  return guarded([&] {
    *non_null(out, "session") = nullptr;
    wren_model& m = live(model);
    const wren_session_params p = params ? *params : wren_session_default_params();
    const int64_t most = m.model->config.context_length;
    WREN_REQUIRE(p.context >= 0 && p.context <= most, WREN_ERROR_ARGUMENT,
            "context " + std::to_string(p.context) + ": outside 1.." + std::to_string(most) + " (0: the model's)");
    WREN_REQUIRE(p.threads >= 1 && p.threads <= 1024, WREN_ERROR_ARGUMENT, "threads " + std::to_string(p.threads) + ": outside 1..1024");
    const SamplerParams sampling = checked_sampler(wren_sampler_default_params());
    auto s = std::unique_ptr<wren_session>(new wren_session{
        .owner = &m, .session = Session(m.model, {.context = p.context, .threads = p.threads}), .logits = {},
        .scratch = {}, .has_logits = 0, .sampling = sampling, .sampler = Sampler(sampling), .times = {},
        .threads = p.threads});
    s->logits.assign(size_t(s->session.vocab_rows()), 0.0f);
    s->scratch.reserve(s->logits.size());
    register_session(s.get());
    *out = s.release();
    return WREN_OK;
  });
}

wren_status wren_session_free(wren_session* session) {
  return guarded([&] {
    if (session) free_session(session);
    return WREN_OK;
  });
}

wren_status wren_session_get_info(const wren_session* session, wren_session_info* info) {
  return guarded([&] {
    const wren_session& s = live(session);
    *non_null(info, "info") = {.position = s.session.position(), .context = s.session.context(), .threads = s.threads,
                               .n_logits = int32_t(s.logits.size())};
    return WREN_OK;
  });
}

wren_status wren_session_prefill(wren_session* session, const int32_t* tokens, size_t n_tokens, int early_exit,
                                 float* logits, size_t logits_len) {
  return guarded([&] {
    wren_session& s = live(session);
    check_tokens(s, tokens, n_tokens);
    check_logits_out(s, logits, logits_len);
    const auto t0 = std::chrono::steady_clock::now();
    s.session.prefill(std::span<const int32_t>(tokens, n_tokens), s.logits.data(), early_exit != 0);
    s.times.prefill_s += seconds_since(t0);
    s.times.prompt_tokens += int64_t(n_tokens);
    copy_logits(s, logits);
    return WREN_OK;
  });
}

wren_status wren_session_decode(wren_session* session, int32_t token, float* logits, size_t logits_len) {
  return guarded([&] {
    wren_session& s = live(session);
    check_tokens(s, &token, 1);
    check_logits_out(s, logits, logits_len);
    const auto t0 = std::chrono::steady_clock::now();
    s.session.decode(token, s.logits.data());
    s.times.decode_s += seconds_since(t0);
    ++s.times.decode_steps;
    s.times.lm_head_bytes += s.session.last_lm_head().bytes;
    copy_logits(s, logits);
    return WREN_OK;
  });
}

wren_status wren_session_logits(const wren_session* session, const float** logits, size_t* n) {
  return guarded([&] {
    const wren_session& s = live(session);
    non_null(logits, "logits");
    non_null(n, "n");
    WREN_REQUIRE(s.has_logits, WREN_ERROR_NO_LOGITS, "session: no token evaluated since it was made (or since wren_generate)");
    *logits = s.logits.data();
    *n = s.logits.size();
    return WREN_OK;
  });
}

wren_status wren_session_history(const wren_session* session, const int32_t** tokens, size_t* n) {
  return guarded([&] {
    const wren_session& s = live(session);
    non_null(tokens, "tokens");
    non_null(n, "n");
    *tokens = s.session.history().data();
    *n = s.session.history().size();
    return WREN_OK;
  });
}

wren_sampler_params wren_sampler_default_params(void) {
  const SamplerParams d;
  return {.temperature = d.temperature, .top_k = d.top_k, .top_p = d.top_p, .min_p = d.min_p,
          .repeat_penalty = d.repeat_penalty, .repeat_last_n = d.repeat_last_n, .seed = d.seed};
}

wren_status wren_session_set_sampler(wren_session* session, const wren_sampler_params* params) {
  return guarded([&] {
    wren_session& s = live(session);
    s.sampling = checked_sampler(*non_null(params, "params"));
    s.sampler = Sampler(s.sampling);
    return WREN_OK;
  });
}

wren_status wren_session_sample(wren_session* session, int32_t* token) {
  return guarded([&] {
    wren_session& s = live(session);
    non_null(token, "token");
    WREN_REQUIRE(s.has_logits, WREN_ERROR_NO_LOGITS, "session: no logits to sample from (evaluate a token first)");
    s.scratch.assign(s.logits.begin(), s.logits.end());
    // As the generation loop: rows the tokenizer has no text for are never drawn.
    const int64_t texts = std::min<int64_t>(s.owner->tokenizer.vocab_size(), int64_t(s.scratch.size()));
    std::fill(s.scratch.begin() + texts, s.scratch.end(), -INFINITY);
    *token = s.sampler.sample(s.scratch, s.session.history());
    return WREN_OK;
  });
}

}  // extern "C"
