// api/: what the C API's opaque handles hold, the set of live handles, and the one guard
// every entry point runs its body in: C++ exceptions stop there and become a wren_status
// and the thread's message (include/wren.h), so none crosses into C.
#pragma once

#include <atomic>
#include <chrono>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "model/model.h"
#include "runtime/generation.h"
#include "runtime/sampler.h"
#include "runtime/session.h"
#include "text/tokenizer.h"
#include "wren.h"

struct wren_model {
  wren_model(std::string d, std::shared_ptr<const wren::Model> m, wren::text::Tokenizer t)
      : dir(std::move(d)), model(std::move(m)), tokenizer(std::move(t)), eos(tokenizer.token_id("<|endoftext|>")) {}
  std::string dir;
  std::shared_ptr<const wren::Model> model;
  wren::text::Tokenizer tokenizer;
  std::optional<int32_t> eos;
  std::atomic<int> sessions{0};  // live sessions over it; changed under the registry's lock
};

struct wren_session {
  wren_model* owner;
  wren::Session session;
  std::vector<float> logits;  // the last evaluated token's
  std::vector<float> scratch;  // the sampler's copy (it changes the logits it reads)
  uint8_t has_logits = 0;
  wren::SamplerParams sampling;
  wren::Sampler sampler;
  wren::GenerationTimes times;  // summed over every evaluation of the session
  int threads;
};

namespace wren::api {

// A failure with the status the caller sees.
struct Failure : std::runtime_error {
  wren_status status;
  Failure(wren_status s, const std::string& message) : std::runtime_error(message), status(s) {}
};

// Fails with `status` and `message` unless `ok`; the message is built only on failure (the
// checks run on every call, a decode's included).
#define WREN_REQUIRE(ok, status, message)                                  \
  do {                                                                     \
    if (!(ok)) throw ::wren::api::Failure(status, message);                \
  } while (0)

// "<name>: null pointer" (out of line: the message is built only when it is thrown).
[[noreturn]] void null_pointer(const char* name);

void set_error(const char* message);

// Runs `body` (returning a wren_status) with the thread's message cleared first; turns a
// Failure into its status, std::bad_alloc into WREN_ERROR_OUT_OF_MEMORY and any other
// exception into WREN_ERROR_INTERNAL, each with its message.
template <class F>
wren_status guarded(F&& body) noexcept {
  set_error("");
  try {
    return body();
  } catch (const Failure& e) {
    set_error(e.what());
    return e.status;
  } catch (const std::bad_alloc&) {
    set_error("out of memory");
    return WREN_ERROR_OUT_OF_MEMORY;
  } catch (const std::exception& e) {
    set_error(e.what());
    return WREN_ERROR_INTERNAL;
  } catch (...) {
    set_error("an unknown C++ exception");
    return WREN_ERROR_INTERNAL;
  }
}

// The live handles. A handle is checked against the set before it is read, so a null, freed
// or foreign pointer is refused instead of dereferenced.
wren_model& live(const wren_model* model, const char* what = "model");
wren_session& live(const wren_session* session, const char* what = "session");
void register_model(wren_model* model);
// Removes and deletes the model; refused (WREN_ERROR_IN_USE) while sessions over it live.
void free_model(wren_model* model);
// Registers a session over its owner (which must be live) and counts it there.
void register_session(wren_session* session);
void free_session(wren_session* session);

// A pointer argument that must not be null.
template <class T>
T* non_null(T* p, const char* name) {
  if (!p) null_pointer(name);
  return p;
}

// Shared by the entry points of sessions (api/session_api.cpp defines them).
SamplerParams checked_sampler(const wren_sampler_params& p);  // WREN_ERROR_ARGUMENT naming a bad field
void check_tokens(const wren_session& s, const int32_t* tokens, size_t n);  // ids, then room: before anything runs
// What a wren_session holds beyond the engine's Session, as state buffers: its last logits
// and its sampler (settings and generator), so a restored session samples as the saved one.
std::vector<StateBuffer> api_state(wren_session& s);
double seconds_since(std::chrono::steady_clock::time_point t);

}  // namespace wren::api
