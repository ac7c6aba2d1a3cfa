// kernels/: the k largest of n scores as a set, in index order (ops.h top_k_in_order), by a
// radix select on the scores' order-preserving integer keys: three passes over the scores
// and a partial sort of one bin, where a heap of k (top_k) pays log k per better score.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <string>

#include "kernels/ops.h"

namespace wren::kernels {
namespace {

// A score's rank as an unsigned integer: a larger number has a larger key, -0 and +0 are
// equal, and NaN is below every number (top_k's order).
uint32_t order_key(float v) {
  if (std::isnan(v)) return 0;
  uint32_t u;
  std::memcpy(&u, &v, sizeof u);
  if (u == 0x80000000u) u = 0;
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

}  // namespace

void top_k_in_order(const float* x, int64_t n, int k, int32_t* idx) {
  if (k < 0 || k > n)
    throw KernelError("top_k_in_order: k = " + std::to_string(k) + " outside [0, n = " + std::to_string(n) + "]");
  if (k == 0) return;
  // 1. A histogram of the keys' top bits: the bin holding the k-th largest key, and how many
  //    keys lie in the bins above it.
  constexpr int kBits = 12;
  uint32_t count[1 << kBits] = {};
  for (int64_t i = 0; i < n; ++i) ++count[order_key(x[i]) >> (32 - kBits)];
  uint32_t bin = (1u << kBits) - 1;
  int64_t above = 0;
  while (above + count[bin] < k) above += count[bin--];
  // 2. That bin's keys, gathered in idx (scratch until step 3), and the (k - above)-th largest
  //    of them: the k-th largest key of all.
  uint32_t* keys = reinterpret_cast<uint32_t*>(idx);
  int64_t m = 0;
  for (int64_t i = 0; i < n; ++i) {
    const uint32_t key = order_key(x[i]);
    if (key >> (32 - kBits) == bin) keys[m++] = key;
  }
  const int64_t r = k - above;
  std::nth_element(keys, keys + (r - 1), keys + m, std::greater<>());
  const uint32_t kth = keys[r - 1];
  int64_t greater = above;
  for (int64_t j = 0; j < m; ++j) greater += keys[j] > kth;
  // 3. In index order: every key above the k-th, and of the keys equal to it the first
  //    k - greater (equal scores go to the lower index).
  int64_t ties = k - greater, out = 0;
  for (int64_t i = 0; i < n; ++i) {
    const uint32_t key = order_key(x[i]);
    if (key > kth || (key == kth && ties-- > 0)) idx[out++] = int32_t(i);
  }
}

}  // namespace wren::kernels
