// kernels/: the integer dot-product paths behind matvec_range (internal to kernels/).
//
// A path computes out[r - r0] = sum_g s_w[r,g] s_x[g] sum_{i in g} q_w[r,i] q_x[i] for the
// rows [r0, r1) of a q8 or a q4 matrix against one QuantizedActivation (see ops.h). Each
// path lives in its own file, compiled for its instruction set with a target attribute,
// and is chosen at run time by quantized_dot.cpp from the CPU's features: never by
// -march, so one binary runs everywhere.
#pragma once

#include <algorithm>
#include <cstdint>

#include "kernels/ops.h"
#include "kernels/types.h"

// Loops over the R rows of a block are unrolled so that their accumulators live in
// registers (at -O2 GCC would keep the arrays on the stack); up to eight rows: the zmm path's
// ten q8 decode rows stay a loop, which streams better (quantized_dot_x86.cpp kDecodeQ8Rows).
#define WREN_UNROLL _Pragma("GCC unroll 8")

namespace wren::kernels::quantized {

using RowsFn = void (*)(const MatrixView& w, const QuantizedActivation& xq, int64_t r0,
                        int64_t r1, float* out);
// The batched product of a path: y[t * ldy + (r - r0)] = W[r,:] . x_t for t < n_tokens and r
// in [r0, r1), x_t = xq[t]. Rows are taken in blocks that stay in L1 while every token of the
// batch meets them, and each block is scored against a few tokens at once, so one weight
// load serves several tokens and one activation load several rows.
using GemmFn = void (*)(const MatrixView& w, const QuantizedActivation* xq, int64_t n_tokens,
                        int64_t r0, int64_t r1, float* y, int64_t ldy);

// Attention scores of int8 query heads against int8 cache rows (ops.h scores_rows_int8):
// s[v lds + j] = (scale q.scale[v]) k_scale[j] isum_vj, isum_vj = sum_i q_v[i] k_j[i] in
// int32 (exact), v < n_q, j < n_rows, every path multiplying the factors in this order.
struct ScoresArgs {
  Int8Heads q;
  int64_t n_q;
  const int8_t* const* k;
  const float* k_scale;
  int64_t n_rows, dh;
  float scale;
  float* s;
  int64_t lds;
};
using ScoresFn = void (*)(const ScoresArgs& a);

struct Path {
  const char* name;
  bool (*supported)();  // can this CPU run it?
  RowsFn q8, q4;
  GemmFn q8_gemm, q4_gemm;
  ScoresFn q8_scores;
};

// The plain path: any group size, one row at a time, int32 per group. Also the fallback of
// the SIMD paths for groups that are not a multiple of their block (32 columns).
void q8_rows_scalar(const MatrixView& w, const QuantizedActivation& xq, int64_t r0, int64_t r1,
                    float* out);
void q4_rows_scalar(const MatrixView& w, const QuantizedActivation& xq, int64_t r0, int64_t r1,
                    float* out);
// The plain batched product: each (token, row) dot by the plain path above.
void q8_gemm_scalar(const MatrixView& w, const QuantizedActivation* xq, int64_t n_tokens, int64_t r0,
                    int64_t r1, float* y, int64_t ldy);
void q4_gemm_scalar(const MatrixView& w, const QuantizedActivation* xq, int64_t n_tokens, int64_t r0,
                    int64_t r1, float* y, int64_t ldy);

// The plain scores: each (head, row) dot one product at a time.
void q8_scores_scalar(const ScoresArgs& a);

// The blocking of a batched product (GemmFn): rows [r0, r1) in blocks of R (then one at a
// time); within a block the tokens in tiles of C (then one at a time), so the block's rows
// stay in L1 while the whole batch meets them. `tile` is a lambda templated on the tile's
// rows and tokens: tile.template operator()<Rows, Tokens>(r, t, out) scores rows r.. x
// tokens t.., out = y + t ldy + (r - r0).
template <int R, int C, class Tile>
void gemm_blocks(int64_t n_tokens, int64_t r0, int64_t r1, float* y, int64_t ldy, Tile tile) {
  int64_t r = r0;
  for (; r + R <= r1; r += R) {
    int64_t t = 0;
    for (; t + C <= n_tokens; t += C) tile.template operator()<R, C>(r, t, y + t * ldy + (r - r0));
    for (; t < n_tokens; ++t) tile.template operator()<R, 1>(r, t, y + t * ldy + (r - r0));
  }
  for (; r < r1; ++r)
    for (int64_t t = 0; t < n_tokens; ++t) tile.template operator()<1, 1>(r, t, y + t * ldy + (r - r0));
}

// The end of a block of the scores (ScoresFn) for paths that reduce to int32 in memory:
// isum[h R + r] holds the sum over the first `cols` columns of head v + h with row j + r;
// the columns [cols, dh) are added here and the sums scaled into s.
template <int H, int R>
void finish_scores(const ScoresArgs& a, int64_t cols, int64_t v, int64_t j, const int32_t* isum) {
  for (int h = 0; h < H; ++h) {
    const int8_t* q = a.q.q + (v + h) * a.q.ldq;
    const float factor = a.scale * a.q.scale[v + h];
    for (int r = 0; r < R; ++r) {
      int32_t sum = isum[h * R + r];
      for (int64_t i = cols; i < a.dh; ++i) sum += int32_t(q[i]) * a.k[j + r][i];
      a.s[(v + h) * a.lds + j + r] = factor * a.k_scale[j + r] * float(sum);
    }
  }
}

// The blocking of the scores: query heads in blocks of 4 (then one at a time), rows in
// blocks of R (4 under one head). `block` is a lambda templated on the block's heads and
// rows: block.template operator()<H, Rows>(v, j) scores heads v .. x rows j .. into a.s.
template <int R, class Block>
void scores_blocks(const ScoresArgs& a, Block block) {
  int64_t v = 0;
  for (; v + 4 <= a.n_q; v += 4) {
    int64_t j = 0;
    for (; j + R <= a.n_rows; j += R) block.template operator()<4, R>(v, j);
    for (; j < a.n_rows; ++j) block.template operator()<4, 1>(v, j);
  }
  for (; v < a.n_q; ++v) {
    int64_t j = 0;
    for (; j + 4 <= a.n_rows; j += 4) block.template operator()<1, 4>(v, j);
    for (; j < a.n_rows; ++j) block.template operator()<1, 1>(v, j);
  }
}

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

// Decode order (ops.h pack_for_dot) of one row of `cols` columns in groups of 32, each group
// `words` 4-byte words: per whole block of 8 groups, word k of group l goes to place 8 k + l,
// and in the tail of T < 8 groups to place T k + l. in and out do not overlap.
void decode_order(const void* in, int64_t cols, int words, void* out);
// The bytes of one row's block of 256 columns.
constexpr int64_t packed_block_bytes(DType type) { return type == DType::q4 ? 128 : 256; }
// Where row r of a packed copy lies (the layout: ops.h pack_for_dot, "Rows in tiles"): its
// first block at `blocks`, block b at blocks + b * block_stride, its tail (cols % 256 columns)
// at `tail`; byte offsets from the copy's start, for a copy of `rows` x `cols` of `type`.
struct PackedRowOffsets {
  int64_t blocks, block_stride, tail;
};
inline PackedRowOffsets packed_row_offsets(DType type, int64_t rows, int64_t cols, int64_t r) {
  const int64_t tile = packed_tile_rows(type, cols), block_bytes = packed_block_bytes(type);
  const int64_t row_bytes = type == DType::q4 ? cols / 2 : cols, blocks = cols / 256;
  if (r >= rows / tile * tile) return {r * row_bytes, block_bytes, r * row_bytes + blocks * block_bytes};
  const int64_t first = r / tile * tile, j = r - first, base = first * row_bytes;
  return {base + j * block_bytes, tile * block_bytes, base + tile * blocks * block_bytes + j * (row_bytes - blocks * block_bytes)};
}
// Row r of the view w in its packed copy (MatrixView::packed_first, packed_rows).
inline PackedRowOffsets packed_row_at(DType type, const MatrixView& w, int64_t r) {
  return packed_row_offsets(type, w.packed_copy_rows(), w.cols, w.packed_first + r);
}
// The view's rows before this one have their blocks interleaved in tiles: a tile of rows the
// kernels read may not cross it, since it steps all its rows by one stride.
inline int64_t packed_tiles_end(const MatrixView& w) {
  const int64_t rows = w.packed_copy_rows(), tile = packed_tile_rows(w.type, w.cols);
  return std::clamp<int64_t>(rows / tile * tile - w.packed_first, 0, w.rows);
}
// Whether the SIMD paths may read w.packed: an activation that passed
// dot_rows' / gemm_rows' check has w's group and carries the arrangements of w's rows, so a
// group of 32 means its decode-order copy is there.
inline bool use_packed(const MatrixView& w) { return w.packed && w.group == 32; }

// out[r - r0] = W[r,:] . x for r in [r0, r1) of a q8 / q4 matrix, on the active path.
// Checks that xq matches w (KernelError naming both).
void dot_rows(const MatrixView& w, const QuantizedActivation& xq, int64_t r0, int64_t r1,
              float* out);
// y[t * ldy + (r - r0)] = W[r,:] . x_t for t < n_tokens (GemmFn), on the active path; checks
// every xq[t] against w.
void gemm_rows(const MatrixView& w, const QuantizedActivation* xq, int64_t n_tokens, int64_t r0,
               int64_t r1, float* y, int64_t ldy);

}  // namespace wren::kernels::quantized
