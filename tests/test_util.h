// Helpers shared by the test suites: temporary directories, random data, and small random
// models. Header-only; every function is deterministic in its seed.
#pragma once

#include <gtest/gtest.h>
#include <hwy/targets.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "config/parse.h"
#include "kernels/ops.h"
#include "model/model.h"
#include "temp_dir.h"

namespace wren::testing_util {

inline std::vector<float> normal(size_t count, float std, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, std);
  std::vector<float> v(count);
  for (auto& x : v) x = dist(rng);
  return v;
}

inline std::vector<int32_t> random_tokens(int n, int vocab, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<int32_t> t;
  for (int i = 0; i < n; ++i) t.push_back(int32_t(rng() % uint32_t(vocab)));
  return t;
}

// The largest difference between two logit vectors, ignoring entries -inf in both (padding rows).
inline float max_abs_diff(const std::vector<float>& a, const std::vector<float>& b) {
  float m = 0;
  for (size_t i = 0; i < a.size(); ++i)
    if (std::isfinite(a[i]) || std::isfinite(b[i])) m = std::max(m, std::fabs(a[i] - b[i]));
  return m;
}

// A model drawn from config/init_rule, held in memory.
inline std::shared_ptr<const Model> random_model(const ModelConfig& c, uint64_t seed = 1,
                                                 kernels::DType type = kernels::DType::f32) {
  return load_model(c, std::make_shared<OwnedWeights>(init_weights(c, build_weight_map(c), seed, type)));
}

// embla-mini (f32) whose embedding rows are NaN but those of `kept`, with an LM head of zeros:
// the kept tokens run, greedy decoding then chooses a NaN row, and a q8 cache refuses that
// token's keys (not finite), so its step throws.
inline std::shared_ptr<const Model> nan_rows_model(const std::vector<int32_t>& kept) {
  const ModelConfig c = load_preset("embla-mini");
  OwnedWeights w = init_weights(c, build_weight_map(c), 1, kernels::DType::f32);
  const auto edit = [&](const std::string& name, auto f) {
    const kernels::Matrix& m = *w.find(name);
    std::vector<float> v(size_t(m.rows * m.cols));
    for (int64_t r = 0; r < m.rows; ++r) kernels::decode_row(m.view(), r, v.data() + r * m.cols);
    f(v, m.cols);
    w.set(name, kernels::encode_matrix(v.data(), m.rows, m.cols, kernels::DType::f32));
  };
  edit("embed", [&](std::vector<float>& v, int64_t cols) {
    for (size_t r = 0; r < v.size() / size_t(cols); ++r)
      if (std::find(kept.begin(), kept.end(), int32_t(r)) == kept.end())
        std::fill_n(v.begin() + ptrdiff_t(r * size_t(cols)), cols, NAN);
  });
  edit("lm_head", [](std::vector<float>& v, int64_t) { std::fill(v.begin(), v.end(), 0.0f); });
  return load_model(c, std::make_shared<OwnedWeights>(std::move(w)));
}

// Runs f once per Highway target compiled in and supported here (e.g. AVX3, AVX2, SSE4,
// SSSE3, SCALAR), checking that the dispatcher really switched.
template <class F>
void for_each_target(const F& f) {
  for (int64_t target : hwy::SupportedAndGeneratedTargets()) {
    hwy::SetSupportedTargetsForTest(target);
    SCOPED_TRACE(hwy::TargetName(target));
    ASSERT_STREQ(kernels::active_target(), hwy::TargetName(target));
    f();
  }
  hwy::SetSupportedTargetsForTest(0);
}

}  // namespace wren::testing_util
