// io/: the ggml block formats of GGUF tensors, as published in ggml (ggml-common.h,
// ggml-quants.c), and their relation to our storage types (kernels/types.h).
//
//   Q8_0  32 values: f16 d, int8 q[32];                    x = d q
//   Q4_0  32 values: f16 d, u8 qs[16];                     x = d (n - 8), n = qs[j] & 15 for
//         value j, qs[j] >> 4 for value j + 16
//   Q4_K  256 values in 8 sub-blocks of 32: f16 d, f16 dmin, u8 scales[12] (6-bit scale and
//         min per sub-block), u8 qs[128];                  x = d sc_j n - dmin m_j
//   Q5_K  as Q4_K plus u8 qh[32] (the fifth bit of each value, bit j of qh[l] for sub-block j)
//   Q6_K  256 values in 16 sub-blocks of 16: u8 ql[128] (low 4 bits), u8 qh[64] (high 2 bits),
//         int8 scales[16], f16 d;                          x = d scale_j (n - 32)
//
// Q8_0 is our q8 with group 32 (values and f16 scale split into two arrays): converted in both
// directions bit for bit. Q4_0 is our q4 with group 32 up to nibble order (ours: value 2j low,
// 2j + 1 high; Q4_0: value j low, j + 16 high): also bit for bit.
#pragma once

#include <cstdint>

#include "io/gguf.h"
#include "kernels/types.h"

namespace wren::gguf_blocks {

// One row of n values (n a multiple of the block) decoded to f32.
void dequantize_row(GgmlType t, const uint8_t* row, int64_t n, float* out);

// Q8_0 <-> q8 with group 32.
void q8_0_to_q8(const uint8_t* row, int64_t n, int8_t* q, kernels::F16* scales);
void q8_to_q8_0(const int8_t* q, const kernels::F16* scales, int64_t n, uint8_t* row);
// Q4_0 <-> q4 with group 32.
void q4_0_to_q4(const uint8_t* row, int64_t n, uint8_t* q, kernels::F16* scales);
void q4_to_q4_0(const uint8_t* q, const kernels::F16* scales, int64_t n, uint8_t* row);

}  // namespace wren::gguf_blocks
