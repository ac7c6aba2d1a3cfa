// The LM head pre-score (model/lm_head.h). Oracles: the exact head as kernels::matvec
// computes it from the stored matrix, and the same generation run with the exact head.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <numeric>

#include "kernels/ops.h"
#include "model/lm_head.h"
#include "runtime/generation.h"
#include "runtime/model_files.h"
#include "test_util.h"
#include "text/tokenizer.h"

namespace wren {
namespace {

using kernels::DType;

// A head whose rows are random, with logits spread like a trained head's: x is a mix of a
// few rows (the "right" tokens) and noise.
struct Case {
  kernels::Matrix head;
  std::vector<float> x;
};

Case make_case(int64_t rows, int64_t cols, DType type, uint32_t seed, int group = 32) {
  Case c;
  const std::vector<float> w = testing_util::normal(size_t(rows * cols), 0.05f, seed);
  c.head = kernels::encode_matrix(w.data(), rows, cols, type, group);
  c.x = testing_util::normal(size_t(cols), 1.0f, seed + 1);
  for (int k = 0; k < 3; ++k)
    for (int64_t j = 0; j < cols; ++j) c.x[size_t(j)] += 20.0f * (3 - k) * w[size_t(((seed * 7 + k * 131) % rows) * cols + j)];
  return c;
}

std::vector<float> exact(const kernels::MatrixView& head, const std::vector<float>& x) {
  std::vector<float> y(size_t(head.rows));
  kernels::matvec(head, x.data(), y.data());
  return y;
}

std::vector<int32_t> top(const std::vector<float>& y, int k) {
  std::vector<int32_t> id(y.size());
  std::iota(id.begin(), id.end(), 0);
  std::stable_sort(id.begin(), id.end(), [&](int32_t a, int32_t b) { return y[size_t(a)] > y[size_t(b)]; });
  id.resize(size_t(k));
  return id;
}

TEST(LmHead, BoundHoldsOnEveryRow) {
  // Both products as the engine runs them (the integer path rounds x to 8 bits), and in the
  // f32-activation parity mode; a q8 head of groups of 64 sees another rounding of x than
  // the 4-bit copy's groups of 32.
  for (bool f32_activations : {false, true})
  for (DType type : {DType::q8, DType::bf16, DType::f32})
    for (int64_t cols : {32, 64, 96, 256}) {
      kernels::set_f32_activations(f32_activations);
      const int group = type == DType::q8 && cols % 64 == 0 ? 64 : 32;
      Case c = make_case(301, cols, type, uint32_t(cols), group);
      const kernels::MatrixView head = c.head.view();
      auto pre = make_lm_head_prescore(head);
      ASSERT_TRUE(pre);
      const LmHeadBound terms = lm_head_bound(head);
      const std::vector<float> z = exact(head, c.x), p = exact(pre->scored, c.x);  // what the engine scores: packed where packable
      double norm = 0;
      for (float v : c.x) norm += double(v) * v;
      norm = std::sqrt(norm);
      double worst = 0;
      for (int64_t r = 0; r < head.rows; ++r) {
        const double slack = double(terms.of(*pre, r, float(norm)));
        ASSERT_LE(std::fabs(double(z[size_t(r)]) - p[size_t(r)]), slack) << to_string(type) << " cols " << cols << " row " << r;
        worst = std::max(worst, std::fabs(double(z[size_t(r)]) - p[size_t(r)]) / slack);
      }
      EXPECT_GT(worst, 0.01) << "a bound this loose would rescore too many rows";
    }
  kernels::set_f32_activations(false);
}

TEST(LmHead, NoCopyWhereItCannotSave) {
  Case c = make_case(64, 64, DType::q4, 1);
  EXPECT_FALSE(make_lm_head_prescore(c.head.view()));
  Case odd = make_case(64, 48, DType::f32, 2);  // 48 is not a multiple of the 4-bit group
  EXPECT_FALSE(make_lm_head_prescore(odd.head.view()));
}

TEST(LmHead, TopKeepRowsAreTheExactHeadsAndTheRestMinusInfinity) {
  for (int keep : {1, 5, 40})
    for (uint32_t seed : {3u, 4u, 5u}) {
      Case c = make_case(4099, 128, DType::q8, seed);  // odd row count
      const kernels::MatrixView head = c.head.view();
      auto pre = make_lm_head_prescore(head);
      LmHeadScratch s;
      s.reserve(head);
      std::vector<float> got(size_t(head.rows));
      const LmHeadRead read = lm_head_logits(head, pre.get(), {.prescore = true, .keep = keep}, c.x.data(), got.data(), s, nullptr);
      const std::vector<float> z = exact(head, c.x);
      // x is peaked on 3 rows: their pre-scores stand clear of the rest. The 40th best row lies
      // in the bulk, where too many rows are within the bounds, so the exact head runs.
      EXPECT_EQ(read.prescored, keep <= 5) << "keep " << keep << " seed " << seed << ": " << read.rescored << " candidates";
      if (read.prescored) EXPECT_LT(read.bytes, double(head.bytes()));
      else EXPECT_EQ(read.rescored, head.rows);
      EXPECT_EQ(top(got, keep), top(z, keep));
      int64_t finite = 0;
      for (int64_t r = 0; r < head.rows; ++r)
        if (got[size_t(r)] != -INFINITY) {
          ++finite;
          ASSERT_EQ(got[size_t(r)], z[size_t(r)]) << "row " << r;  // bit for bit
        }
      EXPECT_EQ(finite, read.rescored);
    }
}

// A NaN bound on one row (its c_r made NaN) sends the token to the exact head: that row's
// logit is the exact head's, not dropped to -inf with the rows that cannot win.
TEST(LmHead, ANanBoundRunsTheExactHead) {
  Case c = make_case(4099, 128, DType::q8, 3);
  const kernels::MatrixView head = c.head.view();
  auto pre = make_lm_head_prescore(head);
  LmHeadScratch s;
  s.reserve(head);
  std::vector<float> got(size_t(head.rows));
  const int64_t row = 700;
  const LmHeadRead clean = lm_head_logits(head, pre.get(), {.prescore = true, .keep = 1}, c.x.data(), got.data(), s, nullptr);
  ASSERT_TRUE(clean.prescored);
  ASSERT_EQ(got[size_t(row)], -INFINITY);  // pruned while its bound is a number
  // make_lm_head_prescore made the object non-const: writing through the cast is defined.
  const_cast<LmHeadPrescore&>(*pre).c[size_t(row)] = NAN;
  const LmHeadRead read = lm_head_logits(head, pre.get(), {.prescore = true, .keep = 1}, c.x.data(), got.data(), s, nullptr);
  EXPECT_FALSE(read.prescored);
  EXPECT_EQ(read.rescored, head.rows);
  EXPECT_EQ(got, exact(head, c.x));
}

// A head with its decode-order copy (kernels::pack_for_dot, as load_model makes): the
// rescored candidates are gathered from both copies, so their logits stay bit for bit the
// exact (packed) head's; rescoring from the wrong rows of the copy would change them.
TEST(LmHead, APackedHeadRescoresItsOwnRows) {
  Case c = make_case(4099, 256, DType::q8, 6);
  std::vector<uint8_t> copy(c.head.values.size());
  kernels::MatrixView head = c.head.view();
  kernels::pack_for_dot(head, copy.data());
  head.packed = copy.data();
  auto pre = make_lm_head_prescore(head);
  LmHeadScratch s;
  s.reserve(head);
  std::vector<float> got(size_t(head.rows));
  const LmHeadRead read = lm_head_logits(head, pre.get(), {.prescore = true, .keep = 3}, c.x.data(), got.data(), s, nullptr);
  ASSERT_TRUE(read.prescored);
  const std::vector<float> z = exact(head, c.x);
  EXPECT_EQ(top(got, 3), top(z, 3));
  for (int64_t r = 0; r < head.rows; ++r)
    if (got[size_t(r)] != -INFINITY) {
      ASSERT_EQ(got[size_t(r)], z[size_t(r)]) << "row " << r;
    }
}

TEST(LmHead, RowsNotRescoredAreNeverRead) {
  // Poison: NaN scales in every stored row the pre-score did not pick. The pre-score copy is
  // made from the clean head, as at load; the logits must not change.
  Case c = make_case(2053, 64, DType::q8, 9);
  const kernels::MatrixView clean = c.head.view();
  auto pre = make_lm_head_prescore(clean);
  LmHeadScratch s;
  s.reserve(clean);
  std::vector<float> before(size_t(clean.rows)), after(size_t(clean.rows));
  lm_head_logits(clean, pre.get(), {.prescore = true, .keep = 3}, c.x.data(), before.data(), s, nullptr);
  kernels::Matrix poisoned = c.head;
  for (int64_t r = 0; r < clean.rows; ++r)
    if (before[size_t(r)] == -INFINITY)
      for (int64_t g = 0; g < clean.groups(); ++g) poisoned.scales[size_t(r * clean.groups() + g)] = kernels::F16{0x7E00};
  lm_head_logits(poisoned.view(), pre.get(), {.prescore = true, .keep = 3}, c.x.data(), after.data(), s, nullptr);
  for (size_t r = 0; r < before.size(); ++r) ASSERT_EQ(before[r], after[r]) << r;
  // And the poison is live: the exact head over the poisoned matrix does see it.
  const std::vector<float> z = exact(poisoned.view(), c.x);
  EXPECT_TRUE(std::any_of(z.begin(), z.end(), [](float v) { return std::isnan(v); }));
}

// The shipped model generating with and without the pre-score.
struct Generated {
  std::vector<int32_t> tokens;
  double head_bytes = 0, exact_bytes = 0;
  int64_t prescored = 0;
};

Generated generate(const SamplerParams& p, bool prescore, int n) {
  const std::string dir = (std::filesystem::path(WREN_SOURCE_DIR) / "models" / "embla-small").string();
  auto model = open_model(dir);
  const text::Tokenizer tok = text::Tokenizer::load(dir + "/tokenizer.json");
  Session session(model, {.context = 1024, .threads = 1, .lm_head = lm_head_for(p, prescore)});
  Generation gen(session, tok, {.sampling = p, .max_tokens = n, .ignore_eos = true});
  gen.prefill(tok.encode("It was a dark and stormy night"), true);
  Generated g;
  while (!gen.done()) {
    gen.step();
    if (gen.done()) break;
    const LmHeadRead& r = session.last_lm_head();
    g.head_bytes += r.bytes, g.prescored += r.prescored;
  }
  g.exact_bytes = double(model->lm_head.bytes()) * double(gen.times().decode_steps);
  const auto& h = session.history();
  g.tokens.assign(h.end() - std::min<ptrdiff_t>(ptrdiff_t(h.size()), n - 1), h.end());
  return g;
}

// The tokens on which a backoff tries the pre-score, over `tokens` tokens whose pre-score
// saves bytes exactly on the tokens listed in `saves`.
std::vector<int> tries(int tokens, const std::vector<int>& saves) {
  LmHeadBackoff backoff;
  std::vector<int> tried;
  for (int t = 0; t < tokens; ++t)
    if (backoff.try_prescore()) {
      tried.push_back(t);
      backoff.record(std::find(saves.begin(), saves.end(), t) != saves.end());
    }
  return tried;
}

// The schedule written out from the rule (after f >= 2 failures in a row, sit out
// min(2^(f - 2), 64) tokens): a pre-score that never saves is tried at 0, 1, then after
// 1, 2, 4, ..., 32, 64, 64 tokens left out.
TEST(LmHeadBackoff, SitsOutLongerAfterEachFailureInARow) {
  EXPECT_EQ(tries(201, {}), (std::vector<int>{0, 1, 3, 6, 11, 20, 37, 70, 135, 200}));
}

TEST(LmHeadBackoff, ASavingTokenStartsTheCountAgain) {
  // Saves on every try: never sits out.
  std::vector<int> all(50);
  std::iota(all.begin(), all.end(), 0);
  EXPECT_EQ(tries(50, all), all);
  // Fails at 0, 1 (sits out 2), saves at 3, fails at 4 (one failure: no wait), 5 (sits out
  // 6), then fails at 7 (sits out 8, 9) and saves at 10.
  EXPECT_EQ(tries(12, {3, 10, 11}), (std::vector<int>{0, 1, 3, 4, 5, 7, 10, 11}));
}

TEST(LmHead, ShippedModelGreedyThousandTokensAgree) {
  SamplerParams greedy;
  greedy.temperature = 0;
  const Generated a = generate(greedy, true, 1000), b = generate(greedy, false, 1000);
  ASSERT_EQ(a.tokens.size(), 999u);
  EXPECT_EQ(a.tokens, b.tokens);
  EXPECT_GT(a.prescored, 900) << "the pre-score ran on too few steps to test it";
  EXPECT_LT(a.head_bytes, 0.75 * a.exact_bytes);
  std::printf("LM head bytes per token: %.0f exact, %.0f with the pre-score (%lld of 999 steps pre-scored)\n",
              a.exact_bytes / 999, a.head_bytes / 999, (long long)a.prescored);
}

TEST(LmHead, ShippedModelTopKSamplingDrawsTheSameTokens) {
  SamplerParams p;  // top-k 40, top-p 0.95, min-p 0.05, temperature 0.8
  p.seed = 11;
  const Generated a = generate(p, true, 300), b = generate(p, false, 300);
  EXPECT_EQ(a.tokens, b.tokens);
  EXPECT_GT(a.prescored, 0);
}

}  // namespace
}  // namespace wren
