// Sessions through the C API: two on one model in two threads give what they give one after
// the other; a saved state (buffer or file) continues identically, sampling included, and
// is refused by a session of another context or model.
#include <cstring>
#include <thread>

#include "capi_util.h"

namespace wren_api_test {
namespace {

// A sampled continuation of `steps` tokens from the session's last logits: the tokens and
// the last logits (bitwise).
struct Continuation {
  std::vector<int32_t> tokens;
  std::vector<float> logits;
  bool operator==(const Continuation& o) const {
    return tokens == o.tokens && logits.size() == o.logits.size() &&
           std::memcmp(logits.data(), o.logits.data(), logits.size() * sizeof(float)) == 0;
  }
};

Continuation continue_sampling(wren_session* s, int steps) {
  Continuation c;
  wren_session_info info;
  EXPECT_EQ(wren_session_get_info(s, &info), WREN_OK);
  c.logits.resize(size_t(info.n_logits));
  for (int i = 0; i < steps; ++i) {
    int32_t t = -1;
    EXPECT_EQ(wren_session_sample(s, &t), WREN_OK) << wren_last_error();
    c.tokens.push_back(t);
    EXPECT_EQ(wren_session_decode(s, t, c.logits.data(), c.logits.size()), WREN_OK) << wren_last_error();
  }
  return c;
}

wren_sampler_params warm(uint64_t seed) {
  wren_sampler_params p = wren_sampler_default_params();
  p.temperature = 1.0f;
  p.seed = seed;
  return p;
}

// One session's whole run: prompt, 16 sampled tokens, then a generation.
struct SessionRun {
  Continuation steps;
  std::string text;
  bool operator==(const SessionRun& o) const { return steps == o.steps && text == o.text; }
};

SessionRun run_session(wren_model* m, const std::string& prompt, uint64_t seed, int threads) {
  Session s(m, 256, threads);
  SessionRun r;
  const wren_sampler_params sp = warm(seed);
  EXPECT_EQ(wren_session_set_sampler(s, &sp), WREN_OK);
  const std::vector<int32_t> ids = tokenize(m, prompt);
  EXPECT_EQ(wren_session_prefill(s, ids.data(), ids.size(), 1, nullptr, 0), WREN_OK);
  r.steps = continue_sampling(s, 16);
  wren_generate_params gp = wren_generate_default_params();
  gp.sampler.seed = seed;
  gp.max_tokens = 16;
  r.text = generate(s, " And then", gp);
  return r;
}

TEST(CApiSessions, TwoThreadsOnOneModelEqualOneAfterTheOther) {
  Model m;
  for (int threads : {1, 2}) {
    SCOPED_TRACE(threads);
    const SessionRun a = run_session(m, "It was a dark and stormy night", 1, threads);
    const SessionRun b = run_session(m, "Once upon a time", 2, threads);
    EXPECT_FALSE(a == b);  // different prompts and seeds: the comparison below can fail
    SessionRun pa, pb;
    std::thread ta([&] { pa = run_session(m, "It was a dark and stormy night", 1, threads); });
    std::thread tb([&] { pb = run_session(m, "Once upon a time", 2, threads); });
    ta.join();
    tb.join();
    EXPECT_TRUE(pa == a);
    EXPECT_TRUE(pb == b);
  }
}

TEST(CApiSessions, SavedStateContinuesIdentically) {
  Model m;
  Session saved(m, 128);
  const wren_sampler_params sp = warm(7);
  ASSERT_EQ(wren_session_set_sampler(saved, &sp), WREN_OK);
  const std::vector<int32_t> ids = tokenize(m, "It was a dark and stormy night");
  ASSERT_EQ(wren_session_prefill(saved, ids.data(), ids.size(), 1, nullptr, 0), WREN_OK);
  continue_sampling(saved, 5);  // the generator has moved on from its seed
  size_t size = 0;
  ASSERT_EQ(wren_session_state_size(saved, &size), WREN_OK);
  std::vector<unsigned char> state(size);
  size_t written = 0;
  ASSERT_EQ(wren_session_save_state(saved, state.data(), state.size(), &written), WREN_OK) << wren_last_error();
  ASSERT_EQ(written, size);
  TempDir dir;
  const std::string file = dir / "saved.state";
  ASSERT_EQ(wren_session_save_file(saved, file.c_str()), WREN_OK) << wren_last_error();
  const Continuation want = continue_sampling(saved, 20);

  // Restored into sessions that ran other tokens with another sampler since: the same
  // tokens (the generator's state came along) and the same logits, bit for bit.
  for (bool from_file : {false, true}) {
    SCOPED_TRACE(from_file ? "file" : "buffer");
    Session other(m, 128);
    const wren_sampler_params other_sp = warm(99);
    ASSERT_EQ(wren_session_set_sampler(other, &other_sp), WREN_OK);
    const std::vector<int32_t> junk = tokenize(m, "Something else entirely, and longer than the prompt was");
    ASSERT_EQ(wren_session_prefill(other, junk.data(), junk.size(), 1, nullptr, 0), WREN_OK);
    const wren_status st = from_file ? wren_session_restore_file(other, file.c_str())
                                     : wren_session_restore_state(other, state.data(), state.size());
    ASSERT_EQ(st, WREN_OK) << wren_last_error();
    wren_session_info info;
    ASSERT_EQ(wren_session_get_info(other, &info), WREN_OK);
    EXPECT_EQ(info.position, int64_t(ids.size()) + 5);
    EXPECT_TRUE(continue_sampling(other, 20) == want);
  }
}

TEST(CApiSessions, StateOfAnotherContextOrModelIsRefused) {
  Model m;
  Session saved(m, 128);
  const int32_t ids[] = {5, 6, 7, 8};
  ASSERT_EQ(wren_session_prefill(saved, ids, 4, 1, nullptr, 0), WREN_OK);
  size_t size = 0;
  ASSERT_EQ(wren_session_state_size(saved, &size), WREN_OK);
  std::vector<unsigned char> state(size);
  ASSERT_EQ(wren_session_save_state(saved, state.data(), size, &size), WREN_OK);

  Session wider(m, 256);
  EXPECT_EQ(wren_session_restore_state(wider, state.data(), state.size()), WREN_ERROR_STATE);
  EXPECT_NE(std::string(wren_last_error()).find("context 128, this session holds 256"), std::string::npos)
      << wren_last_error();
  // Another model of the same shape (other weights, from `wren init`).
  TempDir dir;
  const Output o = run(std::string(WREN_BINARY) + " init " + quoted(kModel) + " -o " + quoted(dir / "other") +
                       " --seed 12 --tokenizer " + quoted(kModel + "/tokenizer.json"));
  ASSERT_EQ(o.status, 0) << o.output;
  Model other(dir / "other");
  Session s(other, 128);
  EXPECT_EQ(wren_session_restore_state(s, state.data(), state.size()), WREN_ERROR_STATE);
  EXPECT_NE(std::string(wren_last_error()).find("saved from another model"), std::string::npos) << wren_last_error();
  // A truncated state, with the session left as it was.
  Session same(m, 128);
  EXPECT_EQ(wren_session_restore_state(same, state.data(), state.size() - 1), WREN_ERROR_STATE);
  EXPECT_NE(std::string(wren_last_error()).find("bytes of data after the table"), std::string::npos) << wren_last_error();
  EXPECT_EQ(wren_session_restore_state(same, state.data(), 100), WREN_ERROR_STATE);
  EXPECT_NE(std::string(wren_last_error()).find("session state: truncated at byte"), std::string::npos) << wren_last_error();
  wren_session_info info;
  ASSERT_EQ(wren_session_get_info(same, &info), WREN_OK);
  EXPECT_EQ(info.position, 0);
}

}  // namespace
}  // namespace wren_api_test
