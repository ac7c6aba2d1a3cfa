// The C API generates what `wren generate` prints (the binary is the oracle), step by step
// as in one call, and measures perplexity as `wren perplexity` does.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>

#include "capi_util.h"

namespace wren_api_test {
namespace {

std::string cli_generate(const std::string& prompt, const std::string& args) {
  const Output o = run(std::string(WREN_BINARY) + " generate -m " + quoted(kModel) + " " + quoted(prompt) + " " + args);
  EXPECT_EQ(o.status, 0) << o.output;
  return o.output;
}

TEST(CApi, VersionIsTheHeaders) {
  const std::string v = std::to_string(WREN_VERSION_MAJOR) + "." + std::to_string(WREN_VERSION_MINOR) + "." +
                        std::to_string(WREN_VERSION_PATCH);
  EXPECT_EQ(std::string(wren_version()), v);
  EXPECT_STREQ(wren_status_name(WREN_ERROR_TOKEN), "WREN_ERROR_TOKEN");
}

TEST(CApi, GreedyTextEqualsWrenGenerate) {
  Model m;
  for (const std::string prompt : {"It was a dark and stormy night", "Once upon a time", ""}) {
    SCOPED_TRACE(prompt);
    Session s(m, 512);
    const std::string text = generate(s, prompt, greedy(48));
    EXPECT_FALSE(text.empty());
    EXPECT_EQ(prompt + text + "\n", cli_generate(prompt, "-n 48 --temp 0 -t 1"));
  }
}

TEST(CApi, StopStringAndSampledTextEqualWrenGenerate) {
  Model m;
  const std::string prompt = "The little bird";
  {
    Session s(m, 512);
    wren_generate_params p = greedy(60);
    const char* stops[] = {" the"};
    p.stops = stops;
    p.n_stops = 1;
    wren_generate_result r;
    const std::string text = generate(s, prompt, p, &r);
    EXPECT_EQ(prompt + text + "\n", cli_generate(prompt, "-n 60 --temp 0 --stop ' the'"));
    if (r.generated < 60) {
      EXPECT_EQ(r.stop_reason, WREN_STOP_STRING);
    }
  }
  {  // Sampling with the same seed and settings draws the same tokens as the CLI.
    Session s(m, 512);
    wren_generate_params p = wren_generate_default_params();
    p.max_tokens = 40;
    p.sampler.seed = 5;
    p.sampler.temperature = 0.9f;
    EXPECT_EQ(prompt + generate(s, prompt, p) + "\n", cli_generate(prompt, "-n 40 --temp 0.9 --seed 5"));
  }
}

// Prefill, then sample and decode token by token: the same tokens as one wren_generate, and
// its text (wren_detokenize) the same text.
TEST(CApi, StepByStepEqualsGenerate) {
  Model m;
  const std::string prompt = "It was a dark and stormy night";
  Session whole(m), steps(m);
  wren_generate_result r;
  const std::string text = generate(whole, prompt, greedy(24), &r);
  ASSERT_EQ(r.generated, 24);
  EXPECT_EQ(r.stop_reason, WREN_STOP_MAX_TOKENS);

  wren_sampler_params sp = wren_sampler_default_params();
  sp.temperature = 0;
  ASSERT_EQ(wren_session_set_sampler(steps, &sp), WREN_OK);
  const std::vector<int32_t> ids = tokenize(m, prompt);
  wren_session_info info;
  ASSERT_EQ(wren_session_get_info(steps, &info), WREN_OK);
  std::vector<float> logits(size_t(info.n_logits));
  ASSERT_EQ(wren_session_prefill(steps, ids.data(), ids.size(), 1, logits.data(), logits.size()), WREN_OK) << wren_last_error();
  std::vector<int32_t> out;
  for (int i = 0; i < 24; ++i) {
    int32_t t = -1;
    ASSERT_EQ(wren_session_sample(steps, &t), WREN_OK) << wren_last_error();
    // Greedy: the argmax of the logits the session returned.
    EXPECT_EQ(t, int32_t(std::max_element(logits.begin(), logits.end()) - logits.begin()));
    out.push_back(t);
    if (i + 1 < 24) {
      ASSERT_EQ(wren_session_decode(steps, t, logits.data(), logits.size()), WREN_OK) << wren_last_error();
    }
  }
  EXPECT_EQ(r.pending_token, out.back());
  std::string detok(text.size() + 64, '\0');
  size_t len = 0;
  ASSERT_EQ(wren_detokenize(m, out.data(), out.size(), detok.data(), detok.size(), &len), WREN_OK);
  detok.resize(len);
  EXPECT_EQ(detok, text);
  // Both sessions stand at the prompt and every token but the pending one.
  const int32_t *ha, *hb;
  size_t na, nb;
  ASSERT_EQ(wren_session_history(whole, &ha, &na), WREN_OK);
  ASSERT_EQ(wren_session_history(steps, &hb, &nb), WREN_OK);
  ASSERT_EQ(na, ids.size() + 23);
  ASSERT_EQ(nb, na);
  EXPECT_EQ(std::memcmp(ha, hb, na * sizeof(int32_t)), 0);
}

TEST(CApi, CallbackStopsTheGeneration) {
  Model m;
  Session full(m), cut(m);
  const std::string all = generate(full, "Once upon a time", greedy(30));
  struct Count {
    std::string text;
    int pieces = 0;
  } c;
  auto stop_after_three = [](const char* text, size_t len, void* user) {
    auto* c = static_cast<Count*>(user);
    c->text.append(text, len);
    return ++c->pieces >= 3 ? 1 : 0;
  };
  wren_generate_params p = greedy(30);
  wren_generate_result r;
  ASSERT_EQ(wren_generate(cut, "Once upon a time", 16, &p, stop_after_three, &c, &r), WREN_OK);
  EXPECT_EQ(c.pieces, 3);
  EXPECT_EQ(r.stop_reason, WREN_STOP_CALLBACK);
  EXPECT_LT(r.generated, 30);
  EXPECT_EQ(all.substr(0, c.text.size()), c.text);
}

TEST(CApi, StatsCountWhatRan) {
  Model m;
  Session s(m);
  const std::vector<int32_t> ids = tokenize(m, "Once upon a time");
  generate(s, "Once upon a time", greedy(10));
  wren_stats st;
  ASSERT_EQ(wren_session_get_stats(s, &st), WREN_OK);
  EXPECT_EQ(st.prompt_tokens, int64_t(ids.size()));
  EXPECT_EQ(st.generated, 10);
  EXPECT_EQ(st.decode_steps, 9);  // the last token is sampled, not run
  EXPECT_EQ(st.position, int64_t(ids.size()) + 9);
  EXPECT_GT(st.decode_seconds, 0);
  EXPECT_DOUBLE_EQ(st.decode_tokens_per_second, 9 / st.decode_seconds);
  EXPECT_GT(st.weight_bytes_per_token, 0);
  EXPECT_GT(st.lm_head_bytes_per_token, 0);
  EXPECT_GT(st.state_bytes_per_token, 0);
  EXPECT_GT(st.n_layers, 0);
}

TEST(CApi, TokenizeRoundTripAndSizes) {
  Model m;
  const std::string text = "Hello, world: caf\xc3\xa9 <|endoftext|>";
  size_t n = 0;
  EXPECT_EQ(wren_tokenize(m, text.data(), text.size(), 1, nullptr, 0, &n), WREN_ERROR_BUFFER_TOO_SMALL);
  EXPECT_GT(n, 3u);
  std::vector<int32_t> ids(n);
  ASSERT_EQ(wren_tokenize(m, text.data(), text.size(), 1, ids.data(), ids.size(), &n), WREN_OK);
  wren_model_info info;
  ASSERT_EQ(wren_model_get_info(m, &info), WREN_OK);
  EXPECT_EQ(ids.back(), info.eos_token);  // special text read as its id
  size_t plain = 0;
  wren_tokenize(m, text.data(), text.size(), 0, nullptr, 0, &plain);
  EXPECT_GT(plain, n);  // as plain text it is several tokens
  size_t len = 0;
  EXPECT_EQ(wren_detokenize(m, ids.data(), ids.size(), nullptr, 0, &len), WREN_ERROR_BUFFER_TOO_SMALL);
  std::string back(len, '\0');
  ASSERT_EQ(wren_detokenize(m, ids.data(), ids.size(), back.data(), back.size(), &len), WREN_OK);
  EXPECT_EQ(back, text);
}

TEST(CApi, PerplexityEqualsWrenPerplexity) {
  Model m;
  TempDir dir;
  std::string text;
  for (int i = 0; i < 40; ++i) text += "The quick brown fox jumps over the lazy dog, and the bird sings. ";
  std::ofstream(dir / "t.txt") << text;
  const Output o = run(std::string(WREN_BINARY) + " perplexity -m " + quoted(kModel) + " " + quoted(dir / "t.txt") + " -c 64 -t 1");
  ASSERT_EQ(o.status, 0) << o.output;
  wren_perplexity_result r;
  ASSERT_EQ(wren_perplexity(m, text.data(), text.size(), 64, 1, &r), WREN_OK) << wren_last_error();
  char line[128];
  std::snprintf(line, sizeof line, "perplexity %.4f\nbits per byte %.4f\n", r.perplexity, r.bits_per_byte);
  EXPECT_NE(o.output.find(line), std::string::npos) << o.output << "\nvs\n" << line;
  EXPECT_GT(r.windows, 1);
  EXPECT_EQ(r.scored, r.windows * 32);  // the targets of positions 31..62 in each window of 64
}

// examples/stream.c, linked to libwren.so and to libwren.a, prints what `wren generate` does.
TEST(CApi, ExampleStreamsWhatWrenGeneratePrints) {
  const std::string prompt = "It was a dark and stormy night";
  const std::string want = cli_generate(prompt, "-n 20 --temp 0");
  for (const char* bin : {WREN_EXAMPLE, WREN_EXAMPLE_STATIC}) {
    const Output o = run(std::string(bin) + " " + quoted(kModel) + " " + quoted(prompt) + " 20 0");
    EXPECT_EQ(o.status, 0) << bin;
    EXPECT_EQ(o.output, want) << bin;
  }
}

}  // namespace
}  // namespace wren_api_test
