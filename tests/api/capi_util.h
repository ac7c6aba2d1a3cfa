// Helpers of the C API's tests: they know Wren only through include/wren.h (and run the
// `wren` binary as the oracle), so these are plain C++ around it.
#pragma once

#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "run_command.h"
#include "temp_dir.h"
#include "wren.h"

namespace wren_api_test {

const std::string kModel = std::string(WREN_SOURCE_DIR) + "/models/embla-small";

// stdout of a command (stderr dropped) and its exit status.
inline wren::testing_util::CommandResult run(const std::string& command) {
  return wren::testing_util::run_command("{ " + command + " 2>/dev/null; }");
}
using Output = wren::testing_util::CommandResult;

// A shell word.
inline std::string quoted(const std::string& s) {
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

using wren::testing_util::TempDir;

// A loaded model for a test, freed at its end (after its sessions).
struct Model {
  wren_model* m = nullptr;
  explicit Model(const std::string& dir = kModel) {
    EXPECT_EQ(wren_model_load(dir.c_str(), &m), WREN_OK) << wren_last_error();
  }
  ~Model() { EXPECT_EQ(wren_model_free(m), WREN_OK) << wren_last_error(); }
  operator wren_model*() const { return m; }
};

struct Session {
  wren_session* s = nullptr;
  Session(wren_model* m, int64_t context = 256, int threads = 1) {
    wren_session_params p = wren_session_default_params();
    p.context = context;
    p.threads = threads;
    EXPECT_EQ(wren_session_new(m, &p, &s), WREN_OK) << wren_last_error();
  }
  ~Session() { EXPECT_EQ(wren_session_free(s), WREN_OK) << wren_last_error(); }
  operator wren_session*() const { return s; }
};

inline int collect(const char* text, size_t len, void* user) {
  static_cast<std::string*>(user)->append(text, len);
  return 0;
}

// wren_generate's text.
inline std::string generate(wren_session* s, const std::string& prompt, const wren_generate_params& p,
                            wren_generate_result* result = nullptr) {
  std::string text;
  EXPECT_EQ(wren_generate(s, prompt.data(), prompt.size(), &p, collect, &text, result), WREN_OK) << wren_last_error();
  return text;
}

inline wren_generate_params greedy(int max_tokens) {
  wren_generate_params p = wren_generate_default_params();
  p.sampler.temperature = 0;
  p.max_tokens = max_tokens;
  return p;
}

inline std::vector<int32_t> tokenize(wren_model* m, const std::string& text) {
  size_t n = 0;
  wren_tokenize(m, text.data(), text.size(), 1, nullptr, 0, &n);
  std::vector<int32_t> ids(n);
  EXPECT_EQ(wren_tokenize(m, text.data(), text.size(), 1, ids.data(), ids.size(), &n), WREN_OK) << wren_last_error();
  return ids;
}

}  // namespace wren_api_test
