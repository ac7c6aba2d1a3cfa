// kernels/: the aarch64 integer dot paths of quantized_dot.h: I8MM (SMMLA, vmmlaq_s32: a 2 x 8
// by 8 x 2 int8 product into four int32 lanes, twice SDOT's products per instruction, for the
// batched tiles; SDOT for the rest), SDOT (Armv8.2 dot product, vdotq_s32: four int8 x int8
// products into each int32 lane) and plain NEON (vmull_s8 to int16, pairwise-added into
// int32), chosen at run time from the kernel's HWCAP bits.
//
// A 32-column block is two 16-byte registers of activations. For q4 the 16 bytes of a
// block give its 16 even columns (low nibbles) and 16 odd columns (high nibbles), met by
// QuantizedActivation::q_nibble_order; the nibbles' +8 is removed by subtracting 8 from the
// bytes, so both operands are signed and no offset term remains.
//   out[r] = sum_g (s_w[r,g] s_x[g]) sum_{i in g} q_w[r,i] q_x[i].
// Both run the same body, quantized_dot_arm_body.h, compiled once per instruction set.
#include "kernels/quantized_dot.h"

#if defined(__aarch64__)
#include <arm_neon.h>
#include <asm/hwcap.h>
#include <sys/auxv.h>

namespace wren::kernels::quantized {
namespace {

namespace neon {
constexpr bool kMmla = false;
// Plain NEON: products of the low and the high 8 bytes widened to int16 (each at most
// 127 * 127 in magnitude), then pairwise-added into int32.
inline int32x4_t dot_s8(int32x4_t acc, int8x16_t a, int8x16_t b) {
  const int16x8_t lo = vmull_s8(vget_low_s8(a), vget_low_s8(b));
  const int16x8_t hi = vmull_high_s8(a, b);
  return vpadalq_s16(vpadalq_s16(acc, lo), hi);
}
#include "kernels/quantized_dot_arm_body.h"
}  // namespace neon

#pragma GCC push_options
#pragma GCC target("arch=armv8.2-a+dotprod")
namespace sdot {
constexpr bool kMmla = false;
inline int32x4_t dot_s8(int32x4_t acc, int8x16_t a, int8x16_t b) { return vdotq_s32(acc, a, b); }
#include "kernels/quantized_dot_arm_body.h"
}  // namespace sdot
#pragma GCC pop_options

#pragma GCC push_options
#pragma GCC target("arch=armv8.2-a+dotprod+i8mm")
namespace i8mm {
constexpr bool kMmla = true;
using sdot::dot_s8;  // rows and scores as on the SDOT path
#include "kernels/quantized_dot_arm_body.h"
}  // namespace i8mm
#pragma GCC pop_options

bool has_neon() { return true; }  // Advanced SIMD is part of every aarch64 CPU
bool has_dotprod() { return (getauxval(AT_HWCAP) & HWCAP_ASIMDDP) != 0; }
bool has_i8mm() { return has_dotprod() && (getauxval(AT_HWCAP2) & HWCAP2_I8MM) != 0; }

const Path kPaths[] = {
    {"neon-i8mm", has_i8mm, i8mm::q8_rows, i8mm::q4_rows, i8mm::q8_gemm, i8mm::q4_gemm, i8mm::q8_scores},
    {"neon-dotprod", has_dotprod, sdot::q8_rows, sdot::q4_rows, sdot::q8_gemm, sdot::q4_gemm, sdot::q8_scores},
    {"neon", has_neon, neon::q8_rows, neon::q4_rows, neon::q8_gemm, neon::q4_gemm, neon::q8_scores},
};

}  // namespace

PathList arch_paths() { return {kPaths, int(std::size(kPaths))}; }

}  // namespace wren::kernels::quantized
#endif  // __aarch64__
