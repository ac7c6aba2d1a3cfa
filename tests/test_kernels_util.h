// Helpers of the kernel test suites (tests/test_kernels_*.cpp, also built alone for aarch64 by
// cmake/kernels-aarch64): random vectors and the loop over every integer dot path.
#pragma once

#include <gtest/gtest.h>

#include <random>
#include <vector>

#include "kernels/ops.h"

namespace wren::kernels {

inline std::vector<float> randn(int64_t n, std::mt19937& rng, float scale = 1.0f) {
  std::normal_distribution<float> nd(0, scale);
  std::vector<float> v(static_cast<size_t>(n));
  for (auto& x : v) x = nd(rng);
  return v;
}

// Runs f once per integer path this CPU supports, checking the dispatcher switched.
template <class F>
void for_each_int8_path(const F& f) {
  for (const char* path : supported_int8_paths()) {
    set_int8_path(path);
    SCOPED_TRACE(path);
    ASSERT_STREQ(active_int8_path(), path);
    f();
  }
  set_int8_path(nullptr);
}

}  // namespace wren::kernels
