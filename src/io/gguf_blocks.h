// io/: the ggml block formats of GGUF tensors, as published in ggml (ggml-common.h,
// ggml-quants.c), and their relation to our storage types (kernels/types.h). Value j of a
// 32-value block of nibbles sits in the low nibble of byte j, value j + 16 in its high nibble.
//
//   Q8_0    32 values: f16 d, int8 q[32];                   x = d q
//   Q4_0    32 values: f16 d, u8 qs[16];                    x = d (n - 8)
//   Q4_1    32 values: f16 d, f16 m, u8 qs[16];             x = d n + m
//   Q5_0    32 values: f16 d, u8 qh[4], u8 qs[16];          x = d (n + 16 h - 16), h = bit j of
//           the little-endian u32 qh for value j
//   Q5_1    32 values: f16 d, f16 m, u8 qh[4], u8 qs[16];   x = d (n + 16 h) + m
//   IQ4_NL  32 values: f16 d, u8 qs[16];                    x = d kIq4NlValues[n] (a fixed
//           non-uniform table of 16 int8 levels)
//   Q2_K    256 values in 16 sub-blocks of 16: u8 scales[16] (scale in the low nibble, min in
//           the high), u8 qs[64], f16 d, f16 dmin;        x = d sc_j n - dmin m_j, n in 0..3
//   Q3_K    256 values in 16 sub-blocks of 16: u8 hmask[32], u8 qs[64], u8 scales[12] (6-bit
//           scales), f16 d;                                x = d (s_j - 32) (n + 4 h - 4), n in 0..3
//   Q4_K    256 values in 8 sub-blocks of 32: f16 d, f16 dmin, u8 scales[12] (6-bit scale and
//           min per sub-block), u8 qs[128];                x = d sc_j n - dmin m_j
//   Q5_K    as Q4_K plus u8 qh[32] (the fifth bit of each value, bit j of qh[l] for sub-block j)
//   Q6_K    256 values in 16 sub-blocks of 16: u8 ql[128] (low 4 bits), u8 qh[64] (high 2 bits),
//           int8 scales[16], f16 d;                        x = d scale_j (n - 32)
//   IQ4_XS  256 values in 8 sub-blocks of 32: f16 d, u16 scales_h, u8 scales_l[4] (6-bit scales:
//           4 low bits in scales_l, 2 high in scales_h), u8 qs[128];  x = d (s_j - 32) kIq4NlValues[n]
//
// In Q2_K and Q3_K the 2-bit values of a 128-value half lie in 32 bytes, four to a byte: value
// 32 k + l (k = 0..3) in bits 2k, 2k + 1 of byte l; Q3_K's high bit of value 32 k + l of half
// i is bit 4 i + k of hmask[l].
// Q8_0 is our q8 with group 32 (values and f16 scale split into two arrays): converted in both
// directions bit for bit. Q4_0 is our q4 with group 32 up to nibble order (ours: value 2j low,
// 2j + 1 high; Q4_0: value j low, j + 16 high): also bit for bit.
#pragma once

#include <cstdint>

#include "io/gguf.h"
#include "kernels/types.h"

namespace wren::gguf_blocks {

// IQ4_NL's 16 levels (ggml's kvalues_iq4nl), which IQ4_XS shares.
inline constexpr int8_t kIq4NlValues[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};

// One row of n values (n a multiple of the block) decoded to f32.
void dequantize_row(GgmlType t, const uint8_t* row, int64_t n, float* out);

// Q8_0 <-> q8 with group 32.
void q8_0_to_q8(const uint8_t* row, int64_t n, int8_t* q, kernels::F16* scales);
void q8_to_q8_0(const int8_t* q, const kernels::F16* scales, int64_t n, uint8_t* row);
// Q4_0 <-> q4 with group 32.
void q4_0_to_q4(const uint8_t* row, int64_t n, uint8_t* q, kernels::F16* scales);
void q4_to_q4_0(const uint8_t* q, const kernels::F16* scales, int64_t n, uint8_t* row);

}  // namespace wren::gguf_blocks
