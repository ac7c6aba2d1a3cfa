// The C API's streaming generation, counters and session state (include/wren.h).
#include <algorithm>
#include <cstring>
#include <filesystem>

#include "api/handles.h"
#include "runtime/session_state.h"
#include "runtime/stats.h"

using namespace wren;
using namespace wren::api;

namespace {

GenerationOptions generation_options(const wren_model& m, const wren_generate_params& p) {
  WREN_REQUIRE(p.max_tokens >= 0, WREN_ERROR_ARGUMENT, "max_tokens " + std::to_string(p.max_tokens) + ": negative");
  WREN_REQUIRE(p.stops != nullptr || p.n_stops == 0, WREN_ERROR_ARGUMENT, "stops: null pointer with n_stops " + std::to_string(p.n_stops));
  GenerationOptions o{.sampling = checked_sampler(p.sampler), .max_tokens = p.max_tokens, .eos = m.eos,
                      .ignore_eos = p.ignore_eos != 0};
  for (size_t i = 0; i < p.n_stops; ++i) {
    WREN_REQUIRE(p.stops[i] != nullptr, WREN_ERROR_ARGUMENT, "stops[" + std::to_string(i) + "]: null pointer");
    o.stops.emplace_back(p.stops[i]);
  }
  return o;
}

void add_times(GenerationTimes& sum, const GenerationTimes& t) {
  sum.prefill_s += t.prefill_s, sum.decode_s += t.decode_s;
  sum.prompt_tokens += t.prompt_tokens, sum.decode_steps += t.decode_steps;
  sum.generated += t.generated;
  sum.lm_head_bytes += t.lm_head_bytes, sum.lm_head_rescored += t.lm_head_rescored;
}

// A restore through `run` (given the wren_session's own buffers): a refused state is
// WREN_ERROR_STATE and changes nothing; an accepted one also brings the sampler's settings,
// so the sampler is remade from them around the restored generator.
template <class F>
wren_status restore(wren_session& s, F&& run) {
  try {
    run(api_state(s));
  } catch (const std::runtime_error& e) {
    throw Failure(WREN_ERROR_STATE, e.what());
  }
  const std::mt19937_64 generator = s.sampler.generator();
  s.sampler = Sampler(s.sampling);
  s.sampler.generator() = generator;
  return WREN_OK;
}

}  // namespace

extern "C" {

wren_generate_params wren_generate_default_params(void) {
  return {.sampler = wren_sampler_default_params(), .max_tokens = 128, .stops = nullptr, .n_stops = 0,
          .ignore_eos = 0, .early_exit = 1};
}

wren_status wren_generate(wren_session* session, const char* prompt, size_t prompt_len,
                          const wren_generate_params* params, wren_stream_callback callback, void* user,
                          wren_generate_result* result) {
  return guarded([&] {
    wren_session& s = live(session);
    const wren_model& m = *s.owner;
    WREN_REQUIRE(prompt != nullptr || prompt_len == 0, WREN_ERROR_ARGUMENT, "prompt: null pointer");
    const GenerationOptions o = generation_options(m, *non_null(params, "params"));
    std::vector<int32_t> tokens = m.tokenizer.encode(std::string_view(prompt ? prompt : "", prompt_len));
    if (tokens.empty()) tokens.push_back(m.eos.value_or(0));  // an empty prompt starts a document
    check_tokens(s, tokens.data(), tokens.size());
    const int64_t room = s.session.context() - s.session.position();
    WREN_REQUIRE(int64_t(tokens.size()) + o.max_tokens <= room, WREN_ERROR_CONTEXT_FULL,
            "prompt (" + std::to_string(tokens.size()) + " tokens) + max_tokens " + std::to_string(o.max_tokens) +
                " at position " + std::to_string(s.session.position()) + ": the context of " +
                std::to_string(s.session.context()) + " has room for " + std::to_string(room));
    Generation gen(s.session, m.tokenizer, o);
    s.has_logits = 0;  // the generation's logits are its own; the session's are stale from here
    const int64_t start = s.session.position() + int64_t(tokens.size());
    gen.prefill(tokens, params->early_exit != 0);
    auto emit = [&](std::string_view text) {
      return !text.empty() && callback && callback(text.data(), text.size(), user) != 0;
    };
    bool stopped = false;
    while (!gen.done() && !stopped) stopped = emit(gen.step());
    if (!stopped) stopped = emit(gen.finish());
    add_times(s.times, gen.times());
    // Every emitted token but one that ended the generation was run: the generation stopped
    // at a token it did not run (the limit or a stop string) exactly when one is missing.
    const int generated = gen.times().generated;
    const bool pending = generated > 0 && s.session.position() < start + generated;
    wren_stop_reason reason = WREN_STOP_MAX_TOKENS;
    if (stopped) reason = WREN_STOP_CALLBACK;
    else if (generated < o.max_tokens) reason = pending ? WREN_STOP_STRING : WREN_STOP_EOS;
    if (result)
      *result = {.generated = generated, .stop_reason = reason, .pending_token = pending ? gen.chosen() : -1};
    return WREN_OK;
  });
}

wren_status wren_session_get_stats(const wren_session* session, wren_stats* stats) {
  return guarded([&] {
    const wren_session& s = live(session);
    non_null(stats, "stats");
    const Model& model = s.session.model();
    const TokenBytes b = bytes_per_token(model, s.session.position());
    const GenerationTimes& t = s.times;
    // As `wren generate --stats`: the LM head as the decode steps read it, when there were any.
    const double head = t.decode_steps ? t.lm_head_bytes / double(t.decode_steps) : b.lm_head;
    *stats = {.prompt_tokens = t.prompt_tokens, .prefill_seconds = t.prefill_s, .decode_steps = t.decode_steps,
              .decode_seconds = t.decode_s, .decode_tokens_per_second = t.decode_tokens_per_s(),
              .generated = t.generated, .position = s.session.position(), .prefill_exit_layer = model.prefill_exit,
              .n_layers = model.config.n_layers(), .weight_bytes_per_token = b.weights,
              .engram_bytes_per_token = b.engram, .lm_head_bytes_per_token = head, .cache_bytes_read_per_token = b.kv,
              .state_bytes_per_token = s.session.cache_bytes_per_token(),
              .fixed_state_bytes = s.session.fixed_state_bytes()};
    return WREN_OK;
  });
}

wren_status wren_session_state_size(wren_session* session, size_t* bytes) {
  return guarded([&] {
    wren_session& s = live(session);
    *non_null(bytes, "bytes") = save_session_state(s.session, api_state(s)).size();
    return WREN_OK;
  });
}

wren_status wren_session_save_state(wren_session* session, void* buffer, size_t capacity, size_t* written) {
  return guarded([&] {
    wren_session& s = live(session);
    non_null(written, "written");
    const std::vector<std::byte> state = save_session_state(s.session, api_state(s));
    *written = state.size();
    WREN_REQUIRE(state.size() <= capacity, WREN_ERROR_BUFFER_TOO_SMALL,
            "buffer: the state needs " + std::to_string(state.size()) + " bytes, capacity " + std::to_string(capacity));
    std::memcpy(non_null(buffer, "buffer"), state.data(), state.size());
    return WREN_OK;
  });
}

wren_status wren_session_restore_state(wren_session* session, const void* buffer, size_t size) {
  return guarded([&] {
    wren_session& s = live(session);
    const auto* data = static_cast<const std::byte*>(non_null(buffer, "buffer"));
    return restore(s, [&](std::span<const StateBuffer> extra) { restore_session_state(s.session, {data, size}, extra); });
  });
}

wren_status wren_session_save_file(wren_session* session, const char* path) {
  return guarded([&] {
    wren_session& s = live(session);
    non_null(path, "path");
    try {
      save_session_state_file(s.session, path, api_state(s));
    } catch (const std::runtime_error& e) {
      throw Failure(WREN_ERROR_IO, e.what());
    }
    return WREN_OK;
  });
}

wren_status wren_session_restore_file(wren_session* session, const char* path) {
  return guarded([&] {
    wren_session& s = live(session);
    WREN_REQUIRE(std::filesystem::is_regular_file(non_null(path, "path")), WREN_ERROR_IO, std::string(path) + ": not a file");
    return restore(s, [&](std::span<const StateBuffer> extra) { restore_session_state_file(s.session, path, extra); });
  });
}

}  // extern "C"
