// Tests of the integer products (ops.h "Integer products"): activation quantisation against
// its definition, every integer dot path this CPU runs (forced through set_int8_path)
// against a double-precision sum of the same quantised values, the quantisation error
// against the f32 product, and the row-range entry points.
//
// Tolerances. The int32 sum of a group is exact on every path; what remains is f32
// rounding of the scale products s_w s_x isum_g and of their sum over groups, at most
// (groups + 16) f32 ulps of A = sum_i |s_w s_x q_w q_x| (16 covers the lane reduction).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>
#include <string>

#include "kernels/ops.h"
#include "kernels/reference.h"
#include "test_kernels_util.h"

namespace wren::kernels {
namespace {

// sum_c |W[r,c] s_x q_x[c]|: the scale of the f32 rounding of a quantised row dot.
double abs_quantized_dot(const MatrixView& w, int64_t r, const QuantizedActivation& xq) {
  double s = 0;
  for (int64_t c = 0; c < w.cols; ++c)
    s += std::fabs(double(ref::weight(w, r, c)) * xq.scales[size_t(c / xq.group)] * xq.q[size_t(c)]);
  return s;
}
double quantized_tolerance(const MatrixView& w, int64_t r, const QuantizedActivation& xq) {
  return double(w.groups() + 16) * 0x1p-24 * abs_quantized_dot(w, r, xq) + 1e-30;
}

struct Shape {
  DType type;
  int64_t rows, cols;
  int group;
};
std::string name(const Shape& s) {
  return std::string(to_string(s.type)) + " " + std::to_string(s.rows) + "x" +
         std::to_string(s.cols) + " G " + std::to_string(s.group);
}
// Odd row counts (remainders of the multi-row blocks), groups that are and are not a
// multiple of the 32-column SIMD block (20, 48: the scalar fallback), several groups per
// row and one long row.
std::vector<Shape> shapes() {
  std::vector<Shape> out;
  for (DType t : {DType::q8, DType::q4}) {
    for (int group : {32, 64, 128, 96, 20, 48})
      for (int64_t mult : {1, 3, 7})
        for (int64_t rows : {1, 5, 13}) out.push_back({t, rows, group * mult, group});
    out.push_back({t, 9, 4096, 32});
    out.push_back({t, 7, 768, 32});  // G = 32 and groups % 8 == 0: q4's two-groups-per-step loop
    out.push_back({t, 4, 2048, 128});
  }
  return out;
}

TEST(KernelsQuantizeActivation, FollowsItsDefinition) {
  std::mt19937 rng(31);
  QuantizedActivation xq;
  for (int group : {32, 20, 128})
    for (int64_t n : {int64_t(group), int64_t(group) * 5, int64_t(group) * 16, int64_t(group) * 30}) {
      SCOPED_TRACE("G " + std::to_string(group) + " n " + std::to_string(n));
      auto x = randn(n, rng, 3.0f);
      std::fill(x.begin(), x.begin() + group, 0.0f);  // an all-zero group: s = 0, q = 0
      if (n > group) x[size_t(group + 3)] = -40.0f;   // one group dominated by one value
      quantize_activation(x.data(), n, group, xq);
      ASSERT_EQ(xq.n, n);
      ASSERT_EQ(xq.group, group);
      for (int64_t g = 0; g < n / group; ++g) {
        float max_abs = 0;
        int32_t sum = 0;
        for (int i = 0; i < group; ++i) max_abs = std::max(max_abs, std::fabs(x[size_t(g * group + i)]));
        const float s = xq.scales[size_t(g)];
        EXPECT_EQ(s, max_abs / 127.0f) << "group " << g;
        for (int i = 0; i < group; ++i) {
          const int64_t c = g * group + i;
          const int q = xq.q[size_t(c)];
          sum += q;
          ASSERT_LE(std::abs(q), 127);
          ASSERT_LE(std::fabs(x[size_t(c)] - s * float(q)), 0.5f * s * (1 + 1e-6f)) << "col " << c;
          if (s > 0) {
            ASSERT_EQ(q, int(std::nearbyint(x[size_t(c)] / s))) << "col " << c;
          }
        }
        EXPECT_EQ(xq.sums[size_t(g)], sum) << "group " << g;
      }
      EXPECT_EQ(xq.scales[0], 0.0f);
      if (group == 32) {  // decode order: per 8 groups (the tail's m < 8 last), word k of group l at place m k + l
        for (int64_t c = 0; c < n; ++c) {
          const int64_t b = c / 256 * 256, m = std::min<int64_t>(8, (n - b) / 32);
          const int64_t word = (c - b) / 4, k = word / m, l = word % m;
          const int64_t from = b + 32 * l + 4 * k + c % 4;
          ASSERT_EQ(xq.q_lanes[size_t(c)], xq.q[size_t(from)]) << "col " << c;
          ASSERT_EQ(xq.q_nibble_lanes[size_t(c)], xq.q_nibble_order[size_t(from)]) << "col " << c;
        }
      }
      if (group % 32 == 0) {  // 16 even then 16 odd columns of each 32-column block
        for (int64_t c = 0; c < n; ++c) {
          const int64_t b = c / 32 * 32, j = c % 32;
          const int64_t from = j < 16 ? b + 2 * j : b + 2 * (j - 16) + 1;
          ASSERT_EQ(xq.q_nibble_order[size_t(c)], xq.q[size_t(from)]) << "col " << c;
        }
      }
    }
}

TEST(KernelsQuantizeActivation, ReusesItsBuffersAndRejectsBadGroups) {
  std::mt19937 rng(32);
  const auto x = randn(4096, rng);
  QuantizedActivation xq;
  quantize_activation(x.data(), 4096, 32, xq);
  const int8_t* q = xq.q.data();
  const float* s = xq.scales.data();
  quantize_activation(x.data(), 2048, 64, xq);  // smaller: same buffers
  quantize_activation(x.data(), 4096, 32, xq);
  EXPECT_EQ(xq.q.data(), q);
  EXPECT_EQ(xq.scales.data(), s);
  EXPECT_THROW(quantize_activation(x.data(), 100, 32, xq), KernelError);
  EXPECT_THROW(quantize_activation(x.data(), 64, 0, xq), KernelError);
}

TEST(KernelsQuantizeActivation, NonFiniteValuesMakeTheirGroupNaN) {
  std::vector<float> x(64, 1.0f);
  x[40] = INFINITY;
  QuantizedActivation xq;
  quantize_activation(x.data(), 64, 32, xq);
  EXPECT_EQ(xq.scales[0], 1.0f / 127.0f);
  EXPECT_TRUE(std::isnan(xq.scales[1]));
  const Matrix m = encode_matrix(std::vector<float>(2 * 64, 0.5f).data(), 2, 64, DType::q8, 32);
  for_each_int8_path([&] {
    float y[2];
    matvec_range(m.view(), x.data(), &xq, y, 0, 2);
    EXPECT_TRUE(std::isnan(y[0]) && std::isnan(y[1]));
  });
}

// Every path against the double sum of the same quantised values, on whole matrices and
// on a row range that starts and ends off the multi-row blocks.
TEST(KernelsQuantizedDot, EveryPathMatchesTheExactSum) {
  std::mt19937 rng(33);
  for (const Shape& sh : shapes()) {
    SCOPED_TRACE(name(sh));
    const auto w = randn(sh.rows * sh.cols, rng);
    const Matrix m = encode_matrix(w.data(), sh.rows, sh.cols, sh.type, sh.group);
    const MatrixView v = m.view();
    const auto x = randn(sh.cols, rng);
    QuantizedActivation xq;
    quantize_activation(x.data(), sh.cols, sh.group, xq);
    std::vector<double> exact(size_t(sh.rows));
    for (int64_t r = 0; r < sh.rows; ++r) exact[size_t(r)] = ref::dot_row_quantized(v, r, xq);
    for_each_int8_path([&] {
      std::vector<float> y(size_t(sh.rows), NAN);
      matvec_range(v, x.data(), &xq, y.data(), 0, sh.rows);
      for (int64_t r = 0; r < sh.rows; ++r)
        ASSERT_NEAR(y[size_t(r)], exact[size_t(r)], quantized_tolerance(v, r, xq)) << "row " << r;
      // Rows [1, rows - 1) only: the others keep their poison.
      std::vector<float> part(size_t(sh.rows), -7.0f);
      if (sh.rows > 2) {
        matvec_range(v, x.data(), &xq, part.data(), 1, sh.rows - 1);
        EXPECT_EQ(part.front(), -7.0f);
        EXPECT_EQ(part.back(), -7.0f);
        for (int64_t r = 1; r < sh.rows - 1; ++r) ASSERT_EQ(part[size_t(r)], y[size_t(r)]) << "row " << r;
      }
      // y += alpha W x
      auto acc = randn(sh.rows, rng);
      const auto before = acc;
      matvec_add_range(v, x.data(), &xq, -0.625f, acc.data(), 0, sh.rows);
      for (int64_t r = 0; r < sh.rows; ++r)
        ASSERT_NEAR(acc[size_t(r)], before[size_t(r)] - 0.625 * exact[size_t(r)],
                    0.625 * quantized_tolerance(v, r, xq) + 1e-6 * std::fabs(before[size_t(r)]))
            << "row " << r;
    });
  }
}

// Packed weights (decode order, pack_for_dot): the x86 paths read only the packed copy, so
// the stored values they must not read are poisoned (every byte 0x5A, a matrix whose dots
// differ); every path still matches the exact sum of the true matrix. Shapes: one and
// several 256-column blocks, with and without a tail of each length 1-7 groups (960 = 3
// blocks and 6 groups, as nenya's d; odd tails end q4's in half a register), tails alone, row counts off the multi-row blocks; values: random, and the
// extremes that would overflow an int16 pair sum or a biased byte (q4 nibbles all 15 or all
// 0, q8 values +-127, x at +-127 in every lane).
TEST(KernelsPackedDot, EveryPathReadsThePackedCopyAndMatchesTheExactSum) {
  std::mt19937 rng(37);
  struct Case {
    DType type;
    int64_t rows, cols;
    int fill;  // -1: random weights; else every value byte set to this (q4: both nibbles)
    float x;   // 0: random x; else every x = this
  };
  std::vector<Case> cases;
  for (DType t : {DType::q8, DType::q4}) {
    for (int64_t rows : {1, 5, 13})
      for (int64_t cols : {256, 768, 2048, 32, 224, 288, 320, 352, 384, 416, 960}) cases.push_back({t, rows, cols, -1, 0.0f});
    for (int64_t cols : {512, 480, 416}) {
      cases.push_back({t, 6, cols, t == DType::q4 ? 0xFF : 127, 3.0f});
      cases.push_back({t, 6, cols, t == DType::q4 ? 0x00 : -127, 3.0f});
      cases.push_back({t, 6, cols, t == DType::q4 ? 0xFF : 127, -3.0f});
    }
  }
  for (const Case& cs : cases) {
    SCOPED_TRACE(std::string(to_string(cs.type)) + " " + std::to_string(cs.rows) + "x" + std::to_string(cs.cols) +
                 " fill " + std::to_string(cs.fill));
    Matrix m = encode_matrix(randn(cs.rows * cs.cols, rng).data(), cs.rows, cs.cols, cs.type, 32);
    if (cs.fill != -1) std::fill(m.values.begin(), m.values.end(), uint8_t(cs.fill));
    const MatrixView v = m.view();
    ASSERT_TRUE(packable(v));
    std::vector<uint8_t> packed(m.values.size());
    pack_for_dot(v, packed.data());
    const std::vector<uint8_t> poison(m.values.size(), 0x5A);
    MatrixView poisoned = v;
    poisoned.data = poison.data();
    poisoned.packed = packed.data();
    const auto x = cs.x == 0 ? randn(cs.cols, rng) : std::vector<float>(size_t(cs.cols), cs.x);
    QuantizedActivation xq;  // the arrangements of this precision alone: nothing reads the others
    quantize_activation(x.data(), cs.cols, 32, xq, activation_rows(cs.type));
    std::vector<double> exact(size_t(cs.rows));
    for (int64_t r = 0; r < cs.rows; ++r) exact[size_t(r)] = ref::dot_row_quantized(v, r, xq);
    for_each_int8_path([&] {
      const std::string path = active_int8_path();
      const bool reads_packed = path.rfind("avx", 0) == 0;  // the x86 paths; the others read `data`
      std::vector<float> y(size_t(cs.rows), NAN);
      MatrixView with_copy = v;
      with_copy.packed = packed.data();
      matvec_range(reads_packed ? poisoned : with_copy, x.data(), &xq, y.data(), 0, cs.rows);
      for (int64_t r = 0; r < cs.rows; ++r)
        ASSERT_NEAR(y[size_t(r)], exact[size_t(r)], quantized_tolerance(v, r, xq)) << "row " << r;
      // A slice of rows carries its part of the packed copy, wherever it starts and ends in
      // the copy's tiles of rows (four: q4, and q8 of more than one block and a tail), and its
      // rows give the same bits.
      for (int64_t first = 1; first < cs.rows; ++first)
        for (int64_t count : {int64_t(1), cs.rows - first}) {
          std::vector<float> part(size_t(count), NAN);
          matvec_range((reads_packed ? poisoned : with_copy).slice_rows(first, count), x.data(), &xq, part.data(), 0, count);
          for (int64_t r = 0; r < count; ++r) ASSERT_EQ(part[size_t(r)], y[size_t(first + r)]) << "slice at " << first;
        }
    });
  }
  const Matrix odd = encode_matrix(randn(4 * 128, rng).data(), 4, 128, DType::q8, 64);  // decode order is for group 32
  EXPECT_FALSE(packable(odd.view()));
  std::vector<uint8_t> out(odd.values.size());
  EXPECT_THROW(pack_for_dot(odd.view(), out.data()), KernelError);
}

// Gathered packed rows (the LM head's candidates) are the packed copy of a matrix of those
// rows alone: the oracle packs that matrix from its own rows. Row counts across the tiles of
// four (q4, and q8 of 960 columns), with and without a tail, from a whole matrix and from a
// slice.
TEST(KernelsPackedDot, GatheredRowsAreThePackedCopyOfThoseRows) {
  std::mt19937 rng(38);
  for (DType t : {DType::q8, DType::q4})
    for (int64_t cols : {256, 960, 32}) {
      SCOPED_TRACE(std::string(to_string(t)) + " x " + std::to_string(cols));
      const int64_t rows = 11;
      const Matrix m = encode_matrix(randn(rows * cols, rng).data(), rows, cols, t, 32);
      std::vector<uint8_t> packed(m.values.size());
      pack_for_dot(m.view(), packed.data());
      MatrixView v = m.view();
      v.packed = packed.data();
      const MatrixView slice = v.slice_rows(3, 7);  // rows 3..9 of the copy: tiles cut at both ends
      for (const auto& [from, picks] : {std::pair{v, std::vector<int32_t>{10, 0, 5, 5, 3, 9, 1}},
                                        std::pair{slice, std::vector<int32_t>{6, 0, 2, 1, 5}}}) {
        const int64_t n = int64_t(picks.size()), row_bytes = m.view().row_bytes();
        Matrix alone = m;  // the picked rows, as a matrix of their own
        alone.rows = n;
        alone.values.resize(size_t(n * row_bytes));
        for (int64_t k = 0; k < n; ++k)
          std::copy_n(static_cast<const uint8_t*>(from.data) + picks[size_t(k)] * row_bytes, row_bytes,
                      alone.values.begin() + k * row_bytes);
        std::vector<uint8_t> expected(alone.values.size()), gathered(alone.values.size(), 0xEE);
        pack_for_dot(alone.view(), expected.data());
        gather_packed_rows(from, picks.data(), n, gathered.data());
        EXPECT_EQ(gathered, expected);
      }
      const int32_t outside = int32_t(rows);
      std::vector<uint8_t> out(size_t(v.row_bytes()));
      EXPECT_THROW(gather_packed_rows(v, &outside, 1, out.data()), KernelError);
    }
}

// The error that activation quantisation adds to the f32 product: |x_i - s_g q_i| <= s_g / 2,
// so |W[r] . x - W[r] . x_q| <= sum_g s_g / 2 sum_{i in g} |W[r,i]| (plus f32 rounding).
TEST(KernelsQuantizedDot, QuantisationErrorIsBoundedByHalfAStep) {
  std::mt19937 rng(34);
  for (DType t : {DType::q8, DType::q4})
    for (int group : {32, 128}) {
      const int64_t rows = 33, cols = 8 * group;
      SCOPED_TRACE(std::string(to_string(t)) + " G " + std::to_string(group));
      const auto w = randn(rows * cols, rng);
      const Matrix m = encode_matrix(w.data(), rows, cols, t, group);
      const MatrixView v = m.view();
      const auto x = randn(cols, rng);
      std::vector<float> y(rows);
      matvec(v, x.data(), y.data());
      QuantizedActivation xq;
      quantize_activation(x.data(), cols, group, xq);
      double worst = 0;
      for (int64_t r = 0; r < rows; ++r) {
        double bound = 0, abs_dot = 0;
        for (int64_t c = 0; c < cols; ++c) {
          bound += 0.5 * xq.scales[size_t(c / group)] * std::fabs(ref::weight(v, r, c));
          abs_dot += std::fabs(double(ref::weight(v, r, c)) * x[size_t(c)]);
        }
        const double err = std::fabs(double(y[size_t(r)]) - ref::dot_row(v, r, x.data()));
        ASSERT_LE(err, bound + 1e-5 * abs_dot) << "row " << r;
        worst = std::max(worst, err / bound);
      }
      // The bound is reached only when every rounding error points the same way; random
      // data lands far inside it, and a kernel that ignored x's scales would not.
      EXPECT_LT(worst, 0.5);
    }
}

// Attention scores of int8 query heads against int8 cache rows, on every path: the int32
// sums are exact, so each score is (scale s_v) s_j isum rounded three times in f32 (4 ulps
// of it allowed); a path that dropped VNNI's 128 sum q offset, a column or a row is off by
// far more. Sizes cover the 4 x 4 / 4 x 2 / 1 x 4 blocks and their remainders, head sizes
// that are not a multiple of the 16- or 32-byte step (the tail columns), and keys that
// include -128 (which a restored cache may hold). Each row is its own allocation of dh bytes,
// so a read past it is one the sanitiser build reports.
TEST(KernelsQuantizedDot, ScoresOfInt8HeadsAreTheIntegerSums) {
  std::mt19937 rng(37);
  std::uniform_int_distribution<int> byte(-128, 127);
  for_each_int8_path([&] {
    for (int64_t dh : {8, 16, 40, 64, 80, 128, 136})
      for (int64_t n_q : {1, 3, 4, 5, 8})
        for (int64_t n_rows : {1, 2, 3, 4, 5, 7, 67}) {
          SCOPED_TRACE("dh " + std::to_string(dh) + " heads " + std::to_string(n_q) + " rows " + std::to_string(n_rows));
          const auto x = randn(n_q * dh, rng);
          std::vector<int8_t> q(static_cast<size_t>(n_q * dh));
          std::vector<float> q_scale(static_cast<size_t>(n_q));
          std::vector<int32_t> q_sum(static_cast<size_t>(n_q));
          quantize_heads(x.data(), n_q, dh, q.data(), q_scale.data(), q_sum.data());
          std::vector<std::vector<int8_t>> rows(static_cast<size_t>(n_rows), std::vector<int8_t>(static_cast<size_t>(dh)));
          std::vector<const int8_t*> k;
          std::vector<float> k_scale;
          for (auto& row : rows) {
            for (auto& b : row) b = int8_t(byte(rng));
            k.push_back(row.data());
            k_scale.push_back(std::uniform_real_distribution<float>(0.001f, 0.1f)(rng));
          }
          const int64_t lds = n_rows + 3;
          const float scale = 0.0883883f;
          std::vector<float> s(size_t(n_q * lds), NAN);
          scores_rows_int8({q.data(), dh, q_scale.data(), q_sum.data()}, n_q, k.data(), k_scale.data(), n_rows, dh,
                           scale, s.data(), lds);
          for (int64_t v = 0; v < n_q; ++v)
            for (int64_t j = 0; j < n_rows; ++j) {
              int64_t isum = 0;
              for (int64_t i = 0; i < dh; ++i) isum += int64_t(q[size_t(v * dh + i)]) * rows[size_t(j)][size_t(i)];
              const double exact = double(scale) * q_scale[size_t(v)] * k_scale[size_t(j)] * double(isum);
              ASSERT_NEAR(s[size_t(v * lds + j)], exact, 4 * 0x1p-24 * std::fabs(exact)) << v << " " << j;
            }
        }
  });
}

// Each head gets its own scale: the definition of quantize_activation with one group per head.
TEST(KernelsQuantizedDot, QuantizeHeadsScalesEachHead) {
  std::mt19937 rng(38);
  const int64_t n_q = 5, dh = 40;
  auto x = randn(n_q * dh, rng);
  for (int64_t i = 0; i < dh; ++i) x[size_t(2 * dh + i)] *= 100.0f;  // one loud head
  std::fill(x.begin() + 3 * dh, x.begin() + 4 * dh, 0.0f);           // one silent head
  std::vector<int8_t> q(static_cast<size_t>(n_q * dh));
  std::vector<float> scale(static_cast<size_t>(n_q));
  std::vector<int32_t> sum(static_cast<size_t>(n_q));
  quantize_heads(x.data(), n_q, dh, q.data(), scale.data(), sum.data());
  for (int64_t v = 0; v < n_q; ++v) {
    float top = 0;
    int32_t total = 0;
    for (int64_t i = 0; i < dh; ++i) top = std::max(top, std::fabs(x[size_t(v * dh + i)]));
    EXPECT_EQ(scale[size_t(v)], top / 127.0f) << v;
    for (int64_t i = 0; i < dh; ++i) {
      const float want = top > 0 ? std::nearbyint(x[size_t(v * dh + i)] / (top / 127.0f)) : 0.0f;
      EXPECT_EQ(q[size_t(v * dh + i)], int8_t(want)) << v << " " << i;
      total += q[size_t(v * dh + i)];
    }
    EXPECT_EQ(sum[size_t(v)], total) << v;
  }
}

// The automatic choice is the best path this CPU supports. The list is printed so that
// scripts/test-aarch64 can check which paths a run really covered (SDOT on one emulated
// CPU, not on the other).
TEST(KernelsQuantizedDot, ChoosesTheBestSupportedPath) {
  const std::vector<const char*> paths = supported_int8_paths();
  std::string list;
  for (const char* p : paths) list += std::string(" ") + p;
  std::printf("int8 paths on this CPU:%s\n", list.c_str());
  ASSERT_FALSE(paths.empty());
  EXPECT_STREQ(paths.back(), "scalar");
  set_int8_path(nullptr);
  EXPECT_STREQ(active_int8_path(), paths.front());
}

TEST(KernelsQuantizedDot, RejectsAMismatchedActivation) {
  std::mt19937 rng(35);
  const auto w = randn(4 * 128, rng);
  const Matrix m = encode_matrix(w.data(), 4, 128, DType::q8, 32);
  const auto x = randn(128, rng);
  QuantizedActivation xq;
  quantize_activation(x.data(), 128, 64, xq);  // group 64 for a group-32 matrix
  float y[4];
  EXPECT_THROW(matvec_range(m.view(), x.data(), &xq, y, 0, 4), KernelError);
  EXPECT_THROW(matvec_range(m.view(), x.data(), nullptr, y, 0, 4), KernelError);
  quantize_activation(x.data(), 64, 32, xq);  // 64 values for 128 columns
  EXPECT_THROW(matvec_add_range(m.view(), x.data(), &xq, 1.0f, y, 0, 4), KernelError);
  // Quantised for the other precision's rows only: q4's arrangements for q8 rows, and back.
  const Matrix m4 = encode_matrix(w.data(), 4, 128, DType::q4, 32);
  quantize_activation(x.data(), 128, 32, xq, kForQ4Rows);
  EXPECT_THROW(matvec_range(m.view(), x.data(), &xq, y, 0, 4), KernelError);
  EXPECT_NO_THROW(matvec_range(m4.view(), x.data(), &xq, y, 0, 4));
  quantize_activation(x.data(), 128, 32, xq, kForQ8Rows);
  EXPECT_THROW(matvec_range(m4.view(), x.data(), &xq, y, 0, 4), KernelError);
  EXPECT_NO_THROW(matvec_range(m.view(), x.data(), &xq, y, 0, 4));
  EXPECT_THROW(set_int8_path("no-such-path"), KernelError);
}

TEST(KernelsQuantizedDot, FloatMatricesIgnoreTheQuantisedActivation) {
  std::mt19937 rng(36);
  const auto w = randn(7 * 33, rng);
  const auto x = randn(33, rng);
  for (DType t : {DType::f32, DType::bf16}) {
    const Matrix m = encode_matrix(w.data(), 7, 33, t);
    std::vector<float> y(7), y_ref(7);
    matvec_range(m.view(), x.data(), nullptr, y.data(), 0, 7);
    matvec(m.view(), x.data(), y_ref.data());
    EXPECT_EQ(y, y_ref) << to_string(t);
  }
}

}  // namespace
}  // namespace wren::kernels
