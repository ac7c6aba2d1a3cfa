// kernels/: the body of the aarch64 integer dot paths (quantized_dot_arm.cpp includes it
// once per instruction set, after defining
//   int32x4_t dot_s8(int32x4_t acc, int8x16_t a, int8x16_t b)
// = acc + per int32 lane the sum of four products a_k b_k of signed bytes: vdotq_s32 with
// SDOT, vmull_s8 + vpadalq_s16 without; and kMmla: whether the set has I8MM's SMMLA,
// vmmlaq_s32(acc, a, b) = acc + A B^T for the 2 x 8 matrices a and b, rows of 8 bytes, as a
// 2 x 2 of int32 in row order). Not a header to include elsewhere.
//
// Rows are taken kRows at a time so each activation load serves kRows weight rows; the
// int32 sums of a group are scaled once:
//   out[r] = sum_g (s_w[r,g] s_x[g]) sum_{i in g} q_w[r,i] q_x[i].
// Without I8MM a row's group sum stays in the four lanes SDOT fills, each lane is scaled
// and accumulated in f32, and the lanes are added at the end. With I8MM the batched tiles
// (mmla_tile) get one whole int32 sum per row and token and group, so there every row
// (rows_block too, for a batch row to get the bits decode gives it alone) reduces a group's
// sum to one int32 first and accumulates sum_g s_w s_x isum_g in one f32 lane.

constexpr int kRows = 4;

// The q4 block of 16 bytes as signed values v: low nibbles (even columns), high (odd).
inline void unpack_nibbles(const uint8_t* p, int8x16_t& even, int8x16_t& odd) {
  const uint8x16_t b = vld1q_u8(p);
  const int8x16_t eight = vdupq_n_s8(8);
  even = vsubq_s8(vreinterpretq_s8_u8(vandq_u8(b, vdupq_n_u8(0x0F))), eight);
  odd = vsubq_s8(vreinterpretq_s8_u8(vshrq_n_u8(b, 4)), eight);
}


// The int32 sums of one group for R rows. q8: 16 columns per step.
template <int R>
inline void q8_group(const int8_t* const* row, const int8_t* x, int G, int32x4_t* isum) {
  WREN_UNROLL for (int j = 0; j < R; ++j) isum[j] = vdupq_n_s32(0);
  for (int c = 0; c < G; c += 16) {
    const int8x16_t xv = vld1q_s8(x + c);
    WREN_UNROLL for (int j = 0; j < R; ++j) isum[j] = dot_s8(isum[j], vld1q_s8(row[j] + c), xv);
  }
}

// q4: 32 columns (16 bytes) per step, x in nibble order.
template <int R>
inline void q4_group(const uint8_t* const* row, const int8_t* x, int G, int32x4_t* isum) {
  WREN_UNROLL for (int j = 0; j < R; ++j) isum[j] = vdupq_n_s32(0);
  for (int c = 0; c < G; c += 32) {
    const int8x16_t xe = vld1q_s8(x + c), xo = vld1q_s8(x + c + 16);
    WREN_UNROLL for (int j = 0; j < R; ++j) {
      int8x16_t we, wo;
      unpack_nibbles(row[j] + c / 2, we, wo);
      isum[j] = dot_s8(dot_s8(isum[j], we, xe), wo, xo);
    }
  }
}

// Lane j: the whole of row j's group sum isum[j] (j < R <= 4; lanes past R are 0).
template <int R>
inline int32x4_t lane_sums(const int32x4_t* isum) {
  if constexpr (R == 4) return vpaddq_s32(vpaddq_s32(isum[0], isum[1]), vpaddq_s32(isum[2], isum[3]));
  int32_t sums[4] = {0, 0, 0, 0};
  WREN_UNROLL for (int j = 0; j < R; ++j) sums[j] = vaddvq_s32(isum[j]);
  return vld1q_s32(sums);
}
// Lane j: row j's scale of group g (j < R <= 4; lanes past R are 0).
template <int R>
inline float32x4_t scales_in_lanes(const F16* const* sw, int64_t g) {
  float s[4] = {0, 0, 0, 0};
  WREN_UNROLL for (int j = 0; j < R; ++j) s[j] = f16_to_f32(sw[j][g]);
  return vld1q_f32(s);
}

// out[j] = W[r + j,:] . x for j < R: per group the R int32 sums, scaled by s_w s_x and
// accumulated in f32 lanes, summed once at the end (with I8MM: a lane per row, see above).
template <int R, bool kQ4>
void rows_block(const MatrixView& w, const QuantizedActivation& xq, int64_t r, float* out) {
  const int G = w.group;
  const int8_t* x = kQ4 ? xq.q_nibble_order.data() : xq.q.data();
  const int64_t groups = w.groups();
  const F16* sw[R];
  float32x4_t acc[R];
  WREN_UNROLL for (int j = 0; j < R; ++j) {
    sw[j] = w.row_scales(r + j);
    acc[j] = vdupq_n_f32(0);
  }
  for (int64_t g = 0, c = 0; g < groups; ++g, c += G) {
    const float sx = xq.scales[size_t(g)];
    int32x4_t isum[R];
    if constexpr (kQ4) {
      const uint8_t* rows[R];
      WREN_UNROLL for (int j = 0; j < R; ++j) rows[j] = w.q4_row(r + j) + c / 2;
      q4_group<R>(rows, x + c, G, isum);
    } else {
      const int8_t* rows[R];
      WREN_UNROLL for (int j = 0; j < R; ++j) rows[j] = w.q8_row(r + j) + c;
      q8_group<R>(rows, x + c, G, isum);
    }
    if constexpr (kMmla) {  // row j's whole group sum in lane j of acc[0]
      acc[0] = vfmaq_f32(acc[0], vcvtq_f32_s32(lane_sums<R>(isum)), vmulq_n_f32(scales_in_lanes<R>(sw, g), sx));
    } else {
      WREN_UNROLL for (int j = 0; j < R; ++j)
        acc[j] = vfmaq_n_f32(acc[j], vcvtq_f32_s32(isum[j]), f16_to_f32(sw[j][g]) * sx);
    }
  }
  if constexpr (kMmla) {
    float lanes[4];
    vst1q_f32(lanes, acc[0]);
    WREN_UNROLL for (int j = 0; j < R; ++j) out[j] = lanes[j];
  } else {
    WREN_UNROLL for (int j = 0; j < R; ++j) out[j] = vaddvq_f32(acc[j]);
  }
}

// Rows [r0, r1) in blocks of kRows, then one at a time; groups not a multiple of the block
// (16 columns for q8, 32 for q4) go to the plain path.
void q8_rows(const MatrixView& w, const QuantizedActivation& xq, int64_t r0, int64_t r1, float* out) {
  if (w.group % 16 != 0) return q8_rows_scalar(w, xq, r0, r1, out);
  int64_t r = r0;
  for (; r + kRows <= r1; r += kRows) rows_block<kRows, false>(w, xq, r, out + (r - r0));
  for (; r < r1; ++r) rows_block<1, false>(w, xq, r, out + (r - r0));
}

void q4_rows(const MatrixView& w, const QuantizedActivation& xq, int64_t r0, int64_t r1, float* out) {
  if (w.group % 32 != 0) return q4_rows_scalar(w, xq, r0, r1, out);
  int64_t r = r0;
  for (; r + kRows <= r1; r += kRows) rows_block<kRows, true>(w, xq, r, out + (r - r0));
  for (; r < r1; ++r) rows_block<1, true>(w, xq, r, out + (r - r0));
}

// ---- The batched product (GemmFn): tiles of kGemmRows rows x kGemmTokens tokens --------
//
// rows_block with C activations: each weight load (and q4 unpack) serves C tokens and each
// activation load R rows; the R x C int32 sums of a group get their own s_w s_x.
// y[t * ldy + j] = W[r + j,:] . x_t for j < R, t < C.
constexpr int kGemmRows = 4, kGemmTokens = kMmla ? 4 : 2;

template <int R, int C, bool kQ4>
void tile_block(const MatrixView& w, const QuantizedActivation* xq, int64_t r, float* y, int64_t ldy) {
  const int G = w.group;
  const int64_t groups = w.groups();
  const int8_t* x[C];
  WREN_UNROLL for (int t = 0; t < C; ++t) x[t] = kQ4 ? xq[t].q_nibble_order.data() : xq[t].q.data();
  const F16* sw[R];
  float32x4_t acc[R][C];
  WREN_UNROLL for (int j = 0; j < R; ++j) {
    sw[j] = w.row_scales(r + j);
    WREN_UNROLL for (int t = 0; t < C; ++t) acc[j][t] = vdupq_n_f32(0);
  }
  for (int64_t g = 0, c0 = 0; g < groups; ++g, c0 += G) {
    int32x4_t isum[R][C];
    WREN_UNROLL for (int j = 0; j < R; ++j) WREN_UNROLL for (int t = 0; t < C; ++t) isum[j][t] = vdupq_n_s32(0);
    if constexpr (kQ4) {
      for (int64_t c = c0; c < c0 + G; c += 32) {
        int8x16_t xe[C], xo[C];
        WREN_UNROLL for (int t = 0; t < C; ++t) xe[t] = vld1q_s8(x[t] + c), xo[t] = vld1q_s8(x[t] + c + 16);
        WREN_UNROLL for (int j = 0; j < R; ++j) {
          int8x16_t we, wo;
          unpack_nibbles(w.q4_row(r + j) + c / 2, we, wo);
          WREN_UNROLL for (int t = 0; t < C; ++t) isum[j][t] = dot_s8(dot_s8(isum[j][t], we, xe[t]), wo, xo[t]);
        }
      }
    } else {
      for (int64_t c = c0; c < c0 + G; c += 16) {
        int8x16_t xv[C];
        WREN_UNROLL for (int t = 0; t < C; ++t) xv[t] = vld1q_s8(x[t] + c);
        WREN_UNROLL for (int j = 0; j < R; ++j) {
          const int8x16_t q = vld1q_s8(w.q8_row(r + j) + c);
          WREN_UNROLL for (int t = 0; t < C; ++t) isum[j][t] = dot_s8(isum[j][t], q, xv[t]);
        }
      }
    }
    WREN_UNROLL for (int j = 0; j < R; ++j) {
      const float s = f16_to_f32(sw[j][g]);
      WREN_UNROLL for (int t = 0; t < C; ++t)
        acc[j][t] = vfmaq_n_f32(acc[j][t], vcvtq_f32_s32(isum[j][t]), s * xq[t].scales[size_t(g)]);
    }
  }
  WREN_UNROLL for (int j = 0; j < R; ++j) WREN_UNROLL for (int t = 0; t < C; ++t) y[t * ldy + j] = vaddvq_f32(acc[j][t]);
}

// With I8MM: R rows x C tokens (both even) by SMMLA, which multiplies a 2 x 8 block of two
// rows' bytes by the transpose of a 2 x 8 block of two tokens' bytes: the 16 bytes of rows
// j, j + 1 at columns c.. are split into their low halves (columns c..c+8 of each: zip1 of
// the 64-bit halves) and high halves (zip2), and so are the tokens'. isum[j/2][t/2] gets
// lanes (j, t), (j, t + 1), (j + 1, t), (j + 1, t + 1): whole group sums, each scaled by its
// s_w s_x in f32 as rows_block scales a row's, so the bits are decode's.
inline int8x16_t low_halves(int8x16_t a, int8x16_t b) {
  return vreinterpretq_s8_s64(vzip1q_s64(vreinterpretq_s64_s8(a), vreinterpretq_s64_s8(b)));
}
inline int8x16_t high_halves(int8x16_t a, int8x16_t b) {
  return vreinterpretq_s8_s64(vzip2q_s64(vreinterpretq_s64_s8(a), vreinterpretq_s64_s8(b)));
}
template <int R, int C, bool kQ4>
void mmla_tile(const MatrixView& w, const QuantizedActivation* xq, int64_t r, float* y, int64_t ldy) {
  static_assert(R % 2 == 0 && C % 2 == 0);
  // isum + the products of rows (a0, a1) and a token pair b = {low, high halves}, 16 columns.
  auto mmla16 = [](int32x4_t isum, int8x16_t a0, int8x16_t a1, const int8x16_t* b) {
    return vmmlaq_s32(vmmlaq_s32(isum, low_halves(a0, a1), b[0]), high_halves(a0, a1), b[1]);
  };
  const int G = w.group;
  const int64_t groups = w.groups();
  const int8_t* x[C];
  WREN_UNROLL for (int t = 0; t < C; ++t) x[t] = kQ4 ? xq[t].q_nibble_order.data() : xq[t].q.data();
  const F16* sw[R];
  WREN_UNROLL for (int j = 0; j < R; ++j) sw[j] = w.row_scales(r + j);
  float32x4_t acc[R / 2][C / 2];
  WREN_UNROLL for (int j = 0; j < R / 2; ++j) WREN_UNROLL for (int t = 0; t < C / 2; ++t) acc[j][t] = vdupq_n_f32(0);
  // Token pair t's 16 bytes at column c as SMMLA's right operands: {low halves, high halves}.
  auto token_pair = [&](int t, int64_t c, int8x16_t* b) {
    const int8x16_t b0 = vld1q_s8(x[2 * t] + c), b1 = vld1q_s8(x[2 * t + 1] + c);
    b[0] = low_halves(b0, b1), b[1] = high_halves(b0, b1);
  };
  for (int64_t g = 0, c0 = 0; g < groups; ++g, c0 += G) {
    int32x4_t isum[R / 2][C / 2];
    WREN_UNROLL for (int j = 0; j < R / 2; ++j) WREN_UNROLL for (int t = 0; t < C / 2; ++t) isum[j][t] = vdupq_n_s32(0);
    if constexpr (kQ4) {
      for (int64_t c = c0; c < c0 + G; c += 32) {
        int8x16_t xe[C / 2][2], xo[C / 2][2];
        WREN_UNROLL for (int t = 0; t < C / 2; ++t) token_pair(t, c, xe[t]), token_pair(t, c + 16, xo[t]);
        WREN_UNROLL for (int j = 0; j < R / 2; ++j) {
          int8x16_t we0, wo0, we1, wo1;
          unpack_nibbles(w.q4_row(r + 2 * j) + c / 2, we0, wo0);
          unpack_nibbles(w.q4_row(r + 2 * j + 1) + c / 2, we1, wo1);
          WREN_UNROLL for (int t = 0; t < C / 2; ++t)
            isum[j][t] = mmla16(mmla16(isum[j][t], we0, we1, xe[t]), wo0, wo1, xo[t]);
        }
      }
    } else {
      for (int64_t c = c0; c < c0 + G; c += 16) {
        int8x16_t xv[C / 2][2];
        WREN_UNROLL for (int t = 0; t < C / 2; ++t) token_pair(t, c, xv[t]);
        WREN_UNROLL for (int j = 0; j < R / 2; ++j) {
          const int8x16_t w0 = vld1q_s8(w.q8_row(r + 2 * j) + c), w1 = vld1q_s8(w.q8_row(r + 2 * j + 1) + c);
          WREN_UNROLL for (int t = 0; t < C / 2; ++t) isum[j][t] = mmla16(isum[j][t], w0, w1, xv[t]);
        }
      }
    }
    WREN_UNROLL for (int j = 0; j < R / 2; ++j) {
      const float s0 = f16_to_f32(sw[2 * j][g]), s1 = f16_to_f32(sw[2 * j + 1][g]);
      const float32x4_t s_w = {s0, s0, s1, s1};
      WREN_UNROLL for (int t = 0; t < C / 2; ++t) {
        const float x0 = xq[2 * t].scales[size_t(g)], x1 = xq[2 * t + 1].scales[size_t(g)];
        const float32x4_t s_x = {x0, x1, x0, x1};
        acc[j][t] = vfmaq_f32(acc[j][t], vcvtq_f32_s32(isum[j][t]), vmulq_f32(s_w, s_x));
      }
    }
  }
  WREN_UNROLL for (int j = 0; j < R / 2; ++j) WREN_UNROLL for (int t = 0; t < C / 2; ++t) {
    float lanes[4];
    vst1q_f32(lanes, acc[j][t]);
    y[(2 * t) * ldy + 2 * j] = lanes[0], y[(2 * t + 1) * ldy + 2 * j] = lanes[1];
    y[(2 * t) * ldy + 2 * j + 1] = lanes[2], y[(2 * t + 1) * ldy + 2 * j + 1] = lanes[3];
  }
}

// The blocking of quantized_dot.h gemm_blocks with this path's tiles. With I8MM a tile of one
// token is rows_block (the same arithmetic as mmla_tile's lanes).
template <bool kQ4>
void gemm_tiles(const MatrixView& w, const QuantizedActivation* xq, int64_t n_tokens, int64_t r0, int64_t r1,
                float* y, int64_t ldy) {
  gemm_blocks<kGemmRows, kGemmTokens>(n_tokens, r0, r1, y, ldy, [&]<int R, int C>(int64_t r, int64_t t, float* out) {
    if constexpr (kMmla && R % 2 == 0 && C % 2 == 0) {
      mmla_tile<R, C, kQ4>(w, xq + t, r, out, ldy);
    } else if constexpr (kMmla) {
      static_assert(C == 1);
      rows_block<R, kQ4>(w, xq[t], r, out);
    } else {
      tile_block<R, C, kQ4>(w, xq + t, r, out, ldy);
    }
  });
}

void q8_gemm(const MatrixView& w, const QuantizedActivation* xq, int64_t n_tokens, int64_t r0, int64_t r1,
             float* y, int64_t ldy) {
  if (w.group % 16 != 0) return q8_gemm_scalar(w, xq, n_tokens, r0, r1, y, ldy);
  gemm_tiles<false>(w, xq, n_tokens, r0, r1, y, ldy);
}

void q4_gemm(const MatrixView& w, const QuantizedActivation* xq, int64_t n_tokens, int64_t r0, int64_t r1,
             float* y, int64_t ldy) {
  if (w.group % 32 != 0) return q4_gemm_scalar(w, xq, n_tokens, r0, r1, y, ldy);
  gemm_tiles<true>(w, xq, n_tokens, r0, r1, y, ldy);
}

// ---- Attention scores (ScoresFn): int8 query heads x int8 cache rows --------------------
//
// A block of H heads x R rows keeps its H R int32 sums in registers; each 16-column step
// loads the R rows once for the H heads (signed x signed: no offset).

// isum[h R + r] = sum_{i < cols} q_{v+h}[i] k_{j+r}[i], cols a multiple of 16.
template <int H, int R>
void scores_block(const ScoresArgs& a, int64_t cols, int64_t v, int64_t j, int32_t* isum) {
  const int8_t* q[H];
  const int8_t* k[R];
  WREN_UNROLL for (int h = 0; h < H; ++h) q[h] = a.q.q + (v + h) * a.q.ldq;
  WREN_UNROLL for (int r = 0; r < R; ++r) k[r] = a.k[j + r];
  int32x4_t acc[H * R];
  _Pragma("GCC unroll 16") for (int u = 0; u < H * R; ++u) acc[u] = vdupq_n_s32(0);
  for (int64_t i = 0; i < cols; i += 16) {
    int8x16_t kv[R];
    WREN_UNROLL for (int r = 0; r < R; ++r) kv[r] = vld1q_s8(k[r] + i);
    WREN_UNROLL for (int h = 0; h < H; ++h) {
      const int8x16_t qv = vld1q_s8(q[h] + i);
      WREN_UNROLL for (int r = 0; r < R; ++r) acc[h * R + r] = dot_s8(acc[h * R + r], kv[r], qv);
    }
  }
  int u = 0;
  _Pragma("GCC unroll 4") for (; u + 4 <= H * R; u += 4)
    vst1q_s32(isum + u, vpaddq_s32(vpaddq_s32(acc[u], acc[u + 1]), vpaddq_s32(acc[u + 2], acc[u + 3])));
  for (; u < H * R; ++u) isum[u] = vaddvq_s32(acc[u]);
}

void q8_scores(const ScoresArgs& a) {
  const int64_t cols = a.dh / 16 * 16;
  scores_blocks<kRows>(a, [&]<int H, int R>(int64_t v, int64_t j) {
    int32_t isum[H * R];
    scores_block<H, R>(a, cols, v, j, isum);
    finish_scores<H, R>(a, cols, v, j, isum);
  });
}
