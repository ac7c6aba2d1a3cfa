// The engine's guarantees on a randomly initialised small Embla (embla-mini):
// early-exit prefill equals running every layer; cached decode equals recomputation; and the
// mechanisms' defining properties on hand-made inputs.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <set>

#include "config/parse.h"
#include "model/attention.h"
#include "model/attn_residuals.h"
#include "model/engram.h"
#include "model/model.h"
#include "runtime/session.h"

namespace wren {
namespace {

std::shared_ptr<const Model> random_model(const std::string& preset, kernels::DType type = kernels::DType::f32,
                                          uint64_t seed = 1) {
  ModelConfig c = load_preset(preset);
  auto weights = std::make_shared<OwnedWeights>(init_weights(c, build_weight_map(c), seed, type));
  return load_model(c, weights);
}

std::vector<int32_t> random_tokens(int n, int vocab, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<int32_t> t(static_cast<size_t>(n));
  for (auto& x : t) x = int32_t(rng() % uint32_t(vocab));
  return t;
}

float max_abs_diff(const std::vector<float>& a, const std::vector<float>& b) {
  float m = 0;
  for (size_t i = 0; i < a.size(); ++i)
    if (std::isfinite(a[i]) || std::isfinite(b[i])) m = std::max(m, std::fabs(a[i] - b[i]));
  return m;
}

TEST(Engine, EarlyExitPrefillEqualsAFullRun) {
  auto model = random_model("embla-mini");
  ASSERT_EQ(model->prefill_exit, 4);
  // Below and above the window (8) and the sparse selection size (16 + 8).
  for (int n : {1, 5, 12, 30, 100}) {
    auto tokens = random_tokens(n, model->config.vocab_size, uint32_t(n));
    Session fast(model), full(model);
    std::vector<float> a(size_t(fast.vocab_rows())), b(a.size());
    fast.prefill(tokens, a.data(), true);
    full.prefill(tokens, b.data(), false);
    EXPECT_LE(max_abs_diff(a, b), 1e-5f) << "prompt of " << n;
    // And the caches the two left behind serve the next token alike.
    fast.decode(7, a.data());
    full.decode(7, b.data());
    EXPECT_LE(max_abs_diff(a, b), 1e-5f) << "decode after a prompt of " << n;
  }
}

TEST(Engine, CachedDecodeEqualsRecomputation) {
  auto model = random_model("embla-mini");
  const int n = 320;  // past the window (8) and the selection size (24) many times over
  auto tokens = random_tokens(n, model->config.vocab_size, 99);
  Session decode(model);
  std::vector<float> step(size_t(decode.vocab_rows())), again(step.size());
  float worst = 0;
  for (int t = 0; t < n; ++t) {
    decode.decode(tokens[size_t(t)], step.data());
    if (t % 7 != 0 && t < n - 3) continue;  // recompute a spread of prefixes, always the last ones
    Session fresh(model);
    fresh.prefill(std::span(tokens.data(), size_t(t + 1)), again.data(), false);
    worst = std::max(worst, max_abs_diff(step, again));
  }
  EXPECT_LE(worst, 1e-5f);
}

TEST(Engine, QuantisedWeightsStayCloseToF32) {
  auto f32 = random_model("embla-mini", kernels::DType::f32);
  auto q8 = random_model("embla-mini", kernels::DType::q8);
  auto tokens = random_tokens(40, f32->config.vocab_size, 5);
  Session a(f32), b(q8);
  std::vector<float> la(size_t(a.vocab_rows())), lb(la.size());
  a.prefill(tokens, la.data());
  b.prefill(tokens, lb.data());
  double num = 0, den = 0;
  for (size_t i = 0; i < size_t(f32->config.vocab_size); ++i) num += (la[i] - lb[i]) * (la[i] - lb[i]), den += la[i] * la[i];
  EXPECT_LT(std::sqrt(num / den), 0.05) << "relative logit error of 8-bit weights";
  EXPECT_GT(num, 0.0) << "q8 weights gave bit-identical logits: were they really quantised?";
}

TEST(Engine, PaddingRowsAreNeverLogits) {
  ModelConfig c = load_preset("embla-mini");
  c.vocab_pad = 3;
  auto model = load_model(c, std::make_shared<OwnedWeights>(init_weights(c, build_weight_map(c), 2, kernels::DType::f32)));
  Session s(model);
  std::vector<float> logits(size_t(s.vocab_rows()));
  int32_t tok = 3;
  s.prefill(std::span(&tok, 1), logits.data());
  for (int v = c.vocab_size; v < c.rows(); ++v) EXPECT_EQ(logits[size_t(v)], -INFINITY);
  EXPECT_THROW(s.decode(c.rows(), logits.data()), std::out_of_range);
}

TEST(Sparse, SelectionSemantics) {
  std::vector<int32_t> out(64);
  // All keys when there are top_k + recent or fewer.
  std::vector<float> few{0.5f, -1.f, 2.f};
  ASSERT_EQ(select_keys(few.data(), 3, 2, 1, out.data()), 3);
  // Fewer than top_k positive: keys scored just below zero come next.
  std::vector<float> s(20, -5.0f);
  s[2] = 0.7f, s[9] = -0.01f, s[4] = -0.02f, s[11] = 0.1f;
  int64_t n = select_keys(s.data(), 20, 4, 3, out.data());
  std::set<int32_t> got(out.begin(), out.begin() + n);
  EXPECT_EQ(got, (std::set<int32_t>{2, 4, 9, 11, 17, 18, 19}));
  // More positive than top_k: only the highest; the recent window is always in.
  std::vector<float> pos(20);
  for (int j = 0; j < 20; ++j) pos[size_t(j)] = 1.0f + float(j % 10);  // highest at 9 and 19, then 8, 18
  n = select_keys(pos.data(), 20, 3, 2, out.data());
  got = std::set<int32_t>(out.begin(), out.begin() + n);
  EXPECT_EQ(got, (std::set<int32_t>{8, 9, 18, 19}));
  EXPECT_TRUE(std::is_sorted(out.begin(), out.begin() + n));
}

TEST(Relu2, ZeroWeightForKeysScoredAtOrBelowZero) {
  std::vector<float> s{-1.0f, 0.0f, 1e-8f, 0.5f, -0.0f, 2.0f};
  relu2_weights(s.data(), int64_t(s.size()));
  EXPECT_EQ(s[0], 0.0f);
  EXPECT_EQ(s[1], 0.0f);
  EXPECT_EQ(s[4], 0.0f);
  EXPECT_GT(s[2], 0.0f);
  EXPECT_FLOAT_EQ(s[3], 0.25f);
  EXPECT_FLOAT_EQ(s[5], 4.0f);
}

TEST(AttnResiduals, MixWeightsSumToOne) {
  const int d = 16;
  std::mt19937 rng(3);
  std::normal_distribution<float> n01;
  MixWeights w{Vec(d), Vec(d, 1.0f)};
  for (auto& x : w.query) x = n01(rng);
  std::vector<std::vector<float>> src(5, std::vector<float>(d));
  ResidualSources sources;
  for (auto& v : src) {
    for (auto& x : v) x = n01(rng);
    sources.x.push_back(v.data());
  }
  std::vector<float> weights(5), h(d), tmp(d);
  attn_res_mix(w, sources, d, 1e-6f, false, weights.data(), h.data(), tmp.data());
  float sum = 0;
  for (float x : weights) {
    sum += x;
    EXPECT_GT(x, 0.0f);
  }
  EXPECT_NEAR(sum, 1.0f, 1e-6f);
  for (int i = 0; i < d; ++i) {
    float expect = 0;
    for (int s = 0; s < 5; ++s) expect += weights[size_t(s)] * src[size_t(s)][size_t(i)];
    EXPECT_NEAR(h[size_t(i)], expect, 1e-5f);
  }
  // A zero pseudo-query (the initial state) mixes uniformly.
  MixWeights zero{Vec(d, 0.0f), Vec(d, 1.0f)};
  attn_res_mix(zero, sources, d, 1e-6f, false, weights.data(), h.data(), tmp.data());
  for (float x : weights) EXPECT_NEAR(x, 0.2f, 1e-6f);
}

TEST(Engram, LookupReadsExactlyTheRowsItNames) {
  ModelConfig c = load_preset("embla-mini");
  const EngramSpec& e = *c.engram;
  EngramHasher hasher(e);
  const int64_t rows = hasher.total_rows(), cols = e.row_dim;
  // A table whose every row holds its own index: the lookup's output tells which rows it read.
  std::vector<float> values(size_t(rows * cols));
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t j = 0; j < cols; ++j) values[size_t(r * cols + j)] = float(r) + 0.001f * float(j);
  auto table = kernels::MatrixView::f32(values.data(), rows, cols);
  std::vector<int32_t> ctx{EngramHasher::kPad, 17, 42};
  std::vector<float> g(size_t(e.width()));
  std::vector<int64_t> read(size_t(hasher.tables())), named(read.size());
  engram_lookup(hasher, table, ctx, g.data(), read);
  hasher.rows(ctx, named);
  EXPECT_EQ(read, named);
  for (int t = 0; t < hasher.tables(); ++t)
    for (int64_t j = 0; j < cols; ++j) EXPECT_FLOAT_EQ(g[size_t(t * cols + j)], float(named[size_t(t)]) + 0.001f * float(j));
}

}  // namespace
}  // namespace wren
