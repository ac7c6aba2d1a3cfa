// Sampling: each transform checked against its definition on small hand-made logits.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <vector>

#include "runtime/sampler.h"

namespace wren {
namespace {

SamplerParams plain(float temperature) {
  SamplerParams p;
  p.temperature = temperature;
  p.top_k = 0;
  p.top_p = 1.0f;
  p.min_p = 0.0f;
  return p;
}

TEST(Sampler, GreedyTakesTheArgmax) {
  Sampler s(plain(0));
  std::vector<float> l{0.1f, 2.0f, -1.0f, 1.9f};
  EXPECT_EQ(s.sample(l, {}), 1);
}

TEST(Sampler, FrequenciesFollowSoftmaxAtTemperature) {
  const std::vector<float> logits{0.0f, 1.0f, 2.0f, -1.0f};
  for (float t : {1.0f, 0.5f}) {
    SamplerParams p = plain(t);
    p.seed = 7;
    Sampler s(p);
    std::map<int, int> count;
    const int draws = 40000;
    for (int i = 0; i < draws; ++i) {
      std::vector<float> l = logits;
      ++count[s.sample(l, {})];
    }
    double z = 0;
    for (float x : logits) z += std::exp(x / t);
    for (int id = 0; id < 4; ++id) {
      double expected = std::exp(logits[id] / t) / z;
      double se = std::sqrt(expected * (1 - expected) / draws);
      EXPECT_NEAR(double(count[id]) / draws, expected, 5 * se + 1e-4) << "t=" << t << " id=" << id;
    }
  }
}

TEST(Sampler, TruncationsNeverDrawExcludedTokens) {
  const std::vector<float> logits{3.0f, 2.9f, 0.0f, -5.0f, 2.0f};
  SamplerParams k = plain(1);
  k.top_k = 2;  // only ids 0 and 1
  SamplerParams p = plain(1);
  p.top_p = 0.5f;  // p(0) = 0.47 < 0.5, so ids 0 and 1
  SamplerParams m = plain(1);
  m.min_p = 0.3f;  // p(4)/p(0) = e^-1 = 0.37 stays; p(2)/p(0) = e^-3 goes
  for (auto [params, allowed] : std::vector<std::pair<SamplerParams, std::vector<int>>>{
           {k, {0, 1}}, {p, {0, 1}}, {m, {0, 1, 4}}}) {
    Sampler s(params);
    std::map<int, int> seen;
    for (int i = 0; i < 3000; ++i) {
      std::vector<float> l = logits;
      ++seen[s.sample(l, {})];
    }
    for (auto [id, n] : seen) EXPECT_NE(std::find(allowed.begin(), allowed.end(), id), allowed.end()) << id;
    EXPECT_EQ(seen.size(), allowed.size());
  }
}

// A vocabulary-sized case for the vectorised selection: ties that cross the top-k boundary,
// NaNs, and the order written out by hand (larger logit first, ties to the lower id).
TEST(Sampler, GreedyAndTopKOnAWholeVocabularyKeepTheTieOrder) {
  std::vector<float> logits(5000);
  for (size_t i = 0; i < logits.size(); ++i) logits[i] = -float(i % 97) / 10.0f;  // at most 0
  logits[0] = logits[1] = NAN;
  for (int id : {4000, 17, 2500}) logits[size_t(id)] = 5.0f;
  for (int id : {4500, 30, 3000, 999, 1200}) logits[size_t(id)] = 4.5f;  // 4500 is the eighth
  {
    std::vector<float> l = logits;
    EXPECT_EQ(Sampler(plain(0)).sample(l, {}), 17);
  }
  SamplerParams p = plain(1);
  p.top_k = 7;
  Sampler s(p);
  std::map<int, int> seen;
  for (int i = 0; i < 4000; ++i) {
    std::vector<float> l = logits;
    ++seen[s.sample(l, {})];
  }
  std::vector<int> drawn;
  for (auto [id, n] : seen) drawn.push_back(id);
  EXPECT_EQ(drawn, (std::vector<int>{17, 30, 999, 1200, 2500, 3000, 4000}));
}

TEST(Sampler, SameSeedSameTokens) {
  SamplerParams p = plain(1);
  p.seed = 42;
  Sampler a(p), b(p);
  for (int i = 0; i < 100; ++i) {
    std::vector<float> la{0.f, 0.5f, 1.f, 0.2f}, lb = la;
    ASSERT_EQ(a.sample(la, {}), b.sample(lb, {}));
  }
}

TEST(Sampler, RepetitionPenaltyDividesPositiveAndMultipliesNegative) {
  SamplerParams p = plain(0);
  p.repeat_penalty = 2.0f;
  p.repeat_last_n = 2;
  Sampler s(p);
  std::vector<float> l{4.0f, 3.0f, -1.0f, 1.0f};
  std::vector<int32_t> recent{1, 0, 0, 2};  // only the last two (0 and 2) count, each once
  EXPECT_EQ(s.sample(l, recent), 1);
  EXPECT_FLOAT_EQ(l[0], 2.0f);
  EXPECT_FLOAT_EQ(l[1], 3.0f);
  EXPECT_FLOAT_EQ(l[2], -2.0f);
}

TEST(StopMatcher, StopStringAcrossPieces) {
  StopMatcher m({"\n\nUser:"});
  std::string out(m.push("Hello\n"));
  out += m.push("\nUse");
  EXPECT_EQ(out, "Hello");
  EXPECT_FALSE(m.stopped());
  out += m.push("r: more");
  EXPECT_TRUE(m.stopped());
  out += m.flush();
  EXPECT_EQ(out, "Hello");
}

TEST(StopMatcher, HeldTextIsReleasedWhenItIsNotAStop) {
  StopMatcher m({"END"});
  std::string out(m.push("the EN"));
  EXPECT_EQ(out, "the ");
  out += m.push("D? no, ENTER");
  EXPECT_TRUE(m.stopped());
  EXPECT_EQ(out, "the ");
  StopMatcher n({"END"});
  out = n.push("ENTER");
  out += n.push(" E");
  out += n.flush();
  EXPECT_EQ(out, "ENTER E");
  EXPECT_FALSE(n.stopped());
}

}  // namespace
}  // namespace wren
