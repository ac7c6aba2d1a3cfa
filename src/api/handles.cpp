// The live handles, the thread's last message, versions and status names (api/handles.h).
#include "api/handles.h"

#include <mutex>
#include <unordered_set>

namespace wren::api {

namespace {

thread_local std::string t_error;

struct Registry {
  std::mutex mu;
  std::unordered_set<const void*> models, sessions;
};

Registry& registry() {
  static Registry* r = new Registry;  // never destroyed: calls during static destruction stay safe
  return *r;
}

}  // namespace

void set_error(const char* message) { t_error = message; }

void null_pointer(const char* name) { throw Failure(WREN_ERROR_ARGUMENT, std::string(name) + ": null pointer"); }

wren_model& live(const wren_model* model, const char* what) {
  WREN_REQUIRE(model != nullptr, WREN_ERROR_ARGUMENT, std::string(what) + ": null model handle");
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  WREN_REQUIRE(r.models.count(model) != 0, WREN_ERROR_ARGUMENT,
          std::string(what) + ": not a live model handle (freed, or never returned by wren_model_load)");
  return *const_cast<wren_model*>(model);
}

wren_session& live(const wren_session* session, const char* what) {
  WREN_REQUIRE(session != nullptr, WREN_ERROR_ARGUMENT, std::string(what) + ": null session handle");
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  WREN_REQUIRE(r.sessions.count(session) != 0, WREN_ERROR_ARGUMENT,
          std::string(what) + ": not a live session handle (freed, or never returned by wren_session_new)");
  return *const_cast<wren_session*>(session);
}

void register_model(wren_model* model) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  r.models.insert(model);
}

void free_model(wren_model* model) {
  Registry& r = registry();
  {
    std::lock_guard<std::mutex> lock(r.mu);
    WREN_REQUIRE(r.models.count(model) != 0, WREN_ERROR_ARGUMENT,
            "model: not a live model handle (freed, or never returned by wren_model_load)");
    const int n = model->sessions.load();
    WREN_REQUIRE(n == 0, WREN_ERROR_IN_USE,
            "model " + model->dir + ": " + std::to_string(n) + " session(s) over it still live; free them first");
    r.models.erase(model);
  }
  delete model;
}

void register_session(wren_session* session) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  WREN_REQUIRE(r.models.count(session->owner) != 0, WREN_ERROR_ARGUMENT, "model: freed while the session was made");
  ++session->owner->sessions;
  r.sessions.insert(session);
}

void free_session(wren_session* session) {
  Registry& r = registry();
  {
    std::lock_guard<std::mutex> lock(r.mu);
    WREN_REQUIRE(r.sessions.count(session) != 0, WREN_ERROR_ARGUMENT,
            "session: not a live session handle (freed, or never returned by wren_session_new)");
    r.sessions.erase(session);
    --session->owner->sessions;
  }
  delete session;
}

}  // namespace wren::api

extern "C" {

const char* wren_version(void) {
#define WREN_STR2(x) #x
#define WREN_STR(x) WREN_STR2(x)
  return WREN_STR(WREN_VERSION_MAJOR) "." WREN_STR(WREN_VERSION_MINOR) "." WREN_STR(WREN_VERSION_PATCH);
}

const char* wren_status_name(wren_status status) {
  switch (status) {
    case WREN_OK: return "WREN_OK";
    case WREN_ERROR_ARGUMENT: return "WREN_ERROR_ARGUMENT";
    case WREN_ERROR_IO: return "WREN_ERROR_IO";
    case WREN_ERROR_MODEL: return "WREN_ERROR_MODEL";
    case WREN_ERROR_TOKEN: return "WREN_ERROR_TOKEN";
    case WREN_ERROR_CONTEXT_FULL: return "WREN_ERROR_CONTEXT_FULL";
    case WREN_ERROR_STATE: return "WREN_ERROR_STATE";
    case WREN_ERROR_BUFFER_TOO_SMALL: return "WREN_ERROR_BUFFER_TOO_SMALL";
    case WREN_ERROR_IN_USE: return "WREN_ERROR_IN_USE";
    case WREN_ERROR_NO_LOGITS: return "WREN_ERROR_NO_LOGITS";
    case WREN_ERROR_OUT_OF_MEMORY: return "WREN_ERROR_OUT_OF_MEMORY";
    case WREN_ERROR_INTERNAL: return "WREN_ERROR_INTERNAL";
  }
  return "an unknown wren_status";
}

const char* wren_last_error(void) { return wren::api::t_error.c_str(); }

}  // extern "C"
