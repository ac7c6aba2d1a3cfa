// kernels/: the x86 integer dot paths of quantized_dot.h: AVX-512 VNNI and AVX-VNNI (one
// vpdpbusd per 32 bytes) and AVX2 (vpmaddubsw + vpmaddwd). All three run the same body,
// quantized_dot_x86_body.h, on 256-bit registers, each compiled for its instruction set
// by `#pragma GCC target` and chosen at run time from CPUID (__builtin_cpu_supports).
#include "kernels/quantized_dot.h"

#if defined(__x86_64__)
#include <immintrin.h>

#include <algorithm>

namespace wren::kernels::quantized {

#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c")
namespace avx2 {
// 16 ymm registers: a tile of 2 rows x 2 tokens keeps its sums and accumulators in them.
constexpr int kGemmRows = 2, kGemmTokens = 2;
// acc + sum of four u8 x s8 products per lane: pairs to int16 (at most 2 * 127 * 127, no
// saturation), then pairs of int16 to int32.
inline __m256i dot_u8s8(__m256i acc, __m256i a, __m256i b) {
  const __m256i pairs = _mm256_maddubs_epi16(a, b);
  return _mm256_add_epi32(acc, _mm256_madd_epi16(pairs, _mm256_set1_epi16(1)));
}
// Nibbles: each int16 is at most 2 * 15 * 127 per pair, so two pairs add in int16 first.
inline __m256i dot2_u8s8(__m256i acc, __m256i a1, __m256i b1, __m256i a2, __m256i b2) {
  const __m256i pairs = _mm256_add_epi16(_mm256_maddubs_epi16(a1, b1), _mm256_maddubs_epi16(a2, b2));
  return _mm256_add_epi32(acc, _mm256_madd_epi16(pairs, _mm256_set1_epi16(1)));
}
// Signed weights: a = |w|, b = sign(w) x (the same products). No offset.
constexpr bool kVnni = false;
inline __m256i dot_s8s8(__m256i acc, __m256i w, __m256i x) {
  return dot_u8s8(acc, _mm256_abs_epi8(w), _mm256_sign_epi8(x, w));
}
inline __m256i s8s8_offset(__m256i) { return _mm256_setzero_si256(); }
#include "kernels/quantized_dot_x86_body.h"
}  // namespace avx2
#pragma GCC pop_options

#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c,avx512f,avx512vl,avx512bw,avx512vnni")
namespace avx512vnni {
// EVEX reaches 32 ymm registers: 4 rows x 2 tokens.
constexpr int kGemmRows = 4, kGemmTokens = 2;
inline __m256i dot_u8s8(__m256i acc, __m256i a, __m256i b) { return _mm256_dpbusd_epi32(acc, a, b); }
inline __m256i dot2_u8s8(__m256i acc, __m256i a1, __m256i b1, __m256i a2, __m256i b2) {
  return _mm256_dpbusd_epi32(_mm256_dpbusd_epi32(acc, a1, b1), a2, b2);
}
// Signed weights as unsigned bytes: w + 128 = w xor 0x80, so the sum gains 128 sum x,
// which the group's offset -128 sum x removes exactly.
constexpr bool kVnni = true;
inline __m256i dot_s8s8(__m256i acc, __m256i w, __m256i x) {
  return _mm256_dpbusd_epi32(acc, _mm256_xor_si256(w, _mm256_set1_epi8(char(0x80))), x);
}
inline __m256i s8s8_offset(__m256i sums) { return _mm256_sub_epi32(_mm256_setzero_si256(), _mm256_slli_epi32(sums, 7)); }
#include "kernels/quantized_dot_x86_body.h"
}  // namespace avx512vnni
#pragma GCC pop_options

#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c,avxvnni")
namespace avxvnni {
constexpr int kGemmRows = 2, kGemmTokens = 2;
inline __m256i dot_u8s8(__m256i acc, __m256i a, __m256i b) { return _mm256_dpbusd_avx_epi32(acc, a, b); }
inline __m256i dot2_u8s8(__m256i acc, __m256i a1, __m256i b1, __m256i a2, __m256i b2) {
  return _mm256_dpbusd_avx_epi32(_mm256_dpbusd_avx_epi32(acc, a1, b1), a2, b2);
}
// Signed weights as unsigned bytes: w + 128 = w xor 0x80, so the sum gains 128 sum x,
// which the group's offset -128 sum x removes exactly.
constexpr bool kVnni = true;
inline __m256i dot_s8s8(__m256i acc, __m256i w, __m256i x) {
  return _mm256_dpbusd_avx_epi32(acc, _mm256_xor_si256(w, _mm256_set1_epi8(char(0x80))), x);
}
inline __m256i s8s8_offset(__m256i sums) { return _mm256_sub_epi32(_mm256_setzero_si256(), _mm256_slli_epi32(sums, 7)); }
#include "kernels/quantized_dot_x86_body.h"
}  // namespace avxvnni
#pragma GCC pop_options

namespace {
bool has_avx2() {
  return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
         __builtin_cpu_supports("f16c");
}
bool has_avx512vnni() {
  return has_avx2() && __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512bw") &&
         __builtin_cpu_supports("avx512vnni");
}
bool has_avxvnni() { return has_avx2() && __builtin_cpu_supports("avxvnni"); }

const Path kPaths[] = {
    {"avx512vnni", has_avx512vnni, avx512vnni::q8_rows, avx512vnni::q4_rows, avx512vnni::q8_gemm, avx512vnni::q4_gemm},
    {"avxvnni", has_avxvnni, avxvnni::q8_rows, avxvnni::q4_rows, avxvnni::q8_gemm, avxvnni::q4_gemm},
    {"avx2", has_avx2, avx2::q8_rows, avx2::q4_rows, avx2::q8_gemm, avx2::q4_gemm},
};
}  // namespace

PathList arch_paths() { return {kPaths, int(std::size(kPaths))}; }

}  // namespace wren::kernels::quantized
#endif  // __x86_64__
