// Every bad argument is an error with a message, never a crash, and a refused call changes
// nothing; a model is not freed under its sessions (run under ASan by `make test`).
#include <cstring>
#include <fstream>

#include "capi_util.h"

namespace wren_api_test {
namespace {

// The call failed with `status` and a message that contains `part`.
#define EXPECT_FAILS(call, status, part)                                               \
  do {                                                                                 \
    const wren_status st_ = (call);                                                    \
    EXPECT_EQ(st_, status) << #call << ": " << wren_status_name(st_);                  \
    EXPECT_NE(std::string(wren_last_error()).find(part), std::string::npos)            \
        << #call << ": message '" << wren_last_error() << "' lacks '" << (part) << "'"; \
  } while (0)

int64_t position(wren_session* s) {
  wren_session_info i{};
  EXPECT_EQ(wren_session_get_info(s, &i), WREN_OK);
  return i.position;
}

TEST(CApiErrors, NullHandlesAndPointers) {
  const wren_status A = WREN_ERROR_ARGUMENT;
  wren_model* m = nullptr;
  wren_session* s = nullptr;
  size_t n;
  int32_t t;
  float f[4];
  const float* lp;
  const int32_t* tp;
  wren_model_info mi;
  wren_session_info si;
  wren_stats st;
  wren_perplexity_result pr;
  wren_generate_params gp = wren_generate_default_params();
  wren_sampler_params sp = wren_sampler_default_params();
  EXPECT_FAILS(wren_model_load(nullptr, &m), A, "dir: null pointer");
  EXPECT_FAILS(wren_model_load(kModel.c_str(), nullptr), A, "model: null pointer");
  EXPECT_FAILS(wren_model_get_info(nullptr, &mi), A, "null model handle");
  EXPECT_FAILS(wren_tokenize(nullptr, "a", 1, 1, nullptr, 0, &n), A, "null model handle");
  EXPECT_FAILS(wren_detokenize(nullptr, &t, 1, nullptr, 0, &n), A, "null model handle");
  EXPECT_FAILS(wren_perplexity(nullptr, "a", 1, 0, 1, &pr), A, "null model handle");
  EXPECT_FAILS(wren_session_new(nullptr, nullptr, &s), A, "null model handle");
  EXPECT_FAILS(wren_session_get_info(nullptr, &si), A, "null session handle");
  EXPECT_FAILS(wren_session_prefill(nullptr, &t, 1, 1, nullptr, 0), A, "null session handle");
  EXPECT_FAILS(wren_session_decode(nullptr, 1, f, 4), A, "null session handle");
  EXPECT_FAILS(wren_session_logits(nullptr, &lp, &n), A, "null session handle");
  EXPECT_FAILS(wren_session_history(nullptr, &tp, &n), A, "null session handle");
  EXPECT_FAILS(wren_session_set_sampler(nullptr, &sp), A, "null session handle");
  EXPECT_FAILS(wren_session_sample(nullptr, &t), A, "null session handle");
  EXPECT_FAILS(wren_generate(nullptr, "a", 1, &gp, nullptr, nullptr, nullptr), A, "null session handle");
  EXPECT_FAILS(wren_session_get_stats(nullptr, &st), A, "null session handle");
  EXPECT_FAILS(wren_session_state_size(nullptr, &n), A, "null session handle");
  EXPECT_FAILS(wren_session_save_state(nullptr, f, 4, &n), A, "null session handle");
  EXPECT_FAILS(wren_session_restore_state(nullptr, f, 4), A, "null session handle");
  EXPECT_FAILS(wren_session_save_file(nullptr, "x"), A, "null session handle");
  EXPECT_FAILS(wren_session_restore_file(nullptr, "x"), A, "null session handle");
  EXPECT_EQ(wren_model_free(nullptr), WREN_OK);
  EXPECT_EQ(wren_session_free(nullptr), WREN_OK);

  Model model;
  Session session(model);
  EXPECT_FAILS(wren_model_get_info(model, nullptr), A, "info: null pointer");
  EXPECT_FAILS(wren_tokenize(model, nullptr, 3, 1, nullptr, 0, &n), A, "text: null pointer");
  EXPECT_FAILS(wren_tokenize(model, "abc", 3, 1, nullptr, 0, nullptr), A, "n_tokens: null pointer");
  EXPECT_FAILS(wren_session_new(model, nullptr, nullptr), A, "session: null pointer");
  EXPECT_FAILS(wren_session_prefill(session, nullptr, 1, 1, nullptr, 0), A, "tokens: null pointer");
  EXPECT_FAILS(wren_session_prefill(session, &t, 0, 1, nullptr, 0), A, "none to evaluate");
  EXPECT_FAILS(wren_session_logits(session, nullptr, &n), A, "logits: null pointer");
  EXPECT_FAILS(wren_session_set_sampler(session, nullptr), A, "params: null pointer");
  EXPECT_FAILS(wren_session_sample(session, nullptr), A, "token: null pointer");
  EXPECT_FAILS(wren_generate(session, "a", 1, nullptr, nullptr, nullptr, nullptr), A, "params: null pointer");
  EXPECT_FAILS(wren_generate(session, nullptr, 4, &gp, nullptr, nullptr, nullptr), A, "prompt: null pointer");
  EXPECT_FAILS(wren_session_get_stats(session, nullptr), A, "stats: null pointer");
  EXPECT_FAILS(wren_session_restore_state(session, nullptr, 10), A, "buffer: null pointer");
  EXPECT_FAILS(wren_session_save_file(session, nullptr), A, "path: null pointer");
  EXPECT_EQ(position(session), 0);
  // A call that succeeds clears the message.
  ASSERT_EQ(wren_session_get_info(session, &si), WREN_OK);
  EXPECT_STREQ(wren_last_error(), "");
}

TEST(CApiErrors, WrongPathsNameThem) {
  wren_model* m = reinterpret_cast<wren_model*>(1);
  EXPECT_FAILS(wren_model_load("/nonexistent/model", &m), WREN_ERROR_IO, "/nonexistent/model: not a directory");
  EXPECT_EQ(m, nullptr);
  TempDir dir;
  EXPECT_FAILS(wren_model_load(dir.path.c_str(), &m), WREN_ERROR_IO, "config.json: missing");
  // A directory whose config is not a config.
  std::ofstream(dir / "config.json") << "{\"name\": 3}";
  std::ofstream(dir / "tokenizer.json") << "{}";
  EXPECT_FAILS(wren_model_load(dir.path.c_str(), &m), WREN_ERROR_MODEL, "config.json");
  EXPECT_EQ(m, nullptr);

  Model model;
  Session s(model);
  EXPECT_FAILS(wren_session_restore_file(s, (dir / "missing.state").c_str()), WREN_ERROR_IO, "missing.state: not a file");
  EXPECT_FAILS(wren_session_save_file(s, "/nonexistent/dir/x.state"), WREN_ERROR_IO, "/nonexistent/dir/x.state");
}

TEST(CApiErrors, TokenIdsOutOfRange) {
  Model m;
  Session s(m);
  wren_model_info info;
  ASSERT_EQ(wren_model_get_info(m, &info), WREN_OK);
  const int32_t bad[] = {5, info.vocab_size};
  EXPECT_FAILS(wren_session_prefill(s, bad, 2, 1, nullptr, 0), WREN_ERROR_TOKEN,
               "tokens[1] = " + std::to_string(info.vocab_size) + ": outside the vocabulary");
  EXPECT_FAILS(wren_session_decode(s, -1, nullptr, 0), WREN_ERROR_TOKEN, "tokens[0] = -1");
  EXPECT_EQ(position(s), 0);  // the good token before the bad one did not run
  size_t len;
  EXPECT_FAILS(wren_detokenize(m, bad, 2, nullptr, 0, &len), WREN_ERROR_TOKEN, "tokens[1]");
}

TEST(CApiErrors, ContextOverflowAndBadSessionParams) {
  Model m;
  wren_model_info info;
  ASSERT_EQ(wren_model_get_info(m, &info), WREN_OK);
  wren_session* s = nullptr;
  wren_session_params p = wren_session_default_params();
  p.context = info.context_length + 1;
  EXPECT_FAILS(wren_session_new(m, &p, &s), WREN_ERROR_ARGUMENT, "context " + std::to_string(p.context));
  p.context = -3;
  EXPECT_FAILS(wren_session_new(m, &p, &s), WREN_ERROR_ARGUMENT, "context -3");
  p = wren_session_default_params();
  p.threads = 0;
  EXPECT_FAILS(wren_session_new(m, &p, &s), WREN_ERROR_ARGUMENT, "threads 0");
  EXPECT_EQ(s, nullptr);

  Session small(m, 8);
  std::vector<int32_t> nine(9, 5);
  EXPECT_FAILS(wren_session_prefill(small, nine.data(), 9, 1, nullptr, 0), WREN_ERROR_CONTEXT_FULL, "has room for 8");
  ASSERT_EQ(wren_session_prefill(small, nine.data(), 8, 1, nullptr, 0), WREN_OK);
  EXPECT_FAILS(wren_session_decode(small, 5, nullptr, 0), WREN_ERROR_CONTEXT_FULL, "has room for 0");
  Session gen(m, 8);
  wren_generate_params gp = greedy(20);
  EXPECT_FAILS(wren_generate(gen, "Once upon a time", 16, &gp, nullptr, nullptr, nullptr), WREN_ERROR_CONTEXT_FULL,
               "max_tokens 20");
  EXPECT_EQ(position(gen), 0);
}

TEST(CApiErrors, BuffersSamplerAndLogits) {
  Model m;
  Session s(m);
  int32_t t;
  const float* lp;
  size_t n;
  EXPECT_FAILS(wren_session_sample(s, &t), WREN_ERROR_NO_LOGITS, "no logits");
  EXPECT_FAILS(wren_session_logits(s, &lp, &n), WREN_ERROR_NO_LOGITS, "no token evaluated");
  float few[3];
  EXPECT_FAILS(wren_session_decode(s, 5, few, 3), WREN_ERROR_BUFFER_TOO_SMALL, "logits_len 3");
  EXPECT_EQ(position(s), 0);
  wren_sampler_params sp = wren_sampler_default_params();
  sp.top_p = 0;
  EXPECT_FAILS(wren_session_set_sampler(s, &sp), WREN_ERROR_ARGUMENT, "top_p");
  sp = wren_sampler_default_params();
  sp.temperature = -1;
  EXPECT_FAILS(wren_session_set_sampler(s, &sp), WREN_ERROR_ARGUMENT, "temperature");
  wren_generate_params gp = greedy(-1);
  EXPECT_FAILS(wren_generate(s, "a", 1, &gp, nullptr, nullptr, nullptr), WREN_ERROR_ARGUMENT, "max_tokens -1");
  gp = greedy(4);
  gp.n_stops = 2;
  EXPECT_FAILS(wren_generate(s, "a", 1, &gp, nullptr, nullptr, nullptr), WREN_ERROR_ARGUMENT, "stops: null pointer");
  ASSERT_EQ(wren_session_decode(s, 5, nullptr, 0), WREN_OK);
  size_t need = 0;
  EXPECT_FAILS(wren_session_save_state(s, few, sizeof few, &need), WREN_ERROR_BUFFER_TOO_SMALL, "the state needs");
  size_t size = 0;
  ASSERT_EQ(wren_session_state_size(s, &size), WREN_OK);
  EXPECT_EQ(need, size);
  const char junk[] = "not a state at all, but long enough to read a header from it";
  EXPECT_FAILS(wren_session_restore_state(s, junk, sizeof junk), WREN_ERROR_STATE, "not a Wren session state");
  EXPECT_EQ(position(s), 1);
  wren_perplexity_result pr;
  EXPECT_FAILS(wren_perplexity(m, "short", 5, 64, 1, &pr), WREN_ERROR_ARGUMENT, "fewer than one window of 64");
  EXPECT_FAILS(wren_perplexity(m, "short", 5, 1, 1, &pr), WREN_ERROR_ARGUMENT, "must be at least 2");
  EXPECT_FAILS(wren_perplexity(m, "short", 5, 64, 0, &pr), WREN_ERROR_ARGUMENT, "threads 0");
}

// A model is not freed under its sessions: refused, and the session goes on working; once
// freed, the handle is refused instead of read (under ASan: no use after free).
TEST(CApiErrors, SessionOutlivingItsModelIsRefused) {
  wren_model* m = nullptr;
  ASSERT_EQ(wren_model_load(kModel.c_str(), &m), WREN_OK);
  wren_session *a = nullptr, *b = nullptr;
  ASSERT_EQ(wren_session_new(m, nullptr, &a), WREN_OK);
  ASSERT_EQ(wren_session_new(m, nullptr, &b), WREN_OK);
  EXPECT_FAILS(wren_model_free(m), WREN_ERROR_IN_USE, "2 session(s) over it still live");
  ASSERT_EQ(wren_session_free(a), WREN_OK);
  EXPECT_FAILS(wren_model_free(m), WREN_ERROR_IN_USE, "1 session(s)");
  const int32_t ids[] = {5, 6, 7};
  EXPECT_EQ(wren_session_prefill(b, ids, 3, 1, nullptr, 0), WREN_OK) << wren_last_error();
  int32_t t;
  EXPECT_EQ(wren_session_sample(b, &t), WREN_OK);
  ASSERT_EQ(wren_session_free(b), WREN_OK);
  EXPECT_FAILS(wren_session_decode(b, 5, nullptr, 0), WREN_ERROR_ARGUMENT, "not a live session handle");
  EXPECT_FAILS(wren_session_free(b), WREN_ERROR_ARGUMENT, "not a live session handle");
  ASSERT_EQ(wren_model_free(m), WREN_OK);
  wren_session* c = nullptr;
  EXPECT_FAILS(wren_session_new(m, nullptr, &c), WREN_ERROR_ARGUMENT, "not a live model handle");
  EXPECT_FAILS(wren_model_free(m), WREN_ERROR_ARGUMENT, "not a live model handle");
  EXPECT_EQ(c, nullptr);
}

}  // namespace
}  // namespace wren_api_test
