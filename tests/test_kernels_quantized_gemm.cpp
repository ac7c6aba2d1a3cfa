// Tests of the batched products (ops.h "Batched products"): every integer path's tiles
// (forced through set_int8_path) against a double-precision sum of the same quantised values
// (kernels/reference.h dot_row_quantized, independent of every path), and against the same
// path's matvec (the tiles must give a batch row the bits decode gives it alone); the f32 /
// bf16 batched product against the f32 reference; strides, row ranges and bad inputs.
//
// Tolerance as in test_kernels_quantized.cpp: the int32 sums are exact, the f32 rounding of
// the scale products and their sum over groups is at most (groups + 16) ulps of
// A = sum_i |s_w s_x q_w q_x|.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <string>

#include "kernels/ops.h"
#include "kernels/reference.h"
#include "test_kernels_util.h"

namespace wren::kernels {
namespace {

double tolerance(const MatrixView& w, int64_t r, const QuantizedActivation& xq) {
  double a = 0;
  for (int64_t c = 0; c < w.cols; ++c)
    a += std::fabs(double(ref::weight(w, r, c)) * xq.scales[size_t(c / xq.group)] * xq.q[size_t(c)]);
  return double(w.groups() + 16) * 0x1p-24 * a + 1e-30;
}

struct Case {
  DType type;
  int64_t rows, cols;
  int group;
  std::vector<int64_t> tokens;
};

// Odd row counts (the tiles' row remainders), groups that are and are not a multiple of the
// SIMD block (20, 48: the plain fallback; 16 columns on NEON's q8), group counts that are
// not a multiple of 8 (a partial last block of eight scales), q4's two-groups-per-step case
// (G = 32, groups % 8 == 0), and batch sizes with every remainder of the token tiles.
std::vector<Case> cases() {
  const std::vector<int64_t> some{1, 2, 3, 5, 8, 17, 64, 65, 130};
  std::vector<Case> out;
  for (DType t : {DType::q8, DType::q4}) {
    for (int group : {32, 64, 128, 20, 48})
      for (int64_t mult : {1, 3, 9})
        for (int64_t rows : {1, 6, 13}) out.push_back({t, rows, group * mult, group, {1, 2, 3, 7}});
    out.push_back({t, 37, 256, 32, some});   // groups % 8 == 0
    out.push_back({t, 21, 352, 32, some});   // 11 groups: a partial block of eight scales
    out.push_back({t, 9, 512, 128, some});
    std::vector<int64_t> all;
    for (int64_t n = 1; n <= 130; ++n) all.push_back(n);
    out.push_back({t, 11, 96, 32, all});     // every T = 1..130
  }
  return out;
}

TEST(KernelsQuantizedGemm, EveryPathMatchesTheExactSumAndItsMatvec) {
  std::mt19937 rng(61);
  for (const Case& k : cases()) {
    const std::string name = std::string(to_string(k.type)) + " " + std::to_string(k.rows) + "x" +
                             std::to_string(k.cols) + " G " + std::to_string(k.group);
    SCOPED_TRACE(name);
    const auto w = randn(k.rows * k.cols, rng);
    const Matrix m = encode_matrix(w.data(), k.rows, k.cols, k.type, k.group);
    const MatrixView v = m.view();
    const int64_t T = k.tokens.back(), ldx = k.cols + 3, ldy = k.rows + 5;  // strides wider than a row
    const auto x = randn(T * ldx, rng);
    std::vector<QuantizedActivation> xq;
    quantize_batch(x.data(), T, k.cols, ldx, k.group, xq);
    std::vector<double> exact(size_t(T * k.rows));
    for (int64_t t = 0; t < T; ++t)
      for (int64_t r = 0; r < k.rows; ++r) exact[size_t(t * k.rows + r)] = ref::dot_row_quantized(v, r, xq[size_t(t)]);
    for_each_int8_path([&] {
      for (int64_t n : k.tokens) {
        SCOPED_TRACE("T " + std::to_string(n));
        std::vector<float> y(size_t(n * ldy), NAN);
        matmul_range(v, {x.data(), ldx, xq.data(), n}, y.data(), ldy, 0, k.rows);
        std::vector<float> alone(size_t(k.rows));
        for (int64_t t = 0; t < n; ++t) {
          matvec_range(v, x.data() + t * ldx, &xq[size_t(t)], alone.data(), 0, k.rows);
          for (int64_t r = 0; r < k.rows; ++r) {
            const float got = y[size_t(t * ldy + r)];
            ASSERT_NEAR(got, exact[size_t(t * k.rows + r)], tolerance(v, r, xq[size_t(t)])) << "token " << t << " row " << r;
            ASSERT_EQ(got, alone[size_t(r)]) << "token " << t << " row " << r;
          }
          for (int64_t r = k.rows; r < ldy; ++r) ASSERT_TRUE(std::isnan(y[size_t(t * ldy + r)])) << "wrote past the rows";
        }
      }
    });
  }
}

// Packed weights (decode order, pack_for_dot): the x86 tiles read only the packed copy, so
// the stored values are poisoned (every byte 0x5A, a matrix whose products differ); every
// path still matches the exact sum of the true matrix and, bit for bit, its own matvec on
// the same views (a batch row gets what decode gives it alone). Odd row counts, one and
// several 256-column blocks, tails of fewer than 8 groups, every token remainder of the
// tiles, and the extremes that would overflow an int16 pair sum or a biased byte.
TEST(KernelsQuantizedGemm, PackedCopiesAreReadInsteadOfTheRows) {
  std::mt19937 rng(65);
  struct PackedCase {
    DType type;
    int64_t rows, cols;
    int fill;  // -1: random weights; else every value byte set to this (q4: both nibbles)
  };
  std::vector<PackedCase> cases;
  for (DType t : {DType::q8, DType::q4}) {
    for (int64_t rows : {1, 7, 13})
      for (int64_t cols : {256, 768, 32, 96, 352, 384, 416, 960})  // 32: one group; 960: 3 blocks + a 6-group tail
        cases.push_back({t, rows, cols, -1});
    for (int64_t cols : {512, 480, 32}) {
      cases.push_back({t, 5, cols, t == DType::q4 ? 0xFF : 127});
      cases.push_back({t, 5, cols, t == DType::q4 ? 0x00 : -127});
    }
  }
  for (const PackedCase& k : cases) {
    SCOPED_TRACE(std::string(to_string(k.type)) + " " + std::to_string(k.rows) + "x" + std::to_string(k.cols) +
                 " fill " + std::to_string(k.fill));
    Matrix m = encode_matrix(randn(k.rows * k.cols, rng).data(), k.rows, k.cols, k.type, 32);
    if (k.fill != -1) std::fill(m.values.begin(), m.values.end(), uint8_t(k.fill));
    const MatrixView v = m.view();
    ASSERT_TRUE(packable(v));
    std::vector<uint8_t> packed(m.values.size());
    pack_for_dot(v, packed.data());
    const std::vector<uint8_t> poison(m.values.size(), 0x5A);
    MatrixView poisoned = v, with_copy = v;
    poisoned.data = poison.data();
    poisoned.packed = with_copy.packed = packed.data();
    const int64_t T = 11, ldx = k.cols + 5, ldy = k.rows + 3;
    auto x = randn(T * ldx, rng);
    if (k.fill != -1)
      for (int64_t i = 0; i < T * ldx; ++i) x[size_t(i)] = i % 2 ? 3.0f : -3.0f;  // q_x at +-127
    std::vector<QuantizedActivation> xq;
    quantize_batch(x.data(), T, k.cols, ldx, 32, xq);
    for_each_int8_path([&] {
      const bool reads_packed = std::string(active_int8_path()).rfind("avx", 0) == 0;  // the others read `data`
      const MatrixView& w = reads_packed ? poisoned : with_copy;
      for (int64_t n : {1, 2, 3, 5, 11}) {
        SCOPED_TRACE("T " + std::to_string(n));
        std::vector<float> y(size_t(n * ldy), NAN), alone(size_t(k.rows));
        matmul_range(w, {x.data(), ldx, xq.data(), n}, y.data(), ldy, 0, k.rows);
        for (int64_t t = 0; t < n; ++t) {
          matvec_range(w, x.data() + t * ldx, &xq[size_t(t)], alone.data(), 0, k.rows);
          for (int64_t r = 0; r < k.rows; ++r) {
            const float got = y[size_t(t * ldy + r)];
            ASSERT_NEAR(got, ref::dot_row_quantized(v, r, xq[size_t(t)]), tolerance(v, r, xq[size_t(t)]))
                << "token " << t << " row " << r;
            ASSERT_EQ(got, alone[size_t(r)]) << "token " << t << " row " << r;
          }
        }
        // A slice of the packed copy, starting anywhere in the copy's tiles of rows (four: q4,
        // and q8 of more than one block and a tail), and the same rows as a range of the whole
        // give the whole's bits.
        if (n != 5) continue;
        for (int64_t first = 1; first < k.rows; first += 2) {
          const int64_t count = k.rows - first;
          std::vector<float> part(size_t(n * ldy), NAN), range(size_t(n * ldy), NAN);
          matmul_range(w.slice_rows(first, count), {x.data(), ldx, xq.data(), n}, part.data(), ldy, 0, count);
          matmul_range(w, {x.data(), ldx, xq.data(), n}, range.data(), ldy, first, k.rows);
          for (int64_t t = 0; t < n; ++t)
            for (int64_t r = first; r < k.rows; ++r) {
              ASSERT_EQ(part[size_t(t * ldy + r - first)], y[size_t(t * ldy + r)]) << "slice at " << first << " row " << r;
              ASSERT_EQ(range[size_t(t * ldy + r)], y[size_t(t * ldy + r)]) << "range from " << first << " row " << r;
            }
        }
      }
    });
  }
}

TEST(KernelsQuantizedGemm, ARowRangeWritesOnlyItsRows) {
  std::mt19937 rng(62);
  for (DType t : {DType::q8, DType::q4, DType::bf16, DType::f32}) {
    SCOPED_TRACE(to_string(t));
    const int64_t rows = 29, cols = 160, T = 9;
    const auto w = randn(rows * cols, rng);
    const Matrix m = encode_matrix(w.data(), rows, cols, t, 32);
    const auto x = randn(T * cols, rng);
    std::vector<QuantizedActivation> xq;
    quantize_batch(x.data(), T, cols, cols, 32, xq);
    const ActivationBatch batch{x.data(), cols, xq.data(), T};
    std::vector<float> whole(size_t(T * rows)), part(size_t(T * rows), -7.0f);
    matmul_range(m.view(), batch, whole.data(), rows, 0, rows);
    matmul_range(m.view(), batch, part.data(), rows, 3, 22);
    for (int64_t s = 0; s < T; ++s)
      for (int64_t r = 0; r < rows; ++r) {
        const float p = part[size_t(s * rows + r)];
        if (r >= 3 && r < 22) ASSERT_EQ(p, whole[size_t(s * rows + r)]) << "token " << s << " row " << r;
        else ASSERT_EQ(p, -7.0f) << "token " << s << " row " << r;
      }
  }
}

// f32 / bf16 weights (and q8 / q4 in parity mode) take the f32 path: each product within f32
// rounding of the reference's dot of the decoded row with the unquantised x.
TEST(KernelsQuantizedGemm, FloatPathMatchesTheReference) {
  std::mt19937 rng(63);
  for (DType t : {DType::f32, DType::bf16, DType::q8, DType::q4})
    for (int64_t T : {1, 4, 5, 33, 70}) {
      SCOPED_TRACE(std::string(to_string(t)) + " T " + std::to_string(T));
      const int64_t rows = 19, cols = 96;
      const auto w = randn(rows * cols, rng);
      const Matrix m = encode_matrix(w.data(), rows, cols, t, 32);
      const auto x = randn(T * cols, rng);
      set_f32_activations(true);
      std::vector<float> y(size_t(T * rows));
      matmul_range(m.view(), {x.data(), cols, nullptr, T}, y.data(), rows, 0, rows);
      set_f32_activations(false);
      for (int64_t s = 0; s < T; ++s)
        for (int64_t r = 0; r < rows; ++r) {
          double ref_dot = 0, abs_dot = 0;
          for (int64_t c = 0; c < cols; ++c) {
            ref_dot += double(ref::weight(m.view(), r, c)) * x[size_t(s * cols + c)];
            abs_dot += std::fabs(double(ref::weight(m.view(), r, c)) * x[size_t(s * cols + c)]);
          }
          ASSERT_NEAR(y[size_t(s * rows + r)], ref_dot, 1e-6 * abs_dot + 1e-30) << "token " << s << " row " << r;
        }
    }
}

TEST(KernelsQuantizedGemm, RejectsAMismatchedBatch) {
  std::mt19937 rng(64);
  const auto w = randn(4 * 128, rng);
  const Matrix m = encode_matrix(w.data(), 4, 128, DType::q4, 32);
  const auto x = randn(3 * 128, rng);
  std::vector<QuantizedActivation> xq;
  quantize_batch(x.data(), 3, 128, 128, 32, xq);
  quantize_activation(x.data() + 256, 128, 64, xq[2]);  // the last row quantised for group 64
  std::vector<float> y(12);
  EXPECT_THROW(matmul_range(m.view(), {x.data(), 128, xq.data(), 3}, y.data(), 4, 0, 4), KernelError);
  EXPECT_THROW(matmul_range(m.view(), {x.data(), 128, nullptr, 3}, y.data(), 4, 0, 4), KernelError);
  EXPECT_NO_THROW(matmul_range(m.view(), {x.data(), 128, xq.data(), 2}, y.data(), 4, 0, 4));
}

}  // namespace
}  // namespace wren::kernels
