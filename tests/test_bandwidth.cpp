// The read-bandwidth probe (kernels/bandwidth.h) reads every byte of every thread's part: its
// checksum against the sum of what the threads wrote, its SIMD sum against a scalar one.
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <random>
#include <stdexcept>
#include <vector>

#include "kernels/bandwidth.h"

namespace wren {
namespace {

TEST(Bandwidth, ReadSumMatchesAScalarSum) {
  std::mt19937_64 rng(1);
  std::vector<uint64_t> v(1031);
  for (auto& x : v) x = rng();
  for (size_t n : {0u, 1u, 3u, 7u, 8u, 31u, 33u, 1031u}) {
    const uint64_t expected = std::accumulate(v.begin(), v.begin() + long(n), uint64_t(0));
    EXPECT_EQ(kernels::read_sum(v.data(), n * 8), expected) << n;
  }
}

TEST(Bandwidth, EveryThreadReadsItsWholePart) {
  for (int threads : {1, 2, 3}) {
    const size_t bytes = (size_t(8) << 20) + 4096;
    const kernels::Bandwidth b = kernels::measure_read_bandwidth({.bytes = bytes, .threads = threads, .passes = 3});
    // Thread t wrote bytes of value t + 1 over its part (bytes / threads, whole cache lines).
    const size_t part = bytes / size_t(threads) / 64 * 64;
    uint64_t expected = 0;
    for (int t = 0; t < threads; ++t) expected += uint64_t(t + 1) * 0x0101010101010101ull * (part / 8);
    EXPECT_EQ(b.checksum, expected) << threads;
    ASSERT_EQ(b.passes.size(), 3u);
    EXPECT_EQ(b.best, *std::max_element(b.passes.begin(), b.passes.end()));
    EXPECT_GT(b.best, 0);
  }
}

TEST(Bandwidth, AProbeKeptBetweenPassesReadsItsWholeBufferEachTime) {
  for (int threads : {1, 2, 3}) {
    const size_t bytes = (size_t(4) << 20) + 192;
    kernels::ReadProbe probe(bytes, threads);
    const size_t part = bytes / size_t(threads) / 64 * 64;
    uint64_t expected = 0;
    for (int t = 0; t < threads; ++t) expected += uint64_t(t + 1) * 0x0101010101010101ull * (part / 8);
    for (int pass = 0; pass < 3; ++pass) {
      EXPECT_GT(probe.pass(), 0);
      EXPECT_EQ(probe.checksum(), expected) << threads << " threads, pass " << pass;
    }
  }
  EXPECT_THROW(kernels::ReadProbe(1 << 20, 0), std::invalid_argument);
  EXPECT_THROW(kernels::ReadProbe(100, 2), std::invalid_argument);
}

TEST(Bandwidth, BadOptionsAreRefused) {
  EXPECT_THROW(kernels::measure_read_bandwidth({.bytes = 1 << 20, .threads = 0}), std::invalid_argument);
  EXPECT_THROW(kernels::measure_read_bandwidth({.bytes = 1 << 20, .threads = 1, .passes = 0}), std::invalid_argument);
  EXPECT_THROW(kernels::measure_read_bandwidth({.bytes = 100, .threads = 2}), std::invalid_argument);
}

}  // namespace
}  // namespace wren
