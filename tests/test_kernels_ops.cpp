// Tests of kernels/ops.h: every dispatched kernel against its scalar reference on random
// inputs of odd sizes, on every Highway target this CPU runs; RoPE against the complex
// rotation it stands for; top-k ties; thread-count independence; the thread pool.
//
// Tolerances. Products: |y - y_ref| <= 1e-5 * sum_i |w_i x_i| + 1e-6 (f32 accumulation in
// a different order; the reference sums in double). Elementwise: a few f32 ulp, stated
// per test as a relative bound.
#include <gtest/gtest.h>
#include <hwy/targets.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <complex>
#include <random>

#include "kernels/ops.h"
#include "kernels/reference.h"
#include "test_util.h"
#include "kernels/threads.h"

namespace wren::kernels {
namespace {

using testing_util::for_each_target;

std::vector<float> randn(int64_t n, std::mt19937& rng, float scale = 1.0f) {
  std::normal_distribution<float> nd(0, scale);
  std::vector<float> v(static_cast<size_t>(n));
  for (auto& x : v) x = nd(rng);
  return v;
}

// A matrix case: type, columns and group (0 for f32 / bf16).
struct Case {
  DType type;
  int64_t cols;
  int group;
};
std::vector<Case> matrix_cases() {
  std::vector<Case> cases;
  for (int64_t cols : {1, 7, 33, 1001}) {
    cases.push_back({DType::f32, cols, 0});
    cases.push_back({DType::bf16, cols, 0});
  }
  for (int group : {32, 64, 128, 20})
    for (int64_t mult : {1, 3, 7}) {
      cases.push_back({DType::q8, group * mult, group});
      cases.push_back({DType::q4, group * mult, group});
    }
  return cases;
}
std::string name(const Case& c) {
  return std::string(to_string(c.type)) + " cols " + std::to_string(c.cols) + " G " +
         std::to_string(c.group);
}

// sum_c |W[r,c] x_c|: the scale of the rounding error of a row dot.
float abs_dot(const MatrixView& w, int64_t r, const float* x) {
  double s = 0;
  for (int64_t c = 0; c < w.cols; ++c) s += std::fabs(double(ref::weight(w, r, c)) * x[c]);
  return float(s);
}

TEST(KernelsMatvec, MatchesReference) {
  std::mt19937 rng(11);
  const int64_t rows = 37;
  for_each_target([&] {
    for (const Case& c : matrix_cases()) {
      SCOPED_TRACE(name(c));
      const auto w = randn(rows * c.cols, rng);
      const Matrix m = encode_matrix(w.data(), rows, c.cols, c.type, c.group);
      const MatrixView v = m.view();
      const auto x = randn(c.cols, rng);
      std::vector<float> y(rows), y_ref(rows);
      matvec(v, x.data(), y.data());
      ref::matvec(v, x.data(), y_ref.data());
      auto y_add = randn(rows, rng), y_add_ref = y_add;
      matvec_add(v, x.data(), 0.7f, y_add.data());
      // q8 / q4 matvec quantises x to 8 bits (test_kernels_quantized.cpp bounds that error
      // and tests every integer path): its oracle is the product with the quantised x.
      // dot_row stays in f32.
      const bool quantized = c.type == DType::q8 || c.type == DType::q4;
      QuantizedActivation xq;
      if (quantized) quantize_activation(x.data(), c.cols, c.group, xq);
      for (int64_t r = 0; r < rows; ++r) {
        const float tol = 1e-5f * abs_dot(v, r, x.data()) + 1e-6f;
        ASSERT_NEAR(dot_row(v, r, x.data()), y_ref[size_t(r)], tol) << "row " << r;
        if (quantized) y_ref[size_t(r)] = float(ref::dot_row_quantized(v, r, xq));
        y_add_ref[size_t(r)] += 0.7f * y_ref[size_t(r)];
        ASSERT_NEAR(y[size_t(r)], y_ref[size_t(r)], tol) << "row " << r;
        // f32 / bf16 rows go four at a time (a shared load of x) and keep a lone row's bits.
        if (!quantized) {
          ASSERT_EQ(y[size_t(r)], dot_row(v, r, x.data())) << "row " << r;
        }
        ASSERT_NEAR(y_add[size_t(r)], y_add_ref[size_t(r)], tol + 1e-6f * std::fabs(y_add_ref[size_t(r)]));
      }
    }
  });
}

TEST(KernelsAddRows, MatchesReference) {
  std::mt19937 rng(12);
  const int64_t rows = 41;
  // Rows in arbitrary order, one repeated; the rest (the neurons that did not fire) unread.
  const std::vector<int32_t> list = {5, 0, 40, 17, 5, 33, 2};
  const std::vector<float> coeffs = {0.5f, -1.25f, 2.0f, 0.125f, 3.0f, -0.75f, 1.0f};
  // Rows of many groups too: the q8 / q4 rows' group scales are widened a vector at a time, in
  // spans of 64 groups (150 groups: two whole spans and a part, with a vector's remainder).
  std::vector<Case> cases = matrix_cases();
  cases.push_back({DType::q8, 32 * 150, 32});
  cases.push_back({DType::q8, 20 * 70, 20});
  cases.push_back({DType::q4, 32 * 150, 32});
  for_each_target([&] {
    for (const Case& c : cases) {
      SCOPED_TRACE(name(c));
      const auto w = randn(rows * c.cols, rng);
      const Matrix m = encode_matrix(w.data(), rows, c.cols, c.type, c.group);
      const MatrixView v = m.view();
      auto y = randn(c.cols, rng), y_ref = y;
      add_rows(v, list.data(), coeffs.data(), int64_t(list.size()), y.data());
      ref::add_rows(v, list.data(), coeffs.data(), int64_t(list.size()), y_ref.data());
      for (int64_t col = 0; col < c.cols; ++col) {
        double scale = std::fabs(y_ref[size_t(col)]);
        for (size_t i = 0; i < list.size(); ++i)
          scale += std::fabs(coeffs[i] * ref::weight(v, list[i], col));
        ASSERT_NEAR(y[size_t(col)], y_ref[size_t(col)], 1e-6 * scale + 1e-7) << "col " << col;
      }
    }
  });
}

// add_rows reads only the listed rows: every other row (values and, for q8 / q4, scales)
// holds NaN, and the result must equal the one from a clean matrix.
TEST(KernelsAddRows, ReadsOnlyTheListedRows) {
  std::mt19937 rng(16);
  const int64_t rows = 29;
  const std::vector<int32_t> list = {3, 27, 11, 3, 0};
  const std::vector<float> coeffs = {0.5f, -2.0f, 1.5f, 0.25f, -1.0f};
  for_each_target([&] {
    for (const Case& c : matrix_cases()) {
      SCOPED_TRACE(name(c));
      const auto w = randn(rows * c.cols, rng);
      const Matrix clean = encode_matrix(w.data(), rows, c.cols, c.type, c.group);
      Matrix poisoned = clean;
      const int64_t groups = c.group ? c.cols / c.group : 0;
      const size_t row_bytes = size_t(clean.view().row_bytes());
      for (int64_t r = 0; r < rows; ++r) {
        if (std::find(list.begin(), list.end(), int32_t(r)) != list.end()) continue;
        uint8_t* v = poisoned.values.data() + size_t(r) * row_bytes;
        if (c.type == DType::f32)
          std::fill_n(reinterpret_cast<float*>(v), c.cols, NAN);
        else if (c.type == DType::bf16)
          std::fill_n(reinterpret_cast<BF16*>(v), c.cols, f32_to_bf16(NAN));
        else  // every int8 / nibble value is a number: the poison is the group scales
          std::fill_n(poisoned.scales.data() + r * groups, groups, f32_to_f16(NAN));
      }
      auto y = randn(c.cols, rng), y_clean = y;
      add_rows(poisoned.view(), list.data(), coeffs.data(), int64_t(list.size()), y.data());
      add_rows(clean.view(), list.data(), coeffs.data(), int64_t(list.size()), y_clean.data());
      ASSERT_EQ(y, y_clean);
    }
  });
}

TEST(KernelsMatmul, MatchesReference) {
  std::mt19937 rng(13);
  const int64_t rows = 23;
  for_each_target([&] {
    for (const Case& c : matrix_cases()) {
      if (c.cols > 500 && c.type != DType::q8) continue;  // keep the reference loop short
      for (int64_t tokens : {1, 5, 37}) {
        SCOPED_TRACE(name(c) + " tokens " + std::to_string(tokens));
        const auto w = randn(rows * c.cols, rng);
        const Matrix m = encode_matrix(w.data(), rows, c.cols, c.type, c.group);
        const MatrixView v = m.view();
        const auto x = randn(tokens * c.cols, rng);
        std::vector<float> y(static_cast<size_t>(tokens * rows)), y_ref(static_cast<size_t>(tokens * rows));
        matmul(v, x.data(), tokens, y.data());
        ref::matmul(v, x.data(), tokens, y_ref.data());
        for (int64_t t = 0; t < tokens; ++t)
          for (int64_t r = 0; r < rows; ++r) {
            const float tol = 1e-5f * abs_dot(v, r, x.data() + t * c.cols) + 1e-6f;
            ASSERT_NEAR(y[size_t(t * rows + r)], y_ref[size_t(t * rows + r)], tol)
                << "token " << t << " row " << r;
          }
      }
    }
  });
}

TEST(KernelsThreads, ResultsDoNotDependOnThreadCount) {
  std::mt19937 rng(14);
  const int64_t rows = 301, cols = 1024, tokens = 9;
  const auto w = randn(rows * cols, rng);
  const auto x = randn(tokens * cols, rng);
  std::vector<int32_t> list(150);
  std::vector<float> coeffs(150);
  for (size_t i = 0; i < list.size(); ++i) list[i] = int32_t((i * 7) % rows), coeffs[i] = float(i) / 50 - 1;
  for (DType t : {DType::f32, DType::bf16, DType::q8, DType::q4}) {
    SCOPED_TRACE(to_string(t));
    const Matrix m = encode_matrix(w.data(), rows, cols, t, 64);
    std::vector<float> y1(rows), y_mm1(static_cast<size_t>(tokens * rows)), y_add1(cols, 0.5f);
    matvec(m.view(), x.data(), y1.data(), nullptr);
    matmul(m.view(), x.data(), tokens, y_mm1.data(), nullptr);
    add_rows(m.view(), list.data(), coeffs.data(), int64_t(list.size()), y_add1.data(), nullptr);
    for (int threads : {2, 3, 4}) {
      ThreadPool pool(threads);
      std::vector<float> y(rows), y_mm(static_cast<size_t>(tokens * rows)), y_add(cols, 0.5f);
      matvec(m.view(), x.data(), y.data(), &pool);
      matmul(m.view(), x.data(), tokens, y_mm.data(), &pool);
      add_rows(m.view(), list.data(), coeffs.data(), int64_t(list.size()), y_add.data(), &pool);
      EXPECT_EQ(y, y1) << threads << " threads";
      EXPECT_EQ(y_mm, y_mm1) << threads << " threads";
      EXPECT_EQ(y_add, y_add1) << threads << " threads";
    }
  }
}

TEST(KernelsVector, DotAxpyAndAxpbyMatchReference) {
  std::mt19937 rng(15);
  for_each_target([&] {
    for (int64_t n : {1, 3, 17, 1001, 4099}) {
      const auto a = randn(n, rng), b = randn(n, rng);
      double scale = 0;
      for (int64_t i = 0; i < n; ++i) scale += std::fabs(double(a[size_t(i)]) * b[size_t(i)]);
      EXPECT_NEAR(dot(a.data(), b.data(), n), ref::dot(a.data(), b.data(), n), 1e-5 * scale + 1e-6) << n;
      auto y = randn(n, rng), y_ref = y;
      axpy(-0.3f, a.data(), n, y.data());
      ref::axpy(-0.3f, a.data(), n, y_ref.data());
      for (int64_t i = 0; i < n; ++i)
        ASSERT_NEAR(y[size_t(i)], y_ref[size_t(i)], 1e-6f * (std::fabs(y_ref[size_t(i)]) + 1)) << n;
      // y = a x + b y, b = 0 and 1 among the coefficients (finite y: 0 * y is 0).
      for (const float b_coeff : {0.0f, 1.0f, 0.37f}) {
        auto z = randn(n, rng), z_ref = z;
        axpby(1.7f, a.data(), b_coeff, n, z.data());
        ref::axpby(1.7f, a.data(), b_coeff, n, z_ref.data());
        for (int64_t i = 0; i < n; ++i)
          ASSERT_NEAR(z[size_t(i)], z_ref[size_t(i)], 1e-6f * (std::fabs(z_ref[size_t(i)]) + 1)) << n << " b " << b_coeff;
      }
    }
  });
}

// S^T a and S^T b against sums in double: odd row counts (the four-row steps' remainder) and
// odd column counts (each vector width's scalar tail), dk x dv = 128 x 128 as GDN-2 has.
TEST(KernelsVector, StateProductsMatchReference) {
  std::mt19937 rng(16);
  for_each_target([&] {
    for (auto [rows, cols] : std::vector<std::pair<int64_t, int64_t>>{{1, 1}, {3, 17}, {7, 33}, {128, 128}, {130, 100}}) {
      const auto S = randn(rows * cols, rng), a = randn(rows, rng), b = randn(rows, rng);
      const size_t n = size_t(cols);
      std::vector<float> ya(n, NAN), yb(n, NAN), ra(n), rb(n);
      state_products(S.data(), rows, cols, a.data(), b.data(), ya.data(), yb.data());
      ref::state_products(S.data(), rows, cols, a.data(), b.data(), ra.data(), rb.data());
      for (int64_t c = 0; c < cols; ++c) {
        double scale_a = 0, scale_b = 0;
        for (int64_t r = 0; r < rows; ++r)
          scale_a += std::fabs(double(a[size_t(r)]) * S[size_t(r * cols + c)]),
              scale_b += std::fabs(double(b[size_t(r)]) * S[size_t(r * cols + c)]);
        ASSERT_NEAR(ya[size_t(c)], ra[size_t(c)], 1e-6 * scale_a + 1e-7) << rows << "x" << cols << " column " << c;
        ASSERT_NEAR(yb[size_t(c)], rb[size_t(c)], 1e-6 * scale_b + 1e-7) << rows << "x" << cols << " column " << c;
      }
    }
  });
}

// S = Diag(decay) S + k delta^T against the rewrite in double, and bit for bit against axpby
// row by row (the step it replaces, whose bits the GDN-2 parity tests were set on).
TEST(KernelsVector, StateDecayAddMatchesReference) {
  std::mt19937 rng(17);
  for_each_target([&] {
    for (auto [rows, cols] : std::vector<std::pair<int64_t, int64_t>>{{1, 1}, {3, 17}, {128, 128}, {5, 100}}) {
      const auto S0 = randn(rows * cols, rng), decay = randn(rows, rng), k = randn(rows, rng), delta = randn(cols, rng);
      auto S = S0, S_ref = S0, S_rows = S0;
      state_decay_add(S.data(), rows, cols, decay.data(), k.data(), delta.data());
      ref::state_decay_add(S_ref.data(), rows, cols, decay.data(), k.data(), delta.data());
      for (int64_t r = 0; r < rows; ++r) axpby(k[size_t(r)], delta.data(), decay[size_t(r)], cols, S_rows.data() + r * cols);
      for (size_t i = 0; i < S.size(); ++i) {
        ASSERT_NEAR(S[i], S_ref[i], 1e-6f * (std::fabs(S_ref[i]) + 1)) << rows << "x" << cols << " at " << i;
        ASSERT_EQ(S[i], S_rows[i]) << rows << "x" << cols << " at " << i;
      }
    }
  });
}

// Cache rows as stored (kernels::CacheRows): f32 rows, bf16 or f16 rows (the f32 values rounded),
// or int8 rows with a scale each.
enum class Stored { f32, bf16, f16, q8 };
const char* name_of(Stored t) {
  return t == Stored::f32 ? "f32" : t == Stored::bf16 ? "bf16" : t == Stored::f16 ? "f16" : "q8";
}
struct StoredRows {
  std::vector<float> f32;
  std::vector<BF16> bf16;
  std::vector<F16> f16;
  std::vector<int8_t> q8;
  std::vector<float> scale;
  std::vector<const float*> f32_rows;
  std::vector<const BF16*> bf16_rows;
  std::vector<const F16*> f16_rows;
  std::vector<const int8_t*> q8_rows;
  // Row j's value i as the kernels must read it.
  double at(Stored t, int64_t j, int64_t i, int64_t n) const {
    const size_t k = size_t(j * n + i);
    return t == Stored::q8     ? double(scale[size_t(j)]) * q8[k]
           : t == Stored::bf16 ? bf16_to_f32(bf16[k])
           : t == Stored::f16  ? f16_to_f32(f16[k])
                               : f32[k];
  }
  CacheRows rows(Stored t) const {
    if (t == Stored::q8) return {.q8 = q8_rows.data(), .scale = scale.data()};
    if (t == Stored::bf16) return {.bf16 = bf16_rows.data()};
    if (t == Stored::f16) return {.f16 = f16_rows.data()};
    return {.f32 = f32_rows.data()};
  }
};

// n_rows rows of n values; rows with skipped(j) are null (a kernel that read one would crash).
template <class Skipped>
StoredRows stored_rows(int64_t n_rows, int64_t n, std::mt19937& rng, Skipped skipped) {
  StoredRows s;
  s.f32 = randn(n_rows * n, rng);
  for (float v : s.f32) s.bf16.push_back(f32_to_bf16(v)), s.f16.push_back(f32_to_f16(v));
  std::uniform_int_distribution<int> value(-127, 127);
  std::uniform_real_distribution<float> factor(0.001f, 0.02f);
  for (int64_t i = 0; i < n_rows * n; ++i) s.q8.push_back(int8_t(value(rng)));
  for (int64_t j = 0; j < n_rows; ++j) {
    s.scale.push_back(factor(rng));
    s.f32_rows.push_back(skipped(j) ? nullptr : s.f32.data() + j * n);
    s.bf16_rows.push_back(skipped(j) ? nullptr : s.bf16.data() + j * n);
    s.f16_rows.push_back(skipped(j) ? nullptr : s.f16.data() + j * n);
    s.q8_rows.push_back(skipped(j) ? nullptr : s.q8.data() + j * n);
  }
  return s;
}

// The largest value over rows, per column, folded into out as std::max(out, x) would: on
// every Highway target, at lengths covering the vector width and the scalar tail, with NaN
// in x (passed over) and in out (kept), +-0 and +-inf.
TEST(KernelsVector, MaxRowsIsStdMaxOverRows) {
  std::mt19937 rng(18);
  for_each_target([&] {
    for (int64_t n : {1, 7, 16, 33, 64})
      for (int64_t rows : {0, 1, 3, 8}) {
        SCOPED_TRACE("n " + std::to_string(n) + " rows " + std::to_string(rows));
        const int64_t ldx = n + 5;
        auto x = randn(std::max<int64_t>(rows, 1) * ldx, rng);
        auto out = randn(n, rng);
        for (size_t i = 0; i < x.size(); i += 7) x[i] = i % 3 == 0 ? NAN : i % 3 == 1 ? -0.0f : INFINITY;
        out[0] = NAN;
        if (n > 2) out[2] = -INFINITY;
        for (int64_t j = 3; j < n; j += 4) {  // ties of -0 in out with +0 in x: out keeps its -0
          out[size_t(j)] = -0.0f;
          for (int64_t r = 0; r < rows; ++r) x[size_t(r * ldx + j)] = 0.0f;
        }
        auto want = out;
        for (int64_t j = 0; j < n; ++j)
          for (int64_t r = 0; r < rows; ++r) want[size_t(j)] = std::max(want[size_t(j)], x[size_t(r * ldx + j)]);
        max_rows(x.data(), ldx, rows, n, out.data());
        for (int64_t j = 0; j < n; ++j) {
          const float a = out[size_t(j)], b = want[size_t(j)];
          ASSERT_TRUE(std::isnan(a) ? std::isnan(b) : a == b && std::signbit(a) == std::signbit(b)) << j << ": " << a << " vs " << b;
        }
      }
  });
}

// Decode's tiles read the rows as the cache stores them: scores of a few query heads with f32,
// bf16, f16 or int8 key rows (their scale and the logit scale applied), and value sums in which a null
// row is never read. Against double loops, at sizes covering the 4 x 4, 4 x 2 and 1 x 4 blocks,
// the vector widths (up to 16 f32 lanes), the scalar tails and lists past one of 64 rows.
TEST(KernelsVector, ScoresRowsAndWeightedSumsReadRowsAsStored) {
  std::mt19937 rng(16);
  for_each_target([&] {
    for (Stored in : {Stored::f32, Stored::bf16, Stored::f16, Stored::q8})
      for (int64_t dh : {1, 5, 64, 80, 129})
        for (int64_t n_q : {1, 4, 7, 9, 16})
          for (int64_t n_rows : {1, 3, 6, 7, 8, 64, 67}) {
            SCOPED_TRACE(std::string(name_of(in)) + " dh " + std::to_string(dh) + " queries " +
                         std::to_string(n_q) + " rows " + std::to_string(n_rows));
            const int64_t ldq = dh + 3, lds = n_rows + 2;
            const float scale = 0.37f;
            const auto q = randn(n_q * ldq, rng);
            const StoredRows keys = stored_rows(n_rows, dh, rng, [](int64_t) { return false; });
            std::vector<float> s(size_t(n_q * lds), NAN);
            scores_rows(q.data(), ldq, n_q, keys.rows(in), n_rows, dh, scale, s.data(), lds);
            for (int64_t v = 0; v < n_q; ++v)
              for (int64_t j = 0; j < n_rows; ++j) {
                double exact = 0, size = 0;
                for (int64_t i = 0; i < dh; ++i) {
                  const double term = double(q[size_t(v * ldq + i)]) * keys.at(in, j, i, dh);
                  exact += term, size += std::fabs(term);
                }
                ASSERT_NEAR(s[size_t(v * lds + j)], scale * exact, 1e-6 * scale * size + 1e-30) << v << " " << j;
              }

            const int64_t ldp = n_rows + 3, ldo = dh + 1;
            const auto p = randn(n_q * ldp, rng), o0 = randn(n_q * ldo, rng);
            const StoredRows values = stored_rows(n_rows, dh, rng, [](int64_t j) { return j % 3 == 1; });
            auto o = o0;
            weighted_sum_tile(p.data(), ldp, n_q, values.rows(in), n_rows, dh, o.data(), ldo);
            for (int64_t v = 0; v < n_q; ++v)
              for (int64_t c = 0; c < dh; ++c) {
                double exact = o0[size_t(v * ldo + c)], size = std::fabs(exact);
                for (int64_t j = 0; j < n_rows; ++j)
                  if (j % 3 != 1) {
                    const double term = double(p[size_t(v * ldp + j)]) * values.at(in, j, c, dh);
                    exact += term, size += std::fabs(term);
                  }
                ASSERT_NEAR(o[size_t(v * ldo + c)], exact, 1e-6 * size) << v << " " << c;
              }
          }
  });
}

// Prefill attention's tiles against double loops: scores of query vectors with transposed
// keys, and value sums in which a null row is skipped. Sizes cover the four-vector blocks,
// the vector width (up to 16 f32 lanes) and the scalar tails. The skipped rows point at NaN
// in a poisoned copy: the result must not change.
TEST(KernelsVector, ScoresAndWeightedSumTilesAreTheProducts) {
  std::mt19937 rng(17);
  for_each_target([&] {
    for (int64_t dh : {1, 5, 64, 80})
      for (int64_t n_q : {1, 4, 7, 9})
        for (int64_t n_keys : {1, 15, 32, 64, 70}) {
          SCOPED_TRACE("dh " + std::to_string(dh) + " queries " + std::to_string(n_q) + " keys " + std::to_string(n_keys));
          const int64_t ldq = dh + 3, ldk = n_keys + 2, lds = n_keys + 1;
          const auto q = randn(n_q * ldq, rng), kt = randn(dh * ldk, rng);
          std::vector<float> s(size_t(n_q * lds), NAN);
          scores_tile(q.data(), ldq, n_q, kt.data(), ldk, n_keys, dh, s.data(), lds);
          for (int64_t v = 0; v < n_q; ++v)
            for (int64_t j = 0; j < n_keys; ++j) {
              double exact = 0;
              for (int64_t i = 0; i < dh; ++i) exact += double(q[size_t(v * ldq + i)]) * kt[size_t(i * ldk + j)];
              ASSERT_NEAR(s[size_t(v * lds + j)], exact, 1e-5 * (std::sqrt(double(dh)) + std::fabs(exact))) << v << " " << j;
            }

          const int64_t ldp = n_keys + 3, ldo = dh + 1;
          const auto p = randn(n_q * ldp, rng), values = randn(n_keys * dh, rng), o0 = randn(n_q * ldo, rng);
          auto poisoned = values;
          std::vector<const float*> rows, poisoned_rows;
          for (int64_t j = 0; j < n_keys; ++j) {
            const bool skipped = j % 3 == 1;
            if (skipped) std::fill(poisoned.begin() + j * dh, poisoned.begin() + (j + 1) * dh, NAN);
            rows.push_back(skipped ? nullptr : values.data() + j * dh);
            poisoned_rows.push_back(skipped ? nullptr : poisoned.data() + j * dh);
          }
          auto o = o0, o_poisoned = o0;
          weighted_sum_tile(p.data(), ldp, n_q, CacheRows{rows.data()}, n_keys, dh, o.data(), ldo);
          weighted_sum_tile(p.data(), ldp, n_q, CacheRows{poisoned_rows.data()}, n_keys, dh, o_poisoned.data(), ldo);
          for (int64_t v = 0; v < n_q; ++v)
            for (int64_t c = 0; c < dh; ++c) {
              double exact = o0[size_t(v * ldo + c)];
              for (int64_t j = 0; j < n_keys; ++j)
                if (j % 3 != 1) exact += double(p[size_t(v * ldp + j)]) * values[size_t(j * dh + c)];
              const size_t at = size_t(v * ldo + c);
              ASSERT_NEAR(o[at], exact, 1e-5 * (std::sqrt(double(n_keys)) + std::fabs(exact))) << v << " " << c;
              ASSERT_EQ(o_poisoned[at], o[at]);
            }
        }
  });
}

// |a - b| <= rel * |b| + abs, element by element.
void expect_close(const std::vector<float>& a, const std::vector<float>& b, double rel,
                  double abs, const std::string& what) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i)
    ASSERT_NEAR(a[i], b[i], rel * std::fabs(b[i]) + abs) << what << " at " << i << " of " << a.size();
}

TEST(KernelsNorm, RmsNormAndL2MatchReference) {
  std::mt19937 rng(16);
  for_each_target([&] {
    for (int64_t n : {1, 5, 17, 960, 1001}) {
      const auto x = randn(n, rng, 3.0f), gain = randn(n, rng, 0.2f);
      for (int mode = 0; mode < 3; ++mode) {  // no gain, gain, unit-offset gain
        const float* g = mode == 0 ? nullptr : gain.data();
        std::vector<float> out(static_cast<size_t>(n)), out_ref(static_cast<size_t>(n));
        rmsnorm(x.data(), g, n, 1e-6f, mode == 2, out.data());
        ref::rmsnorm(x.data(), g, n, 1e-6f, mode == 2, out_ref.data());
        expect_close(out, out_ref, 4e-6, 1e-7, "rmsnorm mode " + std::to_string(mode));
      }
      std::vector<float> u(static_cast<size_t>(n)), u_ref(static_cast<size_t>(n));
      l2_normalize(x.data(), n, 1e-6f, u.data());
      ref::l2_normalize(x.data(), n, 1e-6f, u_ref.data());
      expect_close(u, u_ref, 4e-6, 1e-7, "l2_normalize");
      const double ss = ref::dot(x.data(), x.data(), n);  // |u|^2 = ss / (ss + eps)
      EXPECT_NEAR(ref::dot(u.data(), u.data(), n), ss / (ss + 1e-6), 1e-5);
      auto in_place = x;  // in place gives the same result
      rmsnorm(in_place.data(), gain.data(), n, 1e-6f, false, in_place.data());
      std::vector<float> out(static_cast<size_t>(n));
      rmsnorm(x.data(), gain.data(), n, 1e-6f, false, out.data());
      EXPECT_EQ(in_place, out);
    }
  });
}

TEST(KernelsSoftmax, MatchesReferenceAndHandlesMasks) {
  std::mt19937 rng(17);
  for_each_target([&] {
    for (int64_t n : {1, 6, 19, 1003}) {
      auto x = randn(n, rng, 20.0f);  // wide logits: stability matters
      if (n > 2) x[1] = -INFINITY;
      auto x_ref = x;
      softmax(x.data(), n);
      ref::softmax(x_ref.data(), n);
      expect_close(x, x_ref, 1e-5, 1e-7, "softmax");
      double sum = 0;
      for (float v : x) sum += v;
      EXPECT_NEAR(sum, 1.0, 1e-5);
      if (n > 2) {
        EXPECT_EQ(x[1], 0.0f);
      }
    }
    std::vector<float> masked(9, -INFINITY);
    softmax(masked.data(), 9);
    EXPECT_EQ(masked, std::vector<float>(9, 0.0f));
  });
}

// The unnormalised chunk softmax against the plain one: the same max, each value within its
// rounding, the sum within its f32 lanes' rounding; -inf entries 0, an all -inf chunk 0 / -inf.
TEST(KernelsSoftmax, ExpBelowMaxMatchesReference) {
  std::mt19937 rng(19);
  for_each_target([&] {
    for (int64_t n : {1, 7, 16, 33, 256, 1003}) {
      auto x = randn(n, rng, 20.0f);
      if (n > 2) x[2] = -INFINITY;
      auto x_ref = x;
      const std::vector<float> logits = x;
      const ExpSum got = exp_below_max(x.data(), n), want = ref::exp_below_max(x_ref.data(), n);
      EXPECT_EQ(got.max, want.max) << n;
      // x - max is rounded to f32 first (as attention always did): e^(d (1 + u)) is e^d within
      // |d| 2^-24 relative, besides exp's own few ulp.
      for (int64_t i = 0; i < n; ++i) {
        if (logits[size_t(i)] == -INFINITY) continue;  // 0 both ways, checked below
        const double d = std::fabs(double(logits[size_t(i)]) - want.max);
        ASSERT_NEAR(x[size_t(i)], x_ref[size_t(i)], (4e-7 + d * 0x1p-24) * x_ref[size_t(i)] + 1e-37) << n << " " << i;
      }
      EXPECT_NEAR(got.sum, want.sum, 1e-6 * want.sum) << n;
      EXPECT_GE(want.sum, 1.0);  // the max's own e^0
      if (n > 2) {
        EXPECT_EQ(x[2], 0.0f);
      }
    }
    std::vector<float> masked(9, -INFINITY);
    const ExpSum none = exp_below_max(masked.data(), 9);
    EXPECT_EQ(none.max, -INFINITY);
    EXPECT_EQ(none.sum, 0.0);
    EXPECT_EQ(masked, std::vector<float>(9, 0.0f));
  });
}

TEST(KernelsActivations, MatchReference) {
  std::mt19937 rng(18);
  using Fn = void (*)(const float*, int64_t, float*);
  struct Act { const char* name; Fn simd, reference; float lo, hi; double rel, abs; };
  const Act acts[] = {
      {"exp", exp, ref::exp, -100, 88, 4e-7, 1e-37},
      {"sigmoid", sigmoid, ref::sigmoid, -40, 40, 6e-7, 1e-30},
      {"silu", silu, ref::silu, -40, 40, 6e-7, 1e-30},
      {"softplus", softplus, ref::softplus, -40, 40, 2e-6, 1e-30},
      {"relu2", relu2, ref::relu2, -10, 10, 0, 0},
  };
  for_each_target([&] {
    for (const Act& a : acts)
      for (int64_t n : {1, 7, 33, 1001}) {
        std::uniform_real_distribution<float> u(a.lo, a.hi);
        std::vector<float> x(static_cast<size_t>(n));
        for (auto& v : x) v = u(rng);
        std::vector<float> y(static_cast<size_t>(n)), y_ref(static_cast<size_t>(n));
        a.simd(x.data(), n, y.data());
        a.reference(x.data(), n, y_ref.data());
        expect_close(y, y_ref, a.rel, a.abs, a.name);
      }
  });
}

// RoPE as a complex rotation: z_i = x_i + i x_{i+h} becomes z_i e^{i pos f_i}.
std::vector<float> rope_by_rotation(const std::vector<float>& x, int heads, int head_dim,
                                    int rotary_dim, const std::vector<float>& f, int64_t pos) {
  std::vector<float> out = x;
  const int h = rotary_dim / 2;
  for (int head = 0; head < heads; ++head)
    for (int i = 0; i < h; ++i) {
      const size_t a = size_t(head * head_dim + i), b = a + size_t(h);
      const std::complex<double> z(x[a], x[b]), r = z * std::polar(1.0, double(pos) * f[size_t(i)]);
      out[a] = float(r.real());
      out[b] = float(r.imag());
    }
  return out;
}

TEST(KernelsRope, MatchesComplexRotationAndReference) {
  std::mt19937 rng(19);
  for_each_target([&] {
    for (auto [head_dim, rotary_dim] : {std::pair{128, 128}, {64, 46}, {6, 2}, {96, 96}}) {
      const int heads = 3;
      const auto f = rope_inv_freq(rotary_dim, 10000.0);
      for (int64_t pos : {0, 1, 17, 5000, 131071}) {
        const auto x = randn(heads * head_dim, rng);
        auto y = x, y_ref = x;
        rope(y.data(), heads, head_dim, rotary_dim, f.data(), pos);
        ref::rope(y_ref.data(), heads, head_dim, rotary_dim, f.data(), pos);
        const auto expected = rope_by_rotation(x, heads, head_dim, rotary_dim, f, pos);
        expect_close(y_ref, expected, 1e-6, 1e-6, "reference rope");
        expect_close(y, expected, 2e-6, 2e-6, "rope hd " + std::to_string(head_dim) + " pos " + std::to_string(pos));
        for (int head = 0; head < heads; ++head)  // dimensions past rotary_dim pass through
          for (int i = rotary_dim; i < head_dim; ++i)
            ASSERT_EQ(y[size_t(head * head_dim + i)], x[size_t(head * head_dim + i)]);
      }
    }
  });
}

TEST(KernelsRope, Llama3FrequencyScaling) {
  const int dim = 128;
  const double theta = 500000.0, pi = 3.14159265358979323846;
  const RopeScaling sc{8.0, 1.0, 4.0, 8192};
  const auto plain = rope_inv_freq(dim, theta);
  const auto scaled = rope_inv_freq(dim, theta, sc);
  int low = 0, high = 0, mid = 0;
  for (int i = 0; i < dim / 2; ++i) {
    const double f = std::pow(theta, -2.0 * i / dim);
    EXPECT_NEAR(plain[size_t(i)], f, 1e-7 * f);
    const double wavelen = 2 * pi / f;
    if (wavelen < 8192 / 4.0) {  // high frequency: unchanged
      EXPECT_NEAR(scaled[size_t(i)], f, 1e-7 * f);
      ++high;
    } else if (wavelen > 8192 / 1.0) {  // low frequency: divided by the factor
      EXPECT_NEAR(scaled[size_t(i)], f / 8, 1e-7 * f);
      ++low;
    } else {  // between: strictly between the two
      EXPECT_LT(scaled[size_t(i)], f);
      EXPECT_GT(scaled[size_t(i)], f / 8);
      ++mid;
    }
  }
  EXPECT_GT(low, 0);
  EXPECT_GT(high, 0);
  EXPECT_GT(mid, 0);
  EXPECT_THROW(rope_inv_freq(7, theta), KernelError);
}

TEST(KernelsRope, ScoreDependsOnRelativePosition) {
  std::mt19937 rng(20);
  const int d = 64;
  const auto f = rope_inv_freq(d, 10000.0);
  const auto q = randn(d, rng), k = randn(d, rng);
  auto score = [&](int64_t m, int64_t n) {
    auto a = q, b = k;
    rope(a.data(), 1, d, d, f.data(), m);
    rope(b.data(), 1, d, d, f.data(), n);
    return dot(a.data(), b.data(), d);
  };
  EXPECT_NEAR(score(7, 3), score(1007, 1003), 1e-4);
  EXPECT_GT(std::fabs(score(7, 3) - score(7, 5)), 1e-3);  // and does depend on it
}

TEST(KernelsTopK, TiesGoToTheLowerIndex) {
  const std::vector<float> x = {1, 3, 3, 2, 3, NAN, 3};
  std::vector<int32_t> idx(4);
  top_k(x.data(), int64_t(x.size()), 4, idx.data());
  EXPECT_EQ(idx, (std::vector<int32_t>{1, 2, 4, 6}));
  std::vector<int32_t> all(7);
  top_k(x.data(), 7, 7, all.data());
  EXPECT_EQ(all, (std::vector<int32_t>{1, 2, 4, 6, 3, 0, 5}));  // NaN last
  EXPECT_THROW(top_k(x.data(), 7, 8, all.data()), KernelError);
}

TEST(KernelsTopK, MatchesStableSortReference) {
  std::mt19937 rng(21);
  for_each_target([&] {
    for (int64_t n : {1, 9, 120, 1001, 65537}) {
      std::uniform_int_distribution<int> small(0, 20);  // many duplicates
      std::vector<float> x(static_cast<size_t>(n));
      for (auto& v : x) v = float(small(rng)) - 10;
      if (n > 10) x[3] = NAN, x[size_t(n - 1)] = NAN;
      for (int k : {1, 3, 8, 64}) {
        if (k > n) continue;
        std::vector<int32_t> idx(static_cast<size_t>(k)), idx_ref(static_cast<size_t>(k));
        top_k(x.data(), n, k, idx.data());
        ref::top_k(x.data(), n, k, idx_ref.data());
        ASSERT_EQ(idx, idx_ref) << "n " << n << " k " << k;
      }
      std::vector<int32_t> all(static_cast<size_t>(n)), all_ref(static_cast<size_t>(n));
      top_k(x.data(), n, int(n), all.data());
      ref::top_k(x.data(), n, int(n), all_ref.data());
      ASSERT_EQ(all, all_ref) << "n " << n;
    }
  });
}

// rows_at_least against the plain loop: thresholds below, inside and above the values, NaN
// values and a NaN threshold, caps that stop the scan early and caps that never do.
TEST(KernelsRowsAtLeast, MatchesThePlainScan) {
  std::mt19937 rng(23);
  for_each_target([&] {
    for (int64_t n : {0, 1, 15, 16, 17, 100, 4099}) {
      std::normal_distribution<float> normal;
      std::vector<float> x(static_cast<size_t>(n));
      for (auto& v : x) v = normal(rng);
      if (n > 0) x[0] = 1.5f;  // values equal to a threshold are kept
      if (n > 20) x[5] = NAN, x[size_t(n - 2)] = INFINITY, x[size_t(n - 5)] = 3.0f, x[17] = 1.5f;
      for (float t : {-10.0f, -0.5f, 1.5f, 3.0f, 100.0f, NAN}) {
        for (int64_t cap : {int64_t(0), int64_t(3), n / 4, n}) {
          std::vector<int32_t> got(static_cast<size_t>(cap + 1), -1), want(static_cast<size_t>(cap + 1), -1);
          const int64_t g = rows_at_least(x.data(), n, t, cap, got.data());
          const int64_t w = ref::rows_at_least(x.data(), n, t, cap, want.data());
          ASSERT_EQ(g, w) << "n " << n << " t " << t << " cap " << cap;
          ASSERT_EQ(got, want) << "n " << n << " t " << t << " cap " << cap;
        }
      }
    }
  });
}

// top_k_in_order is top_k's set in index order: against the stable sort reference, sorted by
// index, on scores with many duplicates, NaN, both zeros and infinities, for k from 0 to n.
TEST(KernelsTopK, InOrderIsTheTopKSetByIndex) {
  std::mt19937 rng(22);
  for (int64_t n : {1, 2, 9, 120, 1001, 16385}) {
    for (bool spread : {false, true}) {
      std::uniform_int_distribution<int> small(0, 20);
      std::vector<float> x = spread ? randn(n, rng) : std::vector<float>(size_t(n));
      if (!spread)
        for (auto& v : x) v = float(small(rng)) - 10;
      const float special[] = {NAN, -0.0f, 0.0f, INFINITY, -INFINITY, -NAN};
      for (int64_t i = 0; i < n; i += 7) x[size_t(i)] = special[size_t(i / 7) % 6];
      for (int64_t k : {int64_t(0), int64_t(1), int64_t(3), n / 2, n - 1, n}) {
        if (k < 0 || k > n) continue;
        std::vector<int32_t> got(static_cast<size_t>(n), -1), want(static_cast<size_t>(k));
        top_k_in_order(x.data(), n, int(k), got.data());
        ref::top_k(x.data(), n, int(k), want.data());
        std::sort(want.begin(), want.end());
        ASSERT_EQ(std::vector<int32_t>(got.begin(), got.begin() + k), want)
            << "n " << n << " k " << k << (spread ? " spread" : " duplicates");
      }
    }
  }
  std::vector<int32_t> idx(3);
  const std::vector<float> three(3);
  EXPECT_THROW(top_k_in_order(three.data(), 3, 4, idx.data()), KernelError);
}

TEST(KernelsThreadPool, CoversEveryIndexOnceInAlignedChunks) {
  for (int threads : {1, 2, 3, 5}) {
    ThreadPool pool(threads);
    EXPECT_EQ(pool.size(), threads);
    for (int64_t n : {1, 15, 16, 17, 100, 1000}) {
      std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
      pool.parallel_for(n, 16, [&](int64_t b, int64_t e) {
        EXPECT_TRUE(b % 16 == 0) << b;
        EXPECT_TRUE(e % 16 == 0 || e == n) << e;
        for (int64_t i = b; i < e; ++i) hits[size_t(i)]++;
      });
      for (int64_t i = 0; i < n; ++i) ASSERT_EQ(hits[size_t(i)].load(), 1) << "n " << n << " i " << i;
    }
  }
}

TEST(KernelsThreadPool, PropagatesExceptionsAndRunsNestedCallsSerially) {
  ThreadPool pool(3);
  EXPECT_THROW(pool.parallel_for(300, 1, [](int64_t b, int64_t) {
    if (b > 0) throw std::runtime_error("chunk failed");
  }), std::runtime_error);
  std::atomic<int64_t> total{0};
  pool.parallel_for(30, 1, [&](int64_t b, int64_t e) {
    pool.parallel_for(e - b, 1, [&](int64_t b2, int64_t e2) { total += e2 - b2; });
  });
  EXPECT_EQ(total.load(), 30);
  pool.parallel_for(10, 1, [&](int64_t b, int64_t e) { total += e - b; });  // still usable
  EXPECT_EQ(total.load(), 40);
}

}  // namespace
}  // namespace wren::kernels
