// Tests of kernels/types.h: half-precision rounding (checked against values computed from
// the format's definition, not against constants), q8 / q4 error bounds, the SIMD codecs
// against their scalar references on every Highway target this CPU runs, and validation.
#include <gtest/gtest.h>
#include <hwy/targets.h>

#include <cmath>
#include <cstring>
#include <random>

#include "kernels/ops.h"
#include "kernels/reference.h"
#include "test_util.h"
#include "kernels/types.h"

namespace wren::kernels {
namespace {

using testing_util::for_each_target;

float float_of(uint32_t b) {
  float x;
  std::memcpy(&x, &b, 4);
  return x;
}
uint32_t float_bits(float x) {
  uint32_t b;
  std::memcpy(&b, &x, 4);
  return b;
}

// A binary float format from its definition: value = (-1)^s * 2^(e - bias) * 1.m, or
// 2^(1 - bias) * 0.m when e = 0. Returns +-inf for the all-ones exponent with m = 0.
double decode_format(uint32_t bits, int exp_bits, int man_bits) {
  const int bias = (1 << (exp_bits - 1)) - 1;
  const uint32_t man = bits & ((1u << man_bits) - 1);
  const uint32_t e = (bits >> man_bits) & ((1u << exp_bits) - 1);
  const bool neg = (bits >> (man_bits + exp_bits)) & 1;
  double v;
  if (e == (1u << exp_bits) - 1) v = INFINITY;
  else if (e == 0) v = std::ldexp(double(man), 1 - bias - man_bits);
  else v = std::ldexp(double(man + (1u << man_bits)), int(e) - bias - man_bits);
  return neg ? -v : v;
}

// For every pair of neighbouring non-negative codes (a, a+1) of a 16-bit format: the
// midpoint rounds to the one with the even code, values just off it to the nearer one,
// and negated values to the same codes with the sign bit. `top` is the largest finite code.
template <class Encode>
void check_round_to_nearest_even(Encode encode, int exp_bits, int man_bits, uint16_t top) {
  const uint16_t sign = 0x8000;
  for (uint32_t a = 0; a <= top; ++a) {
    const double lo = decode_format(a, exp_bits, man_bits);
    // Past the largest finite code the next step would be 2^(emax+1): rounding goes to inf.
    const double hi = a == top ? std::ldexp(1.0, (1 << (exp_bits - 1))) : decode_format(a + 1, exp_bits, man_bits);
    const double mid = (lo + hi) / 2;
    const float mid_f = float(mid);
    ASSERT_EQ(double(mid_f), mid) << "midpoint must be exact in f32, code " << a;
    const uint16_t even = (a % 2 == 0) ? uint16_t(a) : uint16_t(a + 1);
    ASSERT_EQ(encode(mid_f).bits, even) << "midpoint above code " << a;
    ASSERT_EQ(encode(-mid_f).bits, uint16_t(even | sign)) << "negative midpoint above code " << a;
    ASSERT_EQ(encode(std::nextafter(mid_f, 0.0f)).bits, a) << "just below midpoint, code " << a;
    ASSERT_EQ(encode(std::nextafter(mid_f, INFINITY)).bits, a + 1) << "just above midpoint, code " << a;
    ASSERT_EQ(encode(float(lo)).bits, a) << "exact value of code " << a;
  }
}

TEST(KernelsTypes, Bf16DecodesByDefinition) {
  for (uint32_t b = 0; b < 0x10000; ++b) {
    if (((b >> 7) & 0xFF) == 0xFF) continue;  // inf / NaN checked below
    ASSERT_EQ(double(bf16_to_f32(BF16{uint16_t(b)})), decode_format(b, 8, 7)) << b;
  }
}

TEST(KernelsTypes, Bf16RoundsToNearestEven) {
  check_round_to_nearest_even(f32_to_bf16, 8, 7, 0x7F7F);
  EXPECT_TRUE(std::isinf(bf16_to_f32(f32_to_bf16(INFINITY))));
  EXPECT_EQ(bf16_to_f32(f32_to_bf16(-INFINITY)), -INFINITY);
}

TEST(KernelsTypes, Bf16KeepsNaN) {
  // Quiet and signalling NaNs whose payload lies only in the low 16 bits would truncate to
  // inf; they must stay NaN and keep their sign.
  for (uint32_t b : {0x7FC00000u, 0x7F800001u, 0xFF800001u, 0x7F80FFFFu, 0xFFFFFFFFu}) {
    const float x = float_of(b);
    ASSERT_TRUE(std::isnan(x));
    const BF16 h = f32_to_bf16(x);
    EXPECT_TRUE(std::isnan(bf16_to_f32(h))) << std::hex << b;
    EXPECT_EQ(h.bits >> 15, b >> 31) << std::hex << b;
  }
}

TEST(KernelsTypes, F16DecodesByDefinition) {
  for (uint32_t b = 0; b < 0x10000; ++b) {
    if (((b >> 10) & 0x1F) == 0x1F) continue;
    ASSERT_EQ(double(f16_to_f32(F16{uint16_t(b)})), decode_format(b, 5, 10)) << b;
  }
  EXPECT_EQ(f16_to_f32(f32_to_f16(INFINITY)), INFINITY);
  EXPECT_TRUE(std::isnan(f16_to_f32(f32_to_f16(NAN))));
}

TEST(KernelsTypes, F16RoundsToNearestEven) {
  check_round_to_nearest_even(f32_to_f16, 5, 10, 0x7BFF);
  // Far below the smallest subnormal (2^-24) rounds to zero; far above 65504 to inf.
  EXPECT_EQ(f32_to_f16(1e-10f).bits, 0);
  EXPECT_EQ(f16_to_f32(f32_to_f16(1e6f)), INFINITY);
}

TEST(KernelsTypes, F16RoundUpIsTheSmallestNotBelow) {
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> e(-30, 15);
  for (int i = 0; i < 20000; ++i) {
    const float x = std::exp2(e(rng));
    const F16 h = f16_round_up(x);
    ASSERT_GE(f16_to_f32(h), x);
    if (h.bits > 0) {
      ASSERT_LT(f16_to_f32(F16{uint16_t(h.bits - 1)}), x) << x;
    }
  }
  EXPECT_EQ(f16_round_up(0.0f).bits, 0);
}

// Rows of mixed magnitudes: normal values, one group of zeros, a group of tiny values.
std::vector<float> test_row(int64_t n, int group, std::mt19937& rng) {
  std::normal_distribution<float> nd(0, 1);
  std::vector<float> x(static_cast<size_t>(n));
  for (auto& v : x) v = nd(rng) * 3;
  if (n >= 3 * group) {
    std::fill(x.begin() + group, x.begin() + 2 * group, 0.0f);
    for (int i = 2 * group; i < 3 * group; ++i) x[size_t(i)] *= 1e-7f;
  }
  return x;
}

TEST(KernelsQuant, Q8ErrorWithinHalfScale) {
  std::mt19937 rng(1);
  for (int group : {32, 64, 128, 20}) {
    const int64_t n = group * 7;
    const auto x = test_row(n, group, rng);
    std::vector<int8_t> q(static_cast<size_t>(n));
    std::vector<F16> s(static_cast<size_t>(n / group));
    std::vector<float> back(static_cast<size_t>(n));
    quantize_q8_row(x.data(), n, group, q.data(), s.data());
    dequantize_q8_row(q.data(), s.data(), n, group, back.data());
    for (int64_t g = 0; g < n / group; ++g) {
      const float scale = f16_to_f32(s[size_t(g)]);
      int max_q = 0;
      for (int64_t i = g * group; i < (g + 1) * group; ++i) {
        ASSERT_LE(std::fabs(back[size_t(i)] - x[size_t(i)]), scale / 2) << "G " << group << " i " << i;
        ASSERT_LE(std::abs(int(q[size_t(i)])), 127);
        max_q = std::max(max_q, std::abs(int(q[size_t(i)])));
      }
      // The scale is not wastefully large: the largest value uses (nearly) the full range.
      // (Below 2^-14 an f16 scale is subnormal and coarse; the bound above still holds.)
      if (scale >= 0x1p-14f) {
        EXPECT_GE(max_q, 126) << "G " << group << " group " << g;
      }
    }
  }
}

TEST(KernelsQuant, Q4ErrorWithinHalfScale) {
  std::mt19937 rng(2);
  for (int group : {32, 64, 128, 20}) {
    const int64_t n = group * 7;
    const auto x = test_row(n, group, rng);
    std::vector<uint8_t> q(static_cast<size_t>(n / 2));
    std::vector<F16> s(static_cast<size_t>(n / group));
    std::vector<float> back(static_cast<size_t>(n));
    quantize_q4_row(x.data(), n, group, q.data(), s.data());
    dequantize_q4_row(q.data(), s.data(), n, group, back.data());
    for (int64_t g = 0; g < n / group; ++g) {
      const float scale = f16_to_f32(s[size_t(g)]);
      float max_v = 0;
      for (int64_t i = g * group; i < (g + 1) * group; ++i) {
        ASSERT_LE(std::fabs(back[size_t(i)] - x[size_t(i)]), scale / 2) << "G " << group << " i " << i;
        if (scale > 0) max_v = std::max(max_v, std::fabs(back[size_t(i)]) / scale);
      }
      if (scale >= 0x1p-14f) {
        EXPECT_EQ(max_v, 7.0f) << "G " << group << " group " << g;
      }
    }
  }
}

TEST(KernelsQuant, Q4NibbleLayout) {
  // Column 0 = +7, column 1 = -7, rest 0: scale 1, byte 0 = (7 + 8) | (-7 + 8) << 4.
  std::vector<float> x(32, 0.0f);
  x[0] = 7;
  x[1] = -7;
  x[3] = 2;
  std::vector<uint8_t> q(16);
  F16 s;
  quantize_q4_row(x.data(), 32, 32, q.data(), &s);
  EXPECT_EQ(f16_to_f32(s), 1.0f);
  EXPECT_EQ(q[0], uint8_t((7 + 8) | ((-7 + 8) << 4)));
  EXPECT_EQ(q[1], uint8_t((0 + 8) | ((2 + 8) << 4)));
  EXPECT_EQ(q[2], uint8_t(8 | (8 << 4)));
}

template <class T>
bool same_bytes(const std::vector<T>& a, const std::vector<T>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0;
}

TEST(KernelsQuant, SimdCodecsMatchReferenceExactly) {
  std::mt19937 rng(3);
  for_each_target([&] {
    for (int group : {32, 64, 128, 20, 6}) {
      for (int64_t mult : {1, 3, 7}) {
        const int64_t n = group * mult;
        SCOPED_TRACE("G " + std::to_string(group) + " n " + std::to_string(n));
        auto x = test_row(n, group, rng);
        std::vector<int8_t> q8(static_cast<size_t>(n)), q8_ref(static_cast<size_t>(n));
        std::vector<uint8_t> q4(static_cast<size_t>(n / 2)), q4_ref(static_cast<size_t>(n / 2));
        std::vector<F16> s(static_cast<size_t>(n / group)), s_ref(static_cast<size_t>(n / group));
        std::vector<float> out(static_cast<size_t>(n)), out_ref(static_cast<size_t>(n));
        quantize_q8_row(x.data(), n, group, q8.data(), s.data());
        ref::quantize_q8_row(x.data(), n, group, q8_ref.data(), s_ref.data());
        ASSERT_TRUE(same_bytes(q8, q8_ref));
        ASSERT_TRUE(same_bytes(s, s_ref));
        dequantize_q8_row(q8.data(), s.data(), n, group, out.data());
        ref::dequantize_q8_row(q8.data(), s.data(), n, group, out_ref.data());
        ASSERT_TRUE(same_bytes(out, out_ref));

        quantize_q4_row(x.data(), n, group, q4.data(), s.data());
        ref::quantize_q4_row(x.data(), n, group, q4_ref.data(), s_ref.data());
        ASSERT_TRUE(same_bytes(q4, q4_ref));
        ASSERT_TRUE(same_bytes(s, s_ref));
        dequantize_q4_row(q4.data(), s.data(), n, group, out.data());
        ref::dequantize_q4_row(q4.data(), s.data(), n, group, out_ref.data());
        ASSERT_TRUE(same_bytes(out, out_ref));
      }
    }
    // bf16 rows of odd lengths, with halfway cases, infinities and NaNs mixed in.
    for (int64_t n : {1, 7, 37, 1001}) {
      std::uniform_int_distribution<uint32_t> bits;
      std::vector<float> x(static_cast<size_t>(n));
      for (auto& v : x) v = float_of(bits(rng));
      x[0] = float_of(0x3F808000u);  // exactly halfway between two bf16 codes
      if (n > 3) x[1] = float_of(0x7F800001u), x[2] = -INFINITY, x[3] = float_of(0x3F818000u);
      std::vector<BF16> h(static_cast<size_t>(n)), h_ref(static_cast<size_t>(n));
      std::vector<float> back(static_cast<size_t>(n)), back_ref(static_cast<size_t>(n));
      f32_to_bf16_row(x.data(), n, h.data());
      ref::f32_to_bf16_row(x.data(), n, h_ref.data());
      ASSERT_TRUE(same_bytes(h, h_ref)) << "n " << n;
      bf16_to_f32_row(h.data(), n, back.data());
      ref::bf16_to_f32_row(h.data(), n, back_ref.data());
      ASSERT_TRUE(same_bytes(back, back_ref)) << "n " << n;
    }
    // f16 rows: every code (subnormals, infinities, NaNs) widened as the scalar f16_to_f32
    // (itself checked against the format above), from offsets 0 and 1 so the vector loop and
    // the scalar tail both see each code.
    std::vector<F16> codes(65537);
    for (uint32_t b = 0; b < 65536; ++b) codes[b + 1] = F16{uint16_t(b)};
    for (int offset : {1, 0}) {
      std::vector<float> wide(65536);
      f16_to_f32_row(codes.data() + offset, 65536, wide.data());
      for (uint32_t b = 0; b < 65536; ++b) {
        const float want = f16_to_f32(codes[size_t(b) + size_t(offset)]);
        ASSERT_TRUE(std::isnan(want) ? std::isnan(wide[b]) : float_bits(wide[b]) == float_bits(want))
            << "code at " << b << " offset " << offset;
      }
    }
  });
  // The f16 writer rounds as f32_to_f16 and refuses a finite value it would make inf.
  const float x[4] = {1.0f / 3, -65519.0f, NAN, 0x1p-20f};
  F16 h[4];
  f32_to_f16_row(x, 4, h);
  for (int i = 0; i < 4; ++i) EXPECT_EQ(h[i].bits, f32_to_f16(x[i]).bits) << i;
  const float beyond[2] = {0.0f, 65520.0f};
  EXPECT_THROW(f32_to_f16_row(beyond, 2, h), KernelError);
}

TEST(KernelsQuant, EncodeMatrixAndSliceRows) {
  std::mt19937 rng(4);
  const int64_t rows = 9, cols = 96;
  std::vector<float> w(static_cast<size_t>(rows * cols));
  std::normal_distribution<float> nd;
  for (auto& v : w) v = nd(rng);
  for (DType t : {DType::f32, DType::bf16, DType::q8, DType::q4}) {
    const Matrix m = encode_matrix(w.data(), rows, cols, t, 32);
    const MatrixView v = m.view();
    EXPECT_EQ(v.bytes(), int64_t(m.values.size() + 2 * m.scales.size())) << to_string(t);
    const MatrixView s = v.slice_rows(3, 4);
    std::vector<float> a(static_cast<size_t>(cols)), b(static_cast<size_t>(cols));
    for (int64_t r = 0; r < 4; ++r) {
      decode_row(s, r, a.data());
      decode_row(v, r + 3, b.data());
      ASSERT_EQ(a, b) << to_string(t) << " row " << r;
      for (int64_t c = 0; c < cols; ++c) ASSERT_EQ(a[size_t(c)], ref::weight(v, r + 3, c));
    }
  }
}

TEST(KernelsQuant, RejectsBadShapesAndValues) {
  std::vector<float> x(96, 1.0f);
  std::vector<int8_t> q(96);
  std::vector<uint8_t> q4(48);
  std::vector<F16> s(8);
  EXPECT_THROW(quantize_q8_row(x.data(), 96, 40, q.data(), s.data()), KernelError);
  EXPECT_THROW(quantize_q4_row(x.data(), 96, 3, q4.data(), s.data()), KernelError);
  EXPECT_THROW(quantize_q8_row(x.data(), 96, 0, q.data(), s.data()), KernelError);
  x[5] = NAN;
  EXPECT_THROW(quantize_q8_row(x.data(), 96, 32, q.data(), s.data()), KernelError);
  x[5] = 1e10f;  // 1e10 / 127 > 65504: no f16 scale holds it
  EXPECT_THROW(quantize_q8_row(x.data(), 96, 32, q.data(), s.data()), KernelError);
  EXPECT_THROW(MatrixView::q8(q.data(), s.data(), 2, 48, 32), KernelError);
  EXPECT_THROW(MatrixView::q4(q4.data(), s.data(), 1, 95, 19), KernelError);
  EXPECT_THROW(MatrixView::f32(x.data(), 3, 0), KernelError);
  const MatrixView v = MatrixView::f32(x.data(), 3, 32);
  EXPECT_THROW(v.slice_rows(2, 2), KernelError);
  EXPECT_THROW(encode_matrix(x.data(), 1, 96, DType::f16), KernelError);
  try {
    quantize_q8_row(x.data(), 96, 40, q.data(), s.data());
    FAIL() << "no exception";
  } catch (const KernelError& e) {
    EXPECT_NE(std::string(e.what()).find("40"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace wren::kernels
