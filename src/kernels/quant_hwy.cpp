// kernels/: SIMD row codecs (q8, q4, bf16) through Highway, dispatched at run time.
// Same equations as kernels/reference.cpp; the results are bit-identical to it (division
// and round-half-even are exact IEEE operations in both), which the tests check.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/quant_hwy.cpp"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
#include "kernels/f16_hwy-inl.h"

#include <algorithm>
#include <cmath>

#include "kernels/quantized_dot.h"
#include "kernels/types.h"

HWY_BEFORE_NAMESPACE();
namespace wren::kernels::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// max |x[i]| over i < n, or NaN if any x[i] is not finite (Max alone would drop NaN): a
// mask of the finite lanes, tested once at the end, where a sum of x * 0 cost a reduction.
float MaxAbs(const float* x, int64_t n) {
  const hn::ScalableTag<float> d;
  const int64_t N = int64_t(hn::Lanes(d));
  auto m = hn::Zero(d);
  auto finite = hn::FirstN(d, size_t(N));
  int64_t i = 0;
  for (; i + N <= n; i += N) {
    const auto v = hn::LoadU(d, x + i);
    m = hn::Max(m, hn::Abs(v));
    finite = hn::And(finite, hn::IsFinite(v));
  }
  float r = hn::GetLane(hn::MaxOfLanes(d, m));
  bool all_finite = hn::AllTrue(d, finite);
  for (; i < n; ++i) {
    r = std::max(r, std::fabs(x[i]));
    all_finite = all_finite && std::isfinite(x[i]);
  }
  return all_finite ? r : NAN;
}

// q = round_half_even(x / s) for one group of int8 values (|x / s| <= 127 by the choice of
// s; s = 0 or NaN: q = 0); returns the sum of q.
int32_t QuantizeGroupQ8(const float* xg, int group, float s, int8_t* qg) {
  if (!(s > 0)) {
    std::fill(qg, qg + group, int8_t(0));
    return 0;
  }
  const hn::ScalableTag<float> d;
  const hn::RebindToSigned<decltype(d)> di;
  const hn::Rebind<int8_t, decltype(d)> d8;
  const int N = int(hn::Lanes(d));
  const auto vs = hn::Set(d, s);
  auto vsum = hn::Zero(di);
  int i = 0;
  for (; i + N <= group; i += N) {
    const auto v = hn::ConvertTo(di, hn::Round(hn::Div(hn::LoadU(d, xg + i), vs)));
    vsum = hn::Add(vsum, v);
    hn::StoreU(hn::DemoteTo(d8, v), d8, qg + i);
  }
  int32_t sum = hn::GetLane(hn::SumOfLanes(di, vsum));
  for (; i < group; ++i) {
    qg[i] = int8_t(std::clamp(std::nearbyint(xg[i] / s), -127.0f, 127.0f));
    sum += qg[i];
  }
  return sum;
}

void QuantizeQ8Row(const float* x, int64_t n, int group, int8_t* q, F16* scales) {
  for (int64_t g = 0; g < n / group; ++g) {
    const float* xg = x + g * group;
    QuantizeGroupQ8(xg, group, group_scale(MaxAbs(xg, group), 127.0f, &scales[g]), q + g * group);
  }
}

// The activation's groups (ops.h QuantizedActivation): s = max|x| / 127 in f32, unrounded,
// q = round_half_even(x / s), and the group's sum of q. A non-finite x gives s = NaN, q = 0
// (the group's products are NaN through s).
void QuantizeActivationGroups(const float* x, int64_t n, int group, int8_t* q, float* scales,
                              int32_t* sums) {
  for (int64_t g = 0; g < n / group; ++g) {
    const float* xg = x + g * group;
    scales[g] = MaxAbs(xg, group) / 127.0f;
    sums[g] = QuantizeGroupQ8(xg, group, scales[g], q + g * group);
  }
}

void DequantizeQ8Row(const int8_t* q, const F16* scales, int64_t n, int group, float* out) {
  const hn::ScalableTag<float> d;
  const hn::RebindToSigned<decltype(d)> di;
  const hn::Rebind<int8_t, decltype(d)> d8;
  const int64_t N = int64_t(hn::Lanes(d));
  for (int64_t g = 0; g < n / group; ++g) {
    const float s = f16_to_f32(scales[g]);
    const auto vs = hn::Set(d, s);
    const int8_t* qg = q + g * group;
    float* og = out + g * group;
    int64_t i = 0;
    for (; i + N <= group; i += N)
      hn::StoreU(hn::Mul(vs, hn::ConvertTo(d, hn::PromoteTo(di, hn::LoadU(d8, qg + i)))), d, og + i);
    for (; i < group; ++i) og[i] = s * float(qg[i]);
  }
}

// q4 works on 2N columns at a time: N bytes, even columns from the low nibbles and odd
// columns from the high nibbles, (de)interleaved against the f32 row.
void QuantizeQ4Row(const float* x, int64_t n, int group, uint8_t* q, F16* scales) {
  const hn::ScalableTag<float> d;
  const hn::RebindToSigned<decltype(d)> di;
  const hn::Rebind<uint8_t, decltype(d)> d8;
  const int64_t N = int64_t(hn::Lanes(d));
  for (int64_t g = 0; g < n / group; ++g) {
    const float* xg = x + g * group;
    uint8_t* qg = q + g * group / 2;
    const float s = group_scale(MaxAbs(xg, group), 7.0f, &scales[g]);
    if (s == 0) {
      std::fill(qg, qg + group / 2, uint8_t(0x88));
      continue;
    }
    const auto vs = hn::Set(d, s);
    const auto eight = hn::Set(di, 8);
    int64_t i = 0;
    for (; i + 2 * N <= group; i += 2 * N) {
      hn::Vec<decltype(d)> even, odd;
      hn::LoadInterleaved2(d, xg + i, even, odd);
      const auto lo = hn::Add(hn::ConvertTo(di, hn::Round(hn::Div(even, vs))), eight);
      const auto hi = hn::Add(hn::ConvertTo(di, hn::Round(hn::Div(odd, vs))), eight);
      hn::StoreU(hn::DemoteTo(d8, hn::Or(lo, hn::ShiftLeft<4>(hi))), d8, qg + i / 2);
    }
    for (; i < group; i += 2) {
      const int lo = int(std::clamp(std::nearbyint(xg[i] / s), -7.0f, 7.0f)) + 8;
      const int hi = int(std::clamp(std::nearbyint(xg[i + 1] / s), -7.0f, 7.0f)) + 8;
      qg[i / 2] = uint8_t(lo | (hi << 4));
    }
  }
}

void DequantizeQ4Row(const uint8_t* q, const F16* scales, int64_t n, int group, float* out) {
  const hn::ScalableTag<float> d;
  const hn::RebindToSigned<decltype(d)> di;
  const hn::Rebind<uint8_t, decltype(d)> d8;
  const int64_t N = int64_t(hn::Lanes(d));
  for (int64_t g = 0; g < n / group; ++g) {
    const float s = f16_to_f32(scales[g]);
    const auto vs = hn::Set(d, s);
    const auto eight = hn::Set(di, 8), mask = hn::Set(di, 0xF);
    const uint8_t* qg = q + g * group / 2;
    float* og = out + g * group;
    int64_t i = 0;
    for (; i + 2 * N <= group; i += 2 * N) {
      const auto b = hn::BitCast(di, hn::PromoteTo(hn::RebindToUnsigned<decltype(d)>(),
                                                    hn::LoadU(d8, qg + i / 2)));
      const auto lo = hn::Mul(vs, hn::ConvertTo(d, hn::Sub(hn::And(b, mask), eight)));
      const auto hi = hn::Mul(vs, hn::ConvertTo(d, hn::Sub(hn::ShiftRight<4>(b), eight)));
      hn::StoreInterleaved2(lo, hi, d, og + i);
    }
    for (; i < group; i += 2) {
      og[i] = s * float((qg[i / 2] & 0xF) - 8);
      og[i + 1] = s * float((qg[i / 2] >> 4) - 8);
    }
  }
}

// bf16 = high half of the f32 bits, rounded to nearest even: (b + 0x7FFF + lsb) >> 16.
// NaN is kept quiet: (b >> 16) | 0x40.
void F32ToBF16Row(const float* x, int64_t n, BF16* out) {
  const hn::ScalableTag<float> d;
  const hn::RebindToUnsigned<decltype(d)> du;
  const hn::Rebind<uint16_t, decltype(d)> d16;
  const int64_t N = int64_t(hn::Lanes(d));
  uint16_t* o = reinterpret_cast<uint16_t*>(out);
  int64_t i = 0;
  for (; i + N <= n; i += N) {
    const auto v = hn::LoadU(d, x + i);
    const auto b = hn::BitCast(du, v);
    const auto lsb = hn::And(hn::ShiftRight<16>(b), hn::Set(du, 1));
    const auto rounded = hn::ShiftRight<16>(hn::Add(hn::Add(b, hn::Set(du, 0x7FFF)), lsb));
    const auto quiet = hn::Or(hn::ShiftRight<16>(b), hn::Set(du, 0x40));
    const auto nan = hn::RebindMask(du, hn::IsNaN(v));
    const auto bits = hn::BitCast(hn::RebindToSigned<decltype(d)>(), hn::IfThenElse(nan, quiet, rounded));
    hn::StoreU(hn::DemoteTo(d16, bits), d16, o + i);  // every value < 2^16: no saturation
  }
  for (; i < n; ++i) out[i] = f32_to_bf16(x[i]);
}

void BF16ToF32Row(const BF16* x, int64_t n, float* out) {
  const hn::ScalableTag<float> d;
  const int64_t N = int64_t(hn::Lanes(d));
  const uint16_t* p = reinterpret_cast<const uint16_t*>(x);
  int64_t i = 0;
  for (; i + N <= n; i += N) hn::StoreU(LoadBF16(d, p + i), d, out + i);
  for (; i < n; ++i) out[i] = bf16_to_f32(x[i]);
}

void F16ToF32Row(const F16* x, int64_t n, float* out) {
  const hn::ScalableTag<float> d;
  const int64_t N = int64_t(hn::Lanes(d));
  const uint16_t* p = reinterpret_cast<const uint16_t*>(x);
  int64_t i = 0;
  for (; i + N <= n; i += N) hn::StoreU(LoadF16(d, p + i), d, out + i);
  for (; i < n; ++i) out[i] = f16_to_f32(x[i]);
}

}  // namespace wren::kernels::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace wren::kernels {

HWY_EXPORT(QuantizeQ8Row);
HWY_EXPORT(QuantizeActivationGroups);
HWY_EXPORT(DequantizeQ8Row);
HWY_EXPORT(QuantizeQ4Row);
HWY_EXPORT(DequantizeQ4Row);
HWY_EXPORT(F32ToBF16Row);
HWY_EXPORT(BF16ToF32Row);
HWY_EXPORT(F16ToF32Row);

void quantize_q8_row(const float* x, int64_t n, int group, int8_t* q, F16* scales) {
  check_groups("quantize_q8_row", n, group, false);
  HWY_DYNAMIC_DISPATCH(QuantizeQ8Row)(x, n, group, q, scales);
}
void quantized::quantize_activation_groups(const float* x, int64_t n, int group, int8_t* q,
                                           float* scales, int32_t* sums) {
  HWY_DYNAMIC_DISPATCH(QuantizeActivationGroups)(x, n, group, q, scales, sums);
}
void dequantize_q8_row(const int8_t* q, const F16* scales, int64_t n, int group, float* out) {
  check_groups("dequantize_q8_row", n, group, false);
  HWY_DYNAMIC_DISPATCH(DequantizeQ8Row)(q, scales, n, group, out);
}
void quantize_q4_row(const float* x, int64_t n, int group, uint8_t* q, F16* scales) {
  check_groups("quantize_q4_row", n, group, true);
  HWY_DYNAMIC_DISPATCH(QuantizeQ4Row)(x, n, group, q, scales);
}
void dequantize_q4_row(const uint8_t* q, const F16* scales, int64_t n, int group, float* out) {
  check_groups("dequantize_q4_row", n, group, true);
  HWY_DYNAMIC_DISPATCH(DequantizeQ4Row)(q, scales, n, group, out);
}
void f32_to_bf16_row(const float* x, int64_t n, BF16* out) {
  HWY_DYNAMIC_DISPATCH(F32ToBF16Row)(x, n, out);
}
void bf16_to_f32_row(const BF16* x, int64_t n, float* out) {
  HWY_DYNAMIC_DISPATCH(BF16ToF32Row)(x, n, out);
}
void f16_to_f32_row(const F16* x, int64_t n, float* out) {
  HWY_DYNAMIC_DISPATCH(F16ToF32Row)(x, n, out);
}

}  // namespace wren::kernels
#endif  // HWY_ONCE
