// kernels/: the x86 integer dot paths of quantized_dot.h: AVX-512 VNNI and AVX-VNNI (one
// vpdpbusd per 32 bytes) and AVX2 (vpmaddubsw + vpmaddwd). All three run the same body,
// quantized_dot_x86_body.h, on 256-bit registers, each compiled for its instruction set
// by a target region (WREN_TARGET_PUSH below) and chosen at run time from CPUID.
#include "kernels/quantized_dot.h"

#if defined(__x86_64__)
#include <cpuid.h>
#include <immintrin.h>

#include <algorithm>
#include <array>
#include <numeric>
#include <utility>

// A region of functions compiled for an instruction set. GCC takes `#pragma GCC target`;
// clang ignores that pragma (and would then refuse the intrinsics), and takes a target
// attribute applied to every function of the region instead.
#define WREN_PRAGMA(x) _Pragma(#x)
#if defined(__clang__)
#define WREN_TARGET_PUSH(isa) WREN_PRAGMA(clang attribute push(__attribute__((target(isa))), apply_to = function))
#define WREN_TARGET_POP WREN_PRAGMA(clang attribute pop)
#else
#define WREN_TARGET_PUSH(isa) WREN_PRAGMA(GCC push_options) WREN_PRAGMA(GCC target(isa))
#define WREN_TARGET_POP WREN_PRAGMA(GCC pop_options)
#endif

namespace wren::kernels::quantized {

// Where decode rows ask for their bytes ahead (packed_tile), chosen per core from CPUID:
// into L2 only (prefetcht1) or into L1 (prefetcht0), and how far ahead along a tile's run.
// - Intel: L2, 3456 bytes. On an Emerald Rapids Xeon (zmm path, tg32, 12 alternating rounds
//   over one shared afternoon) the Llama-3.2-1B shape q4 with its lines sent to L2 rather than
//   L1 was faster in 9 of 12 rounds at 1 thread and 9 of 12 at 2, medians 19.0 -> 20.0 and
//   35.5 -> 38.2 tokens/s; OLMoE's q4 in both of 2 rounds (19.6-20.5 / 36.7-38.4 -> 20.9-21.2 /
//   38.2-39.7). On a Xeon with AMX (family 6 model 167, zmm path, BM_DecodeStreamVsRead, 1 / 2
//   threads, 2 alternating passes) the Llama FFN's q8 rows read 0.94-0.95 of a plain read of
//   their bytes into L1 and 0.97-0.98 into L2, and nenya's 960-column rows 0.84-0.85 into L1,
//   0.88 into L2, 0.92-0.93 into L2 in tiles of four (types.h packed_tile_rows).
// - AMD Zen 5 (family 26): L1, 6144 bytes (the distance's sweep: packed_tile).
// - AMD Zen 4 and earlier (family 25 and below): L2, 1024 bytes. A 2-vCPU EPYC Zen 4 (family
//   25 model 17) under KVM, zmm path, BM_DecodeStream at 1 thread (GB/s, two passes each): the
//   Llama FFN's q8 rows 15.5-15.7 into L1 against 22.9-23.5 into L2, its q4 tiles 19.9-21.2
//   against 22.2-22.6, nenya's 960 columns q4 20.8-21.3 against 23.3-24.0. Along a tile's run
//   into L2 (three passes each): 512-1280 bytes ahead the q4 FFN 24.3-27.5, 2048 bytes
//   21.9-23.4, 3456-8192 21.1-24.0; nenya's 960-column q8 tiles 24-26 at 512-2048 bytes and
//   16-20 at 3072-8192. The models, `wren bench -p 0 -n 32 -r 3 -t 1`, three alternating rounds,
//   L1 6144 -> L2 1024 bytes: the Llama-3.2-1B shape q8 12.0-12.5 -> 17.2-18.4 tokens/s, q4
//   27.4-32.7 -> 36.7-39.3, nenya q8 23.6-24.7 -> 31.5-34.6. (Zen 4 documents prefetcht1 as an
//   L2 fill and has been measured to drop some of them, Wang et al. 2024, arXiv 2411.02814;
//   here the L2 fills win by a third.) q8 rows one after another ask 4 KB past their tile,
//   not 2: BM_DecodeStreamVsRead's nenya experts (384 columns), 1 thread, two passes each,
//   0.68-0.71 of a plain read at 2 KB, 0.74-0.78 at 4, 0.65-0.74 at 6-12; the Llama FFN's
//   0.74-0.78 from 2 to 12 KB; nenya q8 at 1 thread, three alternating rounds, 35.1-36.4 ->
//   36.1-37.0 tokens/s. Those q8 rows, where they are whole blocks, also ask for each line's
//   successor one block on (256 bytes) into L1, beside the L2 request far ahead, so that the
//   lines already in L2 need not miss L1 at their loads (a reading: no counters in the guest
//   to confirm it). BM_DecodeStreamVsRead at 1 thread, two alternating passes each, the Llama
//   FFN 0.80 -> 0.82-0.85 of a plain read, OLMoE's experts 0.72-0.75 -> 0.74-0.79 (64-320
//   bytes alike within the noise; 1 KB 0.75 / 0.71); 2 threads the same (0.95 / 0.93, at the
//   bandwidth). The models at 1 thread, three alternating rounds: the Llama-3.2-1B shape q8
//   20.5-20.9 -> 21.1-21.5 tokens/s, OLMoE q8 17.8-18.2 -> 18.5-19.1. A tile's run (q4, q8
//   with a tail) read 5-15% less with such requests (256-2048 bytes on), and so did q8 rows
//   with a tail lying one after another (nenya's 384-column experts 0.75-0.79 -> 0.71-0.74,
//   four alternating passes): those ask into L2 only. Zen 3 has not been measured; it takes
//   Zen 4's.
struct DecodePrefetch {
  bool to_l2 = true;
  int64_t tile_bytes = 3456;    // ahead along a tile's run
  int64_t q8_row_bytes = 2048;  // past a tile of q8 rows lying one after another
  int64_t q8_row_l1_bytes = 0;  // those rows' lines (whole blocks) also into L1 this far on (0: no)
};
const DecodePrefetch& decode_prefetch();

WREN_TARGET_PUSH("avx2,fma,f16c")
namespace avx2 {
// 16 ymm registers: a tile of 2 rows x 2 tokens keeps its sums and accumulators in them, a
// decode tile 4 q8 rows (8 spill: the Llama-3.2-1B shape 5-20% slower on Zen 5).
constexpr int kGemmRows = 2, kGemmTokens = 2, kDecodeQ8Rows = 4;
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
constexpr bool kZmm = false, kSplitHalves = false;
#include "kernels/quantized_dot_x86_body.h"
}  // namespace avx2
WREN_TARGET_POP

WREN_TARGET_PUSH("avx2,fma,f16c,avx512f,avx512vl,avx512bw,avx512vnni")
namespace avx512vnni {
// EVEX reaches 32 ymm registers: 4 rows x 2 tokens, or 8 q8 decode rows (the Llama-3.2-1B
// shape q8 on Zen 5, alternating, 1 / 2 threads: 20.6-21.3 / 41.0-41.4 tokens/s at 4 rows,
// 23.8-24.3 / 44.7-45.8 at 8, zmm path; q4 lost 3-5% at 8).
constexpr int kGemmRows = 4, kGemmTokens = 2, kDecodeQ8Rows = 8;
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
constexpr bool kZmm = false, kSplitHalves = true;  // the f32 steps of the zmm tiles (the body's BlockSum)
#include "kernels/quantized_dot_x86_body.h"
}  // namespace avx512vnni

// The same with the packed blocks' integer sums on 512-bit registers (VnniRegs<true>): half
// the instructions, the same sums and f32 steps. Every AVX-512 path takes its batched tiles
// (prefill is compute-bound: 2048 x 2048 x 256 tokens, 1 thread, Zen 5, best of 3 alternating:
// q4 7.8 vs 9.5 ms, q8 8.1 vs 9.0 ms); its decode rows are the default only where the core
// keeps its clock under 512-bit instructions (kPaths below).
// GCC 12's 512-bit intrinsics pass an undefined vector as the unused merge operand, which
// -W(maybe-)uninitialized reports once inlined (GCC bug 105593, fixed in 13).
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
namespace avx512vnni_zmm {
// Ten q8 decode rows a tile, not eight. Zen 4 (family 25 model 17 under KVM), the models at 1
// thread, `wren bench -p 0 -n 64 -r 3 -t 1`, four alternating rounds: OLMoE q8 17.1-18.0 ->
// 18.3-19.4 tokens/s (means 17.4 -> 18.8), the Llama-3.2-1B shape q8 19.7-20.7 -> 20.1-21.4
// (20.1 -> 21.0); at 2 threads both at the bandwidth either way (paired roofline 74-93%,
// three rounds, the host moving by a fifth). BM_DecodeStreamVsRead at 1 thread, three
// passes: OLMoE's experts 0.76-0.77 -> 0.80-0.83 of a plain read; twelve and fourteen rows
// 0.79-0.81 (twelve not faster in the models), sixteen 0.74-0.79. Not measured on Zen 5 or
// Intel, which take it too. WREN_UNROLL (eight) leaves the loops over ten rows as loops, their
// sums and accumulators on the stack, and that streams better: unrolled whole, a tile read
// 65-68 GB/s from L2 against 42-44 but 1 GiB of rows at 22.5-23.6 GB/s against 24.4-26.3
// (three alternating pairs, docs/engine.md "Zen 4, afternoon").
constexpr int kDecodeQ8Rows = 10;
using avx512vnni::kGemmRows, avx512vnni::kGemmTokens, avx512vnni::kVnni, avx512vnni::kSplitHalves;
using avx512vnni::dot_u8s8, avx512vnni::dot2_u8s8, avx512vnni::dot_s8s8, avx512vnni::s8s8_offset;
constexpr bool kZmm = true;
#include "kernels/quantized_dot_x86_body.h"
}  // namespace avx512vnni_zmm
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif
WREN_TARGET_POP

WREN_TARGET_PUSH("avx2,fma,f16c,avxvnni")
namespace avxvnni {
constexpr int kGemmRows = 2, kGemmTokens = 2, kDecodeQ8Rows = 4;
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
constexpr bool kZmm = false, kSplitHalves = false;
#include "kernels/quantized_dot_x86_body.h"
}  // namespace avxvnni
WREN_TARGET_POP

namespace {
// The CPU's features from CPUID, and the OS's from XGETBV (it saves the ymm, and for AVX-512
// the zmm and mask, registers). Read directly: clang's __builtin_cpu_supports knows neither
// "f16c" nor "avxvnni".
struct Features {
  bool avx2 = false, avx512vnni = false, avxvnni = false, avx512vbmi2 = false;
  int amd_family = 0;  // the display family of an AMD core (25: Zen 3 and 4, 26: Zen 5), else 0
};
Features read_features() {
  Features f;
  unsigned a, b, c, d;
  if (!__get_cpuid(0, &a, &b, &c, &d)) return f;
  const bool amd = b == 0x68747541 && d == 0x69746e65 && c == 0x444d4163;  // "AuthenticAMD"
  if (!__get_cpuid_count(1, 0, &a, &b, &c, &d)) return f;
  const unsigned base_family = a >> 8 & 0xf;
  if (amd) f.amd_family = int(base_family == 0xf ? base_family + (a >> 20 & 0xff) : base_family);
  const bool fma = c >> 12 & 1, osxsave = c >> 27 & 1, avx = c >> 28 & 1, f16c = c >> 29 & 1;
  if (!osxsave || !avx) return f;
  unsigned xcr0, xcr0_hi;
  __asm__("xgetbv" : "=a"(xcr0), "=d"(xcr0_hi) : "c"(0));
  const bool os_ymm = (xcr0 & 0x6) == 0x6, os_zmm = (xcr0 & 0xe6) == 0xe6;
  if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return f;
  f.avx2 = os_ymm && fma && f16c && (b >> 5 & 1);
  const bool avx512f = b >> 16 & 1, avx512bw = b >> 30 & 1, avx512vl = b >> 31 & 1, vnni = c >> 11 & 1;
  f.avx512vnni = f.avx2 && os_zmm && avx512f && avx512bw && avx512vl && vnni;
  f.avx512vbmi2 = f.avx512vnni && (c >> 6 & 1);
  if (__get_cpuid_count(7, 1, &a, &b, &c, &d)) f.avxvnni = f.avx2 && (a >> 4 & 1);
  return f;
}
const Features& features() {
  static const Features f = read_features();
  return f;
}
bool has_avx2() { return features().avx2; }
bool has_avx512vnni() { return features().avx512vnni; }
bool has_avxvnni() { return features().avxvnni; }
// Cores that keep their clock under 512-bit integer multiply-adds: Intel from Ice Lake and AMD
// from Zen 4, told apart from Skylake-SP and Cascade Lake (which lower it) by AVX512-VBMI2.
bool has_full_speed_zmm() { return features().avx512vbmi2; }
}  // namespace

const DecodePrefetch& decode_prefetch() {
  static const DecodePrefetch p = features().amd_family >= 26 ? DecodePrefetch{false, 6144, 2048}
                                  : features().amd_family > 0 ? DecodePrefetch{true, 1024, 4096, 256}
                                                              : DecodePrefetch{};
  return p;
}

namespace {

// avx512vnni-zmm's q8 decode rows: 512-bit where a row is whole 256-column blocks, the
// avx512vnni path's 256-bit rows where it has a tail (nenya's 960 and 384 columns); the two
// take the same steps (kSplitHalves), so a row gets the same bits either way. On a Zen 5
// (family 26, under KVM) BM_DecodeStreamPaths, paired passes, the 960-column rows stream
// 3.5-6.6% faster in 256 bits (4 runs, 8 of 8 at 1 and 2 threads; the 384-column ones the
// same, 0.98-1.01), the rows of whole blocks 2-8% slower; tried on the 512-bit rows with a tail
// and left out: tiles of eight (the 256-bit rows 11-22% faster), two (the same as four).
void zmm_q8_rows(const MatrixView& w, const QuantizedActivation& xq, int64_t r0, int64_t r1, float* out) {
  if (w.cols % 256 != 0) return avx512vnni::q8_rows(w, xq, r0, r1, out);
  avx512vnni_zmm::q8_rows(w, xq, r0, r1, out);
}

// avx512vnni-zmm: 512-bit decode rows (q8 rows with a tail: zmm_q8_rows) and batched tiles,
// first where the core keeps its clock under them: on a Xeon with VBMI2 (family 6 model 167)
// the decode rows in L2 run q8 44-51 against 39-45 GB/s and q4 27-31 against 25-27, and the
// Llama-3.2-1B shape decodes 3.6-4.4% (q8) and 3.7-8.5% (q4) faster at 1 thread, the same or
// 3.5% faster at 2, nenya the same.
// avx512vnni: 256-bit decode rows, 512-bit batched tiles (the choice without VBMI2);
// -ymm uses 256 bits for both (bench --int8-path compares them).
const Path kPaths[] = {
    {"avx512vnni-zmm", has_full_speed_zmm, zmm_q8_rows, avx512vnni_zmm::q4_rows, avx512vnni_zmm::q8_gemm,
     avx512vnni_zmm::q4_gemm, avx512vnni::q8_scores},
    {"avx512vnni", has_avx512vnni, avx512vnni::q8_rows, avx512vnni::q4_rows, avx512vnni_zmm::q8_gemm, avx512vnni_zmm::q4_gemm,
     avx512vnni::q8_scores},
    {"avx512vnni-ymm", has_avx512vnni, avx512vnni::q8_rows, avx512vnni::q4_rows, avx512vnni::q8_gemm, avx512vnni::q4_gemm,
     avx512vnni::q8_scores},
    {"avxvnni", has_avxvnni, avxvnni::q8_rows, avxvnni::q4_rows, avxvnni::q8_gemm, avxvnni::q4_gemm, avxvnni::q8_scores},
    {"avx2", has_avx2, avx2::q8_rows, avx2::q4_rows, avx2::q8_gemm, avx2::q4_gemm, avx2::q8_scores},
};
}  // namespace

PathList arch_paths() { return {kPaths, int(std::size(kPaths))}; }

}  // namespace wren::kernels::quantized
#endif  // __x86_64__
