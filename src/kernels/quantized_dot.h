// kernels/: the integer dot-product paths behind matvec_range (internal to kernels/).
//
// A path computes out[r - r0] = sum_g s_w[r,g] s_x[g] sum_{i in g} q_w[r,i] q_x[i] for the
// rows [r0, r1) of a q8 or a q4 matrix against one QuantizedActivation (see ops.h). Each
// path lives in its own file, compiled for its instruction set with a target attribute,
// and is chosen at run time by quantized_dot.cpp from the CPU's features: never by
// -march, so one binary runs everywhere.
#pragma once

#include <cstdint>

#include "kernels/ops.h"
#include "kernels/types.h"

// Loops over the R rows of a block are unrolled so that their accumulators live in
// registers (at -O2 GCC would keep the arrays on the stack).
#define WREN_UNROLL _Pragma("GCC unroll 8")

namespace wren::kernels::quantized {

using RowsFn = void (*)(const MatrixView& w, const QuantizedActivation& xq, int64_t r0,
                        int64_t r1, float* out);

struct Path {
  const char* name;
  bool (*supported)();  // can this CPU run it?
  RowsFn q8, q4;
};

// The plain path: any group size, one row at a time, int32 per group. Also the fallback of
// the SIMD paths for groups that are not a multiple of their block (32 columns).
void q8_rows_scalar(const MatrixView& w, const QuantizedActivation& xq, int64_t r0, int64_t r1,
                    float* out);
void q4_rows_scalar(const MatrixView& w, const QuantizedActivation& xq, int64_t r0, int64_t r1,
                    float* out);

// The SIMD paths of this architecture, best first (none on other CPUs). Defined in
// quantized_dot_x86.cpp and quantized_dot_arm.cpp.
struct PathList {
  const Path* paths;
  int count;
};
PathList arch_paths();

// The groups of quantize_activation (ops.h): s, q and the sum of q per group, in SIMD
// (quant_hwy.cpp). n % group == 0.
void quantize_activation_groups(const float* x, int64_t n, int group, int8_t* q, float* scales,
                                int32_t* sums);

// Decode order (ops.h pack_for_dot): per block of 8 groups of `words` 4-byte words each,
// word k of group l goes to place 8 k + l. in and out do not overlap.
void transpose_words(const void* in, int64_t blocks, int words, void* out);
// Whether the SIMD paths may read w.packed with this activation.
inline bool use_packed(const MatrixView& w, const QuantizedActivation& xq) {
  return w.packed && w.group == 32 && w.cols % 256 == 0 && !xq.q_lanes.empty();
}

// out[r - r0] = W[r,:] . x for r in [r0, r1) of a q8 / q4 matrix, on the active path.
// Checks that xq matches w (KernelError naming both).
void dot_rows(const MatrixView& w, const QuantizedActivation& xq, int64_t r0, int64_t r1,
              float* out);

}  // namespace wren::kernels::quantized
