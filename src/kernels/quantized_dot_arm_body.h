// kernels/: the body of the aarch64 integer dot paths (quantized_dot_arm.cpp includes it
// once per instruction set, after defining
//   int32x4_t dot_s8(int32x4_t acc, int8x16_t a, int8x16_t b)
// = acc + per int32 lane the sum of four products a_k b_k of signed bytes: vdotq_s32 with
// SDOT, vmull_s8 + vpadalq_s16 without). Not a header to include elsewhere.
//
// Rows are taken kRows at a time so each activation load serves kRows weight rows; the
// int32 sums of a group are scaled once:
//   out[r] = sum_g (s_w[r,g] s_x[g]) sum_{i in g} q_w[r,i] q_x[i].

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

// out[j] = W[r + j,:] . x for j < R: per group the R int32 sums, scaled by s_w s_x and
// accumulated in f32 lanes, summed once at the end.
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
    WREN_UNROLL for (int j = 0; j < R; ++j)
      acc[j] = vfmaq_n_f32(acc[j], vcvtq_f32_s32(isum[j]), f16_to_f32(sw[j][g]) * sx);
  }
  WREN_UNROLL for (int j = 0; j < R; ++j) out[j] = vaddvq_f32(acc[j]);
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
constexpr int kGemmRows = 4, kGemmTokens = 2;

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

// The blocking of quantized_dot.h gemm_blocks with this path's tiles.
template <bool kQ4>
void gemm_tiles(const MatrixView& w, const QuantizedActivation* xq, int64_t n_tokens, int64_t r0, int64_t r1,
                float* y, int64_t ldy) {
  gemm_blocks<kGemmRows, kGemmTokens>(n_tokens, r0, r1, y, ldy, [&]<int R, int C>(int64_t r, int64_t t, float* out) {
    tile_block<R, C, kQ4>(w, xq + t, r, out, ldy);
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
