// kernels/: bf16 and f16 values widened to f32 in a vector, for the Highway kernels that read
// 16-bit rows (the KV cache's, kernels/attention_tile_hwy.cpp, and the row codecs,
// kernels/quant_hwy.cpp).
//
// bf16 is the top half of its f32: its bits shifted up. f16 is widened exactly on every target,
// infinities and NaN included. Where the target converts in one
// instruction (x86 AVX2 and AVX-512: F16C's vcvtph2ps; Arm NEON: fcvtl) Highway's PromoteTo is
// that instruction. Elsewhere Highway 1.0's emulation maps f16 inf / NaN to finite values, so
// these targets take the branch-free method of kernels::f16_to_f32 lane by lane instead:
// normal  = bits((2w >> 4) + (0xE0 << 23)) * 2^-112 (exponent bias 15 -> 127; inf / NaN land on
//           f32 inf / NaN), subnormal = bits((2w >> 17) | (126 << 23)) - 0.5 (= man * 2^-24),
// w the f16 bits in the top half of a 32-bit lane.

// Per-target include guard (Highway's convention for headers included by foreach_target).
#if defined(WREN_KERNELS_F16_HWY_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef WREN_KERNELS_F16_HWY_INL_H_
#undef WREN_KERNELS_F16_HWY_INL_H_
#else
#define WREN_KERNELS_F16_HWY_INL_H_
#endif

#include <cstdint>

#include "hwy/highway.h"

HWY_BEFORE_NAMESPACE();
namespace wren::kernels::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// Lanes(df) bf16 values from p, as f32.
template <class DF>
HWY_INLINE hn::Vec<DF> LoadBF16(DF df, const uint16_t* HWY_RESTRICT p) {
  const hn::Rebind<uint16_t, DF> d16;
  return hn::BitCast(df, hn::ShiftLeft<16>(hn::PromoteTo(hn::RebindToUnsigned<DF>(), hn::LoadU(d16, p))));
}

// Lanes(df) f16 values from p, as f32.
template <class DF>
HWY_INLINE hn::Vec<DF> LoadF16(DF df, const uint16_t* HWY_RESTRICT p) {
#if (HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX2 && !defined(HWY_DISABLE_F16C)) || HWY_TARGET == HWY_NEON
  const hn::Rebind<hwy::float16_t, DF> dh;
  return hn::PromoteTo(df, hn::LoadU(dh, reinterpret_cast<const hwy::float16_t*>(p)));
#else
  const hn::RebindToUnsigned<DF> du;
  const hn::Rebind<uint16_t, DF> d16;
  const auto w = hn::ShiftLeft<16>(hn::PromoteTo(du, hn::LoadU(d16, p)));
  const auto sign = hn::And(w, hn::Set(du, 0x80000000u));
  const auto two_w = hn::Add(w, w);
  const auto normal =
      hn::Mul(hn::BitCast(df, hn::Add(hn::ShiftRight<4>(two_w), hn::Set(du, 0xE0u << 23))), hn::Set(df, 0x1p-112f));
  const auto subnormal =
      hn::Sub(hn::BitCast(df, hn::Or(hn::ShiftRight<17>(two_w), hn::Set(du, 126u << 23))), hn::Set(df, 0.5f));
  const auto is_subnormal = hn::RebindMask(df, hn::Eq(hn::ShiftRight<27>(two_w), hn::Zero(du)));  // 2w < 2^27
  return hn::BitCast(df, hn::Or(sign, hn::BitCast(du, hn::IfThenElse(is_subnormal, subnormal, normal))));
#endif
}

}  // namespace wren::kernels::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#endif  // WREN_KERNELS_F16_HWY_INL_H_
