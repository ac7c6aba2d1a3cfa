// kernels/: the body of the x86 integer dot paths (quantized_dot_x86.cpp includes it once
// per instruction set, inside that set's target region, after defining
//   __m256i dot_u8s8(__m256i acc, __m256i a, __m256i b)
// = acc + per int32 lane the sum of four products a_k b_k, a unsigned and b signed bytes:
// maddubs + madd on AVX2, one dpbusd with VNNI). Not a header to include elsewhere.
//
// One 256-bit register holds the 32 int8 activations of one 32-column block. Rows are
// taken kRows at a time so each activation load serves kRows weight rows; the int32 sums
// of a group are scaled once, f32 only for s_w s_x:
//   out[r] = sum_g (s_w[r,g] s_x[g]) sum_{i in g} q_w[r,i] q_x[i].
// q8: q_w is signed, so a = |q_w| and b = sign(q_w) q_x (the same products).
// q4: a = the nibbles v + 8 as bytes (16 low nibbles = even columns, then 16 high nibbles =
// odd columns of the block, met by x in QuantizedActivation::q_nibble_order), and the
// offset is removed exactly in int32: sum (v + 8) q_x - 8 sum q_x.

constexpr int kRows = 4;
// Packed decode rows of whole blocks per tile (packed_rows): q8 the path's kDecodeQ8Rows
// (quantized_dot_x86.cpp: four on 16 registers, eight on 32 ymm, ten on the zmm path), q4 four.
template <bool kQ4>
constexpr int kDecodeRows = kQ4 ? 4 : kDecodeQ8Rows;

inline float hsum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

// hsum of eight vectors at once: lane j is hsum(v[j]) bit for bit, the same three rounds of
// additions (lane i + lane i + 4, then lanes 0 + 2 and 1 + 3, then those two), in 7 adds and 15
// shuffles where eight hsums take 24 of each.
inline __m256 hsum8(const __m256* v) {
  __m256 p[4], u[2];  // p[k] = [lo + hi of v[2k] | of v[2k + 1]]
  WREN_UNROLL for (int k = 0; k < 4; ++k)
    p[k] = _mm256_add_ps(_mm256_permute2f128_ps(v[2 * k], v[2 * k + 1], 0x20),
                         _mm256_permute2f128_ps(v[2 * k], v[2 * k + 1], 0x31));
  // u[k]: per 128-bit lane [s0 + s2, s1 + s3] of two vectors: v[4k], v[4k + 2] low, v[4k + 1], v[4k + 3] high.
  WREN_UNROLL for (int k = 0; k < 2; ++k)
    u[k] = _mm256_add_ps(_mm256_shuffle_ps(p[2 * k], p[2 * k + 1], _MM_SHUFFLE(1, 0, 1, 0)),
                         _mm256_shuffle_ps(p[2 * k], p[2 * k + 1], _MM_SHUFFLE(3, 2, 3, 2)));
  // [v0 v2 v4 v6 | v1 v3 v5 v7], then in order.
  const __m256 sums = _mm256_add_ps(_mm256_shuffle_ps(u[0], u[1], _MM_SHUFFLE(2, 0, 2, 0)),
                                    _mm256_shuffle_ps(u[0], u[1], _MM_SHUFFLE(3, 1, 3, 1)));
  return _mm256_permutevar8x32_ps(sums, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
}

// d[k] = s_w[g + k] s_x[g + k] for k < n <= 8, the f16 scales widened by F16C; eight at a
// time, so a group's scale costs one broadcast load in the loop below.
inline void scale_products(const F16* sw, const float* sx, int64_t n, float* d) {
  if (n == 8) {
    const __m256 w = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(sw)));
    _mm256_storeu_ps(d, _mm256_mul_ps(w, _mm256_loadu_ps(sx)));
    return;
  }
  for (int64_t k = 0; k < n; ++k) d[k] = _cvtsh_ss(sw[k].bits) * sx[k];
}

// The 32 nibbles of 16 bytes as bytes: low nibbles in the low 128 bits, high in the high.
inline __m256i unpack_nibbles(const uint8_t* p) {
  const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  const __m256i both = _mm256_set_m128i(_mm_srli_epi16(b, 4), b);
  return _mm256_and_si256(both, _mm256_set1_epi8(0x0F));
}

// The int32 sums of one group for R rows: q8 (a = |q_w|, b = sign(q_w) q_x).
template <int R>
inline void q8_group(const int8_t* const* row, const int8_t* x, int G, __m256i* isum) {
  WREN_UNROLL for (int j = 0; j < R; ++j) isum[j] = _mm256_setzero_si256();
  for (int c = 0; c < G; c += 32) {
    const __m256i xv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + c));
    WREN_UNROLL for (int j = 0; j < R; ++j) {
      const __m256i q = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(row[j] + c));
      isum[j] = dot_u8s8(isum[j], _mm256_abs_epi8(q), _mm256_sign_epi8(xv, q));
    }
  }
}

// q4 (a = the nibbles v + 8, b = q_x in nibble order); lane 0 starts at -8 sum q_x, which
// removes the offset exactly.
template <int R>
inline void q4_group(const uint8_t* const* row, const int8_t* x, int G, int32_t sum_x,
                     __m256i* isum) {
  const __m256i offset = _mm256_setr_epi32(-8 * sum_x, 0, 0, 0, 0, 0, 0, 0);
  WREN_UNROLL for (int j = 0; j < R; ++j) isum[j] = offset;
  for (int c = 0; c < G; c += 32) {
    const __m256i xv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + c));
    WREN_UNROLL for (int j = 0; j < R; ++j) isum[j] = dot_u8s8(isum[j], unpack_nibbles(row[j] + c / 2), xv);
  }
}

// out[j] = W[r + j,:] . x for j < R: per group the R int32 sums, scaled by s_w s_x and
// accumulated in f32 lanes, which are summed once at the end.
template <int R, bool kQ4>
void rows_block(const MatrixView& w, const QuantizedActivation& xq, int64_t r, float* out) {
  const int G = w.group;
  const int64_t groups = w.groups();
  const int8_t* q8_row[R];
  const uint8_t* q4_row[R];
  const F16* sw[R];
  WREN_UNROLL for (int j = 0; j < R; ++j) {
    if constexpr (kQ4) q4_row[j] = w.q4_row(r + j);
    else q8_row[j] = w.q8_row(r + j);
    sw[j] = w.row_scales(r + j);
  }
  const int8_t* x = kQ4 ? xq.q_nibble_order.data() : xq.q.data();
  __m256 acc[R];
  WREN_UNROLL for (int j = 0; j < R; ++j) acc[j] = _mm256_setzero_ps();
  for (int64_t g8 = 0; g8 < groups; g8 += 8) {
    const int64_t n = std::min<int64_t>(8, groups - g8);
    float d[R][8];
    WREN_UNROLL for (int j = 0; j < R; ++j) scale_products(sw[j] + g8, xq.scales.data() + g8, n, d[j]);
    for (int64_t k = 0; k < n; ++k) {
      const int64_t g = g8 + k, c = g * G;
      __m256i isum[R];
      if constexpr (kQ4) {
        const uint8_t* rows[R];
        WREN_UNROLL for (int j = 0; j < R; ++j) rows[j] = q4_row[j] + c / 2;
        q4_group<R>(rows, x + c, G, xq.sums[size_t(g)], isum);
      } else {
        const int8_t* rows[R];
        WREN_UNROLL for (int j = 0; j < R; ++j) rows[j] = q8_row[j] + c;
        q8_group<R>(rows, x + c, G, isum);
      }
      WREN_UNROLL for (int j = 0; j < R; ++j)
        acc[j] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum[j]), _mm256_broadcast_ss(&d[j][k]), acc[j]);
    }
  }
  WREN_UNROLL for (int j = 0; j < R; ++j) out[j] = hsum(acc[j]);
}

// q4 with G = 32 (the default), groups % 8 == 0: two groups per 256-bit step, which halves
// the per-group work of the loop above. 32 bytes of a row are groups g and g + 1; their
// low nibbles are [even columns of g | of g + 1] and their high nibbles the odd ones, met by
// x's two blocks regrouped by 128-bit lane. Lanes 0-3 of the int32 sum belong to g, 4-7 to
// g + 1, and so do the offsets -8 sum q_x and the scales picked from the eight s_w s_x.
template <int R>
void q4_pairs_block(const MatrixView& w, const QuantizedActivation& xq, int64_t r, float* out) {
  const int64_t groups = w.groups();
  const int8_t* x = xq.q_nibble_order.data();
  const __m256i mask = _mm256_set1_epi8(0x0F);
  const uint8_t* row[R];
  const F16* sw[R];
  __m256 acc[R];
  WREN_UNROLL for (int j = 0; j < R; ++j) {
    row[j] = w.q4_row(r + j);
    sw[j] = w.row_scales(r + j);
    acc[j] = _mm256_setzero_ps();
  }
  for (int64_t g8 = 0; g8 < groups; g8 += 8) {
    const __m256 sx = _mm256_loadu_ps(xq.scales.data() + g8);
    __m256 d[R];
    WREN_UNROLL for (int j = 0; j < R; ++j)
      d[j] = _mm256_mul_ps(_mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(sw[j] + g8))), sx);
    _Pragma("GCC unroll 4") for (int k = 0; k < 8; k += 2) {
      const int64_t g = g8 + k;
      const __m256i a = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + g * 32));
      const __m256i b = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + g * 32 + 32));
      const __m256i x_even = _mm256_permute2x128_si256(a, b, 0x20);
      const __m256i x_odd = _mm256_permute2x128_si256(a, b, 0x31);
      const __m256i offset = _mm256_set_m128i(_mm_cvtsi32_si128(-8 * xq.sums[size_t(g + 1)]),
                                              _mm_cvtsi32_si128(-8 * xq.sums[size_t(g)]));
      const __m256i pick = _mm256_setr_epi32(k, k, k, k, k + 1, k + 1, k + 1, k + 1);
      WREN_UNROLL for (int j = 0; j < R; ++j) {
        const __m256i bytes = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(row[j] + g * 16));
        const __m256i lo = _mm256_and_si256(bytes, mask);
        const __m256i hi = _mm256_and_si256(_mm256_srli_epi16(bytes, 4), mask);
        const __m256i isum = dot2_u8s8(offset, lo, x_even, hi, x_odd);
        acc[j] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum), _mm256_permutevar8x32_ps(d[j], pick), acc[j]);
      }
    }
  }
  WREN_UNROLL for (int j = 0; j < R; ++j) out[j] = hsum(acc[j]);
}

// The tail of a packed row (ops.h pack_for_dot): its last T < 8 groups, transposed as the
// blocks are, word k of tail group l at place T k + l. The tail's m-th 32-byte load holds
// places 8 m .. 8 m + 7, so its lane i belongs to tail group (8 m + i) mod T: the loads fall
// into P = T / gcd(T, 8) phases whose lanes belong to the same groups (P = 1 for T = 1, 2, 4),
// each phase's int32 sums are converted once and scaled by the products s_w s_x of its lanes'
// groups. q8 takes T loads, q4 T / 2 (its last one half a register, zero above, when T is odd).
// Phase 0's lanes 0 .. T - 1 are the groups 0 .. T - 1 and carry their offsets.

// The products s_w s_x of a row's last 8 groups, the tail's T in lanes 8 - T ..; a row of
// fewer than 8 groups (T = groups) gets its own in the same lanes.
inline __m256 last_products(const F16* sw, const float* sx, int64_t groups) {
  if (groups >= 8)
    return _mm256_mul_ps(_mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(sw + groups - 8))),
                         _mm256_loadu_ps(sx + groups - 8));
  alignas(32) float d[8] = {};
  for (int64_t g = 0; g < groups; ++g) d[8 - groups + g] = _cvtsh_ss(sw[g].bits) * sx[g];
  return _mm256_load_ps(d);
}

// Lane i of phase p takes the product of tail group (8 p + i) mod T: last_products' lane
// 8 - T + (8 p + i) mod T.
template <int T, int P>
inline __m256i tail_pick() {
  alignas(32) static constexpr std::array<int32_t, 8> kLanes = [] {
    std::array<int32_t, 8> lanes{};
    for (int i = 0; i < 8; ++i) lanes[size_t(i)] = 8 - T + (8 * P + i) % T;
    return lanes;
  }();
  return _mm256_load_si256(reinterpret_cast<const __m256i*>(kLanes.data()));
}

// 32 bytes at p, or the 16 at p with zeros above.
template <bool kHalf>
inline __m256i load_bytes(const void* p) {
  if constexpr (kHalf) return _mm256_set_m128i(_mm_setzero_si128(), _mm_loadu_si128(static_cast<const __m128i*>(p)));
  else return _mm256_loadu_si256(static_cast<const __m256i*>(p));
}

// isum[j][t] += the lanes of the tail's load M (if there is one) for R rows x C tokens; tail[j]
// and x[t] point at the tail.
template <int T, int M, int R, int C, bool kQ4>
[[gnu::always_inline]] inline void tail_load(const uint8_t* const* tail, const int8_t* const* x, __m256i (*isum)[C]) {
  constexpr int kLoads = kQ4 ? (T + 1) / 2 : T;
  if constexpr (M >= kLoads) return;
  constexpr bool kHalf = kQ4 && T % 2 == 1 && M == T / 2;
  __m256i xe[C], xo[C];
  WREN_UNROLL for (int t = 0; t < C; ++t) {
    xe[t] = load_bytes<kHalf>(x[t] + 32 * M);
    if constexpr (kQ4) xo[t] = load_bytes<kHalf>(x[t] + 16 * T + 32 * M);
  }
  WREN_UNROLL for (int j = 0; j < R; ++j) {
    const __m256i bytes = load_bytes<kHalf>(tail[j] + 32 * M);
    if constexpr (kQ4) {
      const __m256i low = _mm256_set1_epi8(0x0F);
      const __m256i lo = _mm256_and_si256(bytes, low), hi = _mm256_and_si256(_mm256_srli_epi16(bytes, 4), low);
      WREN_UNROLL for (int t = 0; t < C; ++t) isum[j][t] = dot2_u8s8(isum[j][t], lo, xe[t], hi, xo[t]);
    } else {
      WREN_UNROLL for (int t = 0; t < C; ++t) isum[j][t] = dot_s8s8(isum[j][t], bytes, xe[t]);
    }
  }
}

// Phase P of the tail: its loads P, P + kPhases, .. summed, then scaled into acc.
template <int T, int P, int R, int C, bool kQ4>
[[gnu::always_inline]] inline void tail_phase(const uint8_t* const* tail, const int8_t* const* x, const __m256i* offset, const __m256 (*d)[C], __m256 (*acc)[C]) {
  constexpr int kLoads = kQ4 ? (T + 1) / 2 : T, kPhases = std::min(T / std::gcd(T, 8), kLoads);
  if constexpr (P < kPhases) {
    __m256i isum[R][C];
    WREN_UNROLL for (int j = 0; j < R; ++j) WREN_UNROLL for (int t = 0; t < C; ++t)
      isum[j][t] = P == 0 ? offset[t] : _mm256_setzero_si256();
    [&]<int... K>(std::integer_sequence<int, K...>) {
      (tail_load<T, P + K * kPhases, R, C, kQ4>(tail, x, isum), ...);
    }(std::make_integer_sequence<int, 8>());
    const __m256i pick = tail_pick<T, P>();
    WREN_UNROLL for (int j = 0; j < R; ++j) WREN_UNROLL for (int t = 0; t < C; ++t)
      acc[j][t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum[j][t]), _mm256_permutevar8x32_ps(d[j][t], pick), acc[j][t]);
    tail_phase<T, P + 1, R, C, kQ4>(tail, x, offset, d, acc);
  }
}

template <int T, int R, int C, bool kQ4>
inline void packed_tail_of(const uint8_t* const* tail, const F16* const* sw, const QuantizedActivation* xq,
                           int64_t blocks, int64_t groups, __m256 (*acc)[C]) {
  const int64_t g0 = 8 * blocks;
  const __m256i live = _mm256_cmpgt_epi32(_mm256_set1_epi32(T), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
  const int8_t* x[C];
  __m256i offset[C];
  __m256 d[R][C];
  WREN_UNROLL for (int t = 0; t < C; ++t) {
    x[t] = (kQ4 ? xq[t].q_nibble_lanes.data() : xq[t].q_lanes.data()) + 32 * g0;
    const __m256i sums = _mm256_maskload_epi32(reinterpret_cast<const int*>(xq[t].sums.data() + g0), live);
    offset[t] = kQ4 ? _mm256_sub_epi32(_mm256_setzero_si256(), _mm256_slli_epi32(sums, 3)) : s8s8_offset(sums);
    WREN_UNROLL for (int j = 0; j < R; ++j) d[j][t] = last_products(sw[j], xq[t].scales.data(), groups);
  }
  tail_phase<T, 0, R, C, kQ4>(tail, x, offset, d, acc);
}

template <int R, int C, bool kQ4>
inline void packed_tail(const uint8_t* const* tail, const F16* const* sw, const QuantizedActivation* xq,
                        int64_t blocks, int64_t groups, __m256 (*acc)[C]) {
  switch (groups - 8 * blocks) {
    case 1: return packed_tail_of<1, R, C, kQ4>(tail, sw, xq, blocks, groups, acc);
    case 2: return packed_tail_of<2, R, C, kQ4>(tail, sw, xq, blocks, groups, acc);
    case 3: return packed_tail_of<3, R, C, kQ4>(tail, sw, xq, blocks, groups, acc);
    case 4: return packed_tail_of<4, R, C, kQ4>(tail, sw, xq, blocks, groups, acc);
    case 5: return packed_tail_of<5, R, C, kQ4>(tail, sw, xq, blocks, groups, acc);
    case 6: return packed_tail_of<6, R, C, kQ4>(tail, sw, xq, blocks, groups, acc);
    case 7: return packed_tail_of<7, R, C, kQ4>(tail, sw, xq, blocks, groups, acc);
    default: return;  // no tail
  }
}

// ---- Packed weights (decode order, ops.h pack_for_dot), G = 32 -------------------------
//
// Register k of a 256-column block holds word k (4 bytes) of each of its 8 groups, so lane l
// of an int32 sum belongs to group l, and the sums of R rows x C tokens are scaled once per
// block by the 8 products s_w s_x, which lie in the lane order of the row's f16 scales. One
// load of a row's bytes serves C tokens, one load of a token's lanes R rows.

// offset[t] = the offsets of block b's 8 groups for token t, in lane order: -8 sum q_x for
// q4's +8 nibbles, s8s8_offset for q8 (VNNI's unsigned weights).
template <int C, bool kQ4>
[[gnu::always_inline]] inline void block_offsets(const QuantizedActivation* xq, int64_t b, __m256i* offset) {
  WREN_UNROLL for (int t = 0; t < C; ++t) {
    const __m256i sums = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xq[t].sums.data() + 8 * b));
    offset[t] = kQ4 ? _mm256_sub_epi32(_mm256_setzero_si256(), _mm256_slli_epi32(sums, 3)) : s8s8_offset(sums);
  }
}

// A block's int32 sums and the f32 lanes they are scaled into. The AVX-512 paths
// (kSplitHalves) sum the block's 256-bit registers 2m and 2m + 1 apart, as the halves of one
// 512-bit register (kZmm) or in two 256-bit ones (kParts = 2), and scale each half into f32
// lanes of its own with the same products s_w s_x: the halves are added once per row, in f32,
// after the last block, not once per block in int32 (on the zmm path an extract and an add per
// row and block, with the offsets' add, 3 of the 17 vector instructions of a q4 row's block).
// The ymm rows of the avx512vnni path (kParts = 2) take the same steps as the zmm tiles its
// batches use, so a batch row still gets the bits decode gives it alone. Emerald Rapids, zmm
// path, BM_Matvec packed at 1 thread from L2, 2 alternating passes: q8 512 x 2048 52-56 -> 56-61
// GB/s, q4 512 x 2048 34-36 -> 36-37, q4 4096 x 960 22-24 -> 26-28; decode from memory the same
// (the Llama-3.2-1B shape q4 / q8 at 1 and 2 threads), nenya q8 at 2 threads 50.1-53.2 ->
// 52.3-53.7 tokens/s best of 3 rounds.
constexpr int kParts = kSplitHalves && !kZmm ? 2 : 1;
// The registers (Sum, Acc) and f32 steps of a block: f16() widens its 8 scales s_w in its lanes
// (both halves on zmm), mul() multiplies them by its 8 s_x, fmadd() scales a sum into an
// accumulator, and groups() adds the halves (or parts) of a row's accumulator: the f32 lanes of
// groups 0-7. Templates (the unused N), so the 512-bit one is compiled only where kZmm uses it.
template <bool kWide, int N = 0> struct BlockLanes;
template <int N> struct BlockLanes<false, N> {
  using Sum = __m256i;
  using Acc = __m256;
  static Acc f16(const F16* sw) { return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(sw))); }
  static Acc mul(Acc wv, const float* sx) { return _mm256_mul_ps(wv, _mm256_loadu_ps(sx)); }
  static Acc fmadd(Sum isum, Acc d, Acc acc) { return _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum), d, acc); }
  static __m256 groups(const Acc* parts) {
    if constexpr (kParts == 2) return _mm256_add_ps(parts[0], parts[1]);
    else return parts[0];
  }
};
template <int N> struct BlockLanes<true, N> {
  using Sum = __m512i;
  using Acc = __m512;
  static Acc f16(const F16* sw) {
    return _mm512_cvtph_ps(_mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(sw))));
  }
  static Acc mul(Acc wv, const float* sx) {
    return _mm512_mul_ps(wv, _mm512_castpd_ps(_mm512_broadcast_f64x4(_mm256_loadu_pd(reinterpret_cast<const double*>(sx)))));
  }
  static Acc fmadd(Sum isum, Acc d, Acc acc) { return _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum), d, acc); }
  static __m256 groups(const Acc* parts) {
    return _mm256_add_ps(_mm512_castps512_ps256(parts[0]), _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(parts[0]), 1)));
  }
};
using Lanes = BlockLanes<kZmm>;
using BlockSum = Lanes::Sum;
using BlockAcc = Lanes::Acc;

// The integer registers of the VNNI block sums below: 256 bits, or 512 on the zmm path, where
// a register holds the block's 256-bit registers 2m and 2m + 1, so its lanes 0-7 and 8-15
// both belong to groups 0-7 (kept apart, BlockSum above).
// Templates (the unused N), so the 512-bit one is compiled only where the zmm path uses it.
template <bool kWide, int N = 0> struct VnniRegs;
template <int N> struct VnniRegs<false, N> {
  using V = __m256i;
  static constexpr int kBytes = 32;
  static V load(const void* p) { return _mm256_loadu_si256(static_cast<const __m256i*>(p)); }
  static V zero() { return _mm256_setzero_si256(); }
  static V bytes(char c) { return _mm256_set1_epi8(c); }
  static V band(V a, V b) { return _mm256_and_si256(a, b); }
  static V bxor(V a, V b) { return _mm256_xor_si256(a, b); }
  static V high_nibbles(V a) { return _mm256_srli_epi16(a, 4); }
  static V div16(V a) { return _mm256_srai_epi32(a, 4); }
  static V add(V a, V b) { return _mm256_add_epi32(a, b); }
  static V dot(V acc, V a, V b) { return dot_u8s8(acc, a, b); }
  static V widen(__m256i a) { return a; }
};
template <int N> struct VnniRegs<true, N> {
  using V = __m512i;
  static constexpr int kBytes = 64;
  static V load(const void* p) { return _mm512_loadu_si512(p); }
  static V zero() { return _mm512_setzero_si512(); }
  static V bytes(char c) { return _mm512_set1_epi8(c); }
  static V band(V a, V b) { return _mm512_and_si512(a, b); }
  static V bxor(V a, V b) { return _mm512_xor_si512(a, b); }
  static V high_nibbles(V a) { return _mm512_srli_epi16(a, 4); }
  static V div16(V a) { return _mm512_srai_epi32(a, 4); }
  static V add(V a, V b) { return _mm512_add_epi32(a, b); }
  static V dot(V acc, V a, V b) { return _mm512_dpbusd_epi32(acc, a, b); }
  static V widen(__m256i a) { return _mm512_zextsi256_si512(a); }  // the low half, zeros above
};

// The int32 sums of block b for R rows x C tokens: lane l of the sum of z[j][t]'s parts
// (and of a zmm's halves) is sum_{i in group 8 b + l} q_w[j,i] q_x[t,i], offset included (in
// part 0, the low half); exact in int32, so every width and tile shape gives the same sums, and
// the halves' the same on the zmm and the ymm AVX-512 rows. q8: the weights as w xor 0x80
// (block_offsets removes the 128 sum x). q4: a register's low nibbles meet the even columns of
// q_nibble_lanes (the block's first 128 bytes) and its high nibbles the odd ones (the last
// 128). A decode row (C = 1) takes the high nibbles as 16 v (a mask, no shift) into a sum of
// their own, divided by 16 exactly once per block. Register k of W bytes adds to part k mod
// kParts: with kParts = 2 the 256-bit registers 2m and 2m + 1 go to parts 0 and 1, as they go
// to a zmm's halves.
// ask (q8): beside the load of row j's line k, row j's line blk[j] + 64 k + ask.to_l2 goes to
// L2 (prefetcht1) and blk[j] + 64 k + ask.to_l1 to L1 (prefetcht0), each if not 0 (packed_tile:
// its q8 rows one after another on a path that prefetches into L2; avx2_block_sums alike).
struct AskBesideLoads {
  int64_t to_l2 = 0, to_l1 = 0;
};
template <int R, int C, bool kQ4>
[[gnu::always_inline]] inline void vnni_block_sums(const uint8_t* const* blk, const QuantizedActivation* xq, int64_t b, BlockSum (*z)[C][kParts],
                                                   AskBesideLoads ask) {
  using Regs = VnniRegs<kZmm>;
  using V = typename Regs::V;
  constexpr int W = Regs::kBytes;
  __m256i offset[C];
  block_offsets<C, kQ4>(xq, b, offset);
  auto x_at = [&](int t, int64_t at) {
    return Regs::load((kQ4 ? xq[t].q_nibble_lanes.data() : xq[t].q_lanes.data()) + 256 * b + at);
  };
  auto w_at = [&](int j, int64_t at) { return Regs::load(blk[j] + at); };
  const V low = Regs::bytes(0x0F);
  WREN_UNROLL for (int j = 0; j < R; ++j) WREN_UNROLL for (int t = 0; t < C; ++t) WREN_UNROLL for (int p = 0; p < kParts; ++p)
    z[j][t][p] = p == 0 ? Regs::widen(offset[t]) : Regs::zero();
  if constexpr (!kQ4) {
    _Pragma("GCC unroll 8") for (int k = 0; k < 256 / W; ++k) {
      V xv[C];
      WREN_UNROLL for (int t = 0; t < C; ++t) xv[t] = x_at(t, W * k);
      WREN_UNROLL for (int j = 0; j < R; ++j) {
        if (ask.to_l2 && (W * k) % 64 == 0) _mm_prefetch(reinterpret_cast<const char*>(blk[j] + W * k + ask.to_l2), _MM_HINT_T1);
        if (ask.to_l1 && (W * k) % 64 == 0) _mm_prefetch(reinterpret_cast<const char*>(blk[j] + W * k + ask.to_l1), _MM_HINT_T0);
        const V q = Regs::bxor(w_at(j, W * k), Regs::bytes(char(0x80)));
        WREN_UNROLL for (int t = 0; t < C; ++t) z[j][t][k % kParts] = Regs::dot(z[j][t][k % kParts], q, xv[t]);
      }
    }
  } else if constexpr (C == 1) {
    const V high = Regs::bytes(char(0xF0));
    V hi16[R][kParts];
    WREN_UNROLL for (int j = 0; j < R; ++j) WREN_UNROLL for (int p = 0; p < kParts; ++p) hi16[j][p] = Regs::zero();
    _Pragma("GCC unroll 4") for (int k = 0; k < 128 / W; ++k) {
      const V xe = x_at(0, W * k), xo = x_at(0, 128 + W * k);
      WREN_UNROLL for (int j = 0; j < R; ++j) {
        const V bytes = w_at(j, W * k);
        z[j][0][k % kParts] = Regs::dot(z[j][0][k % kParts], Regs::band(bytes, low), xe);
        hi16[j][k % kParts] = Regs::dot(hi16[j][k % kParts], Regs::band(bytes, high), xo);
      }
    }
    WREN_UNROLL for (int j = 0; j < R; ++j) WREN_UNROLL for (int p = 0; p < kParts; ++p)
      z[j][0][p] = Regs::add(z[j][0][p], Regs::div16(hi16[j][p]));
  } else {
    _Pragma("GCC unroll 4") for (int k = 0; k < 128 / W; ++k) {
      V xe[C], xo[C];
      WREN_UNROLL for (int t = 0; t < C; ++t) xe[t] = x_at(t, W * k), xo[t] = x_at(t, 128 + W * k);
      WREN_UNROLL for (int j = 0; j < R; ++j) {
        const V bytes = w_at(j, W * k);
        const V lo = Regs::band(bytes, low), hi = Regs::band(Regs::high_nibbles(bytes), low);
        WREN_UNROLL for (int t = 0; t < C; ++t)
          z[j][t][k % kParts] = Regs::dot(Regs::dot(z[j][t][k % kParts], lo, xe[t]), hi, xo[t]);
      }
    }
  }
}

// The same sums on AVX2 (no VNNI): q8 by dot_s8s8 (|w| and sign(w) x), 8 registers per row
// and block; q4 keeps maddubs pairs in int16 over the block's 8 products per lane
// (8 * 2 * 15 * 127 = 30480 < 2^15), then one madd to int32. ask (q8): as vnni_block_sums'.
template <int R, int C, bool kQ4>
[[gnu::always_inline]] inline void avx2_block_sums(const uint8_t* const* blk, const QuantizedActivation* xq, int64_t b, __m256i (*parts)[C][1],
                                                   AskBesideLoads ask) {
  __m256i offset[C], isum[R][C];
  block_offsets<C, kQ4>(xq, b, offset);
  WREN_UNROLL for (int j = 0; j < R; ++j) WREN_UNROLL for (int t = 0; t < C; ++t) isum[j][t] = offset[t];
  auto x_at = [&](int t, int64_t at) {
    const int8_t* x = kQ4 ? xq[t].q_nibble_lanes.data() : xq[t].q_lanes.data();
    return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + 256 * b + at));
  };
  auto w_at = [&](int j, int64_t at) {
    return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk[j] + at));
  };
  if constexpr (!kQ4) {
    _Pragma("GCC unroll 8") for (int k = 0; k < 8; ++k) {
      __m256i xv[C];
      WREN_UNROLL for (int t = 0; t < C; ++t) xv[t] = x_at(t, 32 * k);
      WREN_UNROLL for (int j = 0; j < R; ++j) {
        if (ask.to_l2 && (32 * k) % 64 == 0) _mm_prefetch(reinterpret_cast<const char*>(blk[j] + 32 * k + ask.to_l2), _MM_HINT_T1);
        if (ask.to_l1 && (32 * k) % 64 == 0) _mm_prefetch(reinterpret_cast<const char*>(blk[j] + 32 * k + ask.to_l1), _MM_HINT_T0);
        const __m256i q = w_at(j, 32 * k);
        WREN_UNROLL for (int t = 0; t < C; ++t) isum[j][t] = dot_s8s8(isum[j][t], q, xv[t]);
      }
    }
  } else {
    const __m256i low = _mm256_set1_epi8(0x0F);
    __m256i pairs[R][C];
    WREN_UNROLL for (int j = 0; j < R; ++j) WREN_UNROLL for (int t = 0; t < C; ++t) pairs[j][t] = _mm256_setzero_si256();
    _Pragma("GCC unroll 4") for (int k = 0; k < 4; ++k) {
      __m256i xe[C], xo[C];
      WREN_UNROLL for (int t = 0; t < C; ++t) xe[t] = x_at(t, 32 * k), xo[t] = x_at(t, 128 + 32 * k);
      WREN_UNROLL for (int j = 0; j < R; ++j) {
        const __m256i bytes = w_at(j, 32 * k);
        const __m256i lo = _mm256_and_si256(bytes, low);
        const __m256i hi = _mm256_and_si256(_mm256_srli_epi16(bytes, 4), low);
        WREN_UNROLL for (int t = 0; t < C; ++t)
          pairs[j][t] = _mm256_add_epi16(pairs[j][t], _mm256_add_epi16(_mm256_maddubs_epi16(lo, xe[t]), _mm256_maddubs_epi16(hi, xo[t])));
      }
    }
    WREN_UNROLL for (int j = 0; j < R; ++j) WREN_UNROLL for (int t = 0; t < C; ++t)
      isum[j][t] = _mm256_add_epi32(isum[j][t], _mm256_madd_epi16(pairs[j][t], _mm256_set1_epi16(1)));
  }
  WREN_UNROLL for (int j = 0; j < R; ++j) WREN_UNROLL for (int t = 0; t < C; ++t) parts[j][t][0] = isum[j][t];
}

// Rows r.. (R of them) x tokens xq[0..C): per block the int32 sums (vnni_block_sums or
// avx2_block_sums), scaled by s_w s_x in lane order and accumulated in f32 lanes, then the
// tail (packed_tail), summed once at the end. The f32 steps are the same for every tile
// shape, and for both register widths of the AVX-512 paths (BlockSum), so a batch row gets
// the bits decode (R = C = 1) gives it alone.
// y[t * ldy + j] = W[r + j,:] . x_t.
// A decode row (C = 1) asks for the bytes ahead of the block it reads (decode_prefetch): the
// L2 streamer does not cross a 4 KiB page, and short rows (nenya's 960 and 384 bytes) start
// a stream it has to learn again. 2 KB ahead, one prefetch per 64 bytes read (against none,
// builds alternating): nenya q8 33.4-33.7 -> 37.6-37.9 tokens/s at 2 threads, the Llama-3.2-1B
// shape q4 34.2-35.3 -> 39.3-39.7 and q8 +3-5%; 1 KB ahead was slower on nenya and q4, 4 KB
// too. q4 rows go 3 KB ahead: the distance swept alone (2, 2.5, 3, 3.5 KB, alternating in one
// sitting), the Llama-3.2-1B shape q4 at 1 / 2 threads 20.9 / 40.8 -> 21.5-21.9 / 41.7-43.1
// tokens/s on the zmm path, 21.3-21.4 / 39.8-40.9 -> 22.0 / 40.7-43.8 on AVX2, OLMoE's q4
// 20.8-21.0 / 39.0-39.8 -> 22.4-22.7 / 42.4-43.3; q8 rows lost 3-7% at 3 KB (and at 1.5 and
// 4 KB). (The same prefetches through a helper, prefetch_lines(p, bytes), inlined or not, built
// a q8 decode row 15% slower on the Llama shape, 12.0 against 14.2 tokens/s at 1 thread, for
// a reason not found: measure before reshaping this loop.)
// The distance counts from the end of the tile: R rows lie side by side in one run, so row j's
// bytes that far ahead are rows j + 1.. of the same tile, already on their way, once R
// row_bytes reach that far (four q4 rows of 1024 bytes, eight q8 rows of 2048). Ahead of the
// tile (R row_bytes + the distance) against ahead of the row, Zen 5, alternating, 3 rounds,
// 1 / 2 threads: the Llama-3.2-1B shape q4 30.5-31.7 / 57.0-59.1 -> 32.3-33.0 / 61.0-62.4
// tokens/s, nenya q8 36.9-38.9 / 66.3-71.2 -> 41.3-42.8 / 72.4-76.5; the Llama shape q8 the
// same (23.5-23.6 / 44.0-44.1 against 23.0-23.8 / 43.6-45.8).
// kToL2: the lines go to L2 only (prefetcht1), not L1; packed_rows takes it where
// decode_prefetch() says so (quantized_dot_x86.cpp: per core).
// Rows in a tile of four (ops.h pack_for_dot: q4, and q8 of more than one block and a tail)
// are one run read front to back, so the distance is along that run (decode_prefetch's
// tile_bytes, per core).
// Emerald Rapids, zmm path: BM_DecodeStream q4 llama-ffn at 1 thread, 5 alternating passes,
// four rows one after another 14.6-15.0 GB/s, the tile's run 14.7-15.4 (4 KB ahead into L2)
// and 15.2-15.4 (3 KB ahead into L1); the Llama-3.2-1B shape q4 tg32, 3 alternating rounds,
// medians 20.8-21.1 -> 21.3-21.6 tokens/s at 1 thread. Along the run, 3 alternating rounds at 1 / 2 threads: into L2 4, 6, 8 or 12 KB
// ahead the same (20.9-21.7 / 39.9-41.6 medians), into L1 3 KB the same and 4 KB 6% slower
// (19.6-19.9 / 37.0-38.2); a prefetch for every other line or fewer, 15-20% slower. Into L1
// (Zen 5's choice, decode_prefetch) it goes 6 KB ahead: a Zen 5 core streams twice the
// Emerald Rapids' bytes, so twice the bytes must be on their way. Zen 5 (family 26, zmm
// path), the Llama-3.2-1B shape q4 tg32, builds alternating, best of 3 repetitions per run:
// 3 -> 6 KB, 1 thread 27.5-30.6 -> 31.3-34.6 tokens/s (faster in 7 of 7 rounds, +8 to +17%),
// 2 threads 54.9-71.1 -> 58.6-76.0 (4 of 5); 4, 5, 7, 8 and 12 KB between or below, 16 KB
// near 6; OLMoE's q4 the same or faster (2 of 3 rounds, 30.9-33.0 -> 30.9-38.8 at 1 thread).
// Into L2 (Intel) the distance is 3456 bytes, and a block's lines of the run are asked for in
// address order. On a Xeon with AMX (family 6 model 167 under KVM, zmm path),
// BM_DecodeStreamVsRead's q4 Llama FFN, 1 / 2 threads: the lines asked for row by row, which the
// compiler scheduled out of order (row 0's first line, row 1's two, row 0's second, ...), read
// 0.88-0.91 of a plain read of the same bytes 3456 bytes ahead, in address order 0.95-0.98 (3
// alternating passes). In address order the distance swept from 1280 to 4608 bytes (two passes
// each, 1 thread) is not smooth but repeats pass to pass: 2560, 2816, 3072 and 4096 read
// 0.88-0.92, 3328-3840 read 0.93-0.97 (3456: 0.96-0.97, 2 threads 0.97-0.98). Which lines
// collide is not known (no counters in the guest). The Llama-3.2-1B shape q4 tg32, 1 / 2
// threads: 4 KB -> 3456 bytes (in order, 2 alternating rounds) 19.8-20.1 / 38.1-38.3 ->
// 21.3-21.4 / 41.4-43.2 tokens/s; out of order -> in order (both 3456, 2 rounds) 18.1-18.7 /
// 34.1-35.9 -> 19.7 / 38.4-38.9, OLMoE's q4 17.1-17.6 / 32.1-33.6 -> 18.2-18.4 / 33.9-34.7.
// The scales are a stream of their own (row r's f16 scales at r x groups, the rows of a tile
// side by side), which the prefetchers left to the hardware: each row asks for the next tile's
// row j scales at this block, one line every four blocks. Zen 5 (zmm path), BM_DecodeStream's
// passes with and without, alternating in one process (12 pairs, medians of the ratios, three
// runs), 1 / 2 threads: the Llama FFN q4 1.06-1.14 / 1.05-1.10, q8 1.02-1.03 / 1.02-1.04;
// nenya's 960 columns q4 1.05-1.10 / 1.00-1.05, q8 1.05-1.11 / 1.06-1.11; its experts q4
// 1.08-1.14 / 1.08-1.11, q8 1.02-1.03 / 0.98-1.04. Two tiles ahead was no better.
constexpr int64_t kQ4RowPrefetchBytes = 3072;  // q8's: decode_prefetch().q8_row_bytes
// How far past a tile's first byte its asks reach when its R rows lie one after another.
inline int64_t rows_ask_reach(bool q4, int64_t R, int64_t row_bytes) {
  return R * row_bytes + (q4 ? kQ4RowPrefetchBytes : decode_prefetch().q8_row_bytes);
}
template <int R, int C, bool kQ4, int kTile, bool kToL2 = false>
void packed_tile(const MatrixView& w, const QuantizedActivation* xq, int64_t r, float* y, int64_t ldy) {
  constexpr DType kType = kQ4 ? DType::q4 : DType::q8;
  constexpr int64_t kBlockBytes = packed_block_bytes(kType);
  const int64_t blocks = w.cols / 256, row_bytes = kQ4 ? w.cols / 2 : w.cols;
  // Row j's block b at row[j] + stride b, its tail at tail[j]; the rows lie in tiles of kTile
  // (by_layout), so the stride is kTile blocks. q8 has it when compiled, q4 reads the same
  // value from the offsets: on a Xeon with AMX (BM_DecodeStreamVsRead, 2 alternating passes)
  // q8 rows of one block and a tail read 0.81-0.86 of a plain read with the stride read at run
  // time and 0.90 with it known, and the Llama FFN's q4 rows 0.87 with it known against
  // 0.95-0.97. The hot loops' instructions differ little (prefetches and loads from one base
  // either way); why the code is slower, not found: measure before reshaping this.
  const auto* packed = static_cast<const uint8_t*>(w.packed);
  const int64_t stride = kQ4 ? packed_row_at(kType, w, r).block_stride : kTile * kBlockBytes;
  const uint8_t *row[R], *tail[R];
  const F16* sw[R];
  WREN_UNROLL for (int j = 0; j < R; ++j) {
    const PackedRowOffsets at = packed_row_at(kType, w, r + j);
    row[j] = packed + at.blocks, tail[j] = packed + at.tail;
    sw[j] = w.row_scales(r + j);
  }
  BlockAcc acc[R][C][kParts];
  WREN_UNROLL for (int j = 0; j < R; ++j) WREN_UNROLL for (int t = 0; t < C; ++t) WREN_UNROLL for (int p = 0; p < kParts; ++p)
    acc[j][t][p] = BlockAcc{};
  // Rows one after another: past this tile's R rows; a tile's run (its rows' blocks
  // interleaved, one stream): along the run.
  const bool one_run = stride != kBlockBytes;
  const DecodePrefetch& prefetch = decode_prefetch();
  const int64_t ahead = one_run ? prefetch.tile_bytes : rows_ask_reach(kQ4, R, row_bytes);
  const int64_t next_tile_scales = R * w.groups();  // in f16 scales, from row j's to row j + R's
  constexpr auto kHint = kToL2 ? _MM_HINT_T1 : _MM_HINT_T0;
  // q8 rows one after another, into L2: each line is asked for beside the load of the line it
  // runs ahead of (the block sums' ask), not the block's 4 R lines at once before its
  // arithmetic. Zen 4 (family 25, zmm path), BM_DecodeStreamVsRead at 1 thread, three
  // alternating passes: the Llama FFN 0.757-0.763 -> 0.779-0.782 of a plain read, OLMoE's
  // experts 0.675-0.691 -> 0.704-0.707; the models at 1 thread (three alternating rounds, means)
  // the Llama-3.2-1B shape q8 18.80 -> 19.44 tokens/s, OLMoE q8 16.51 -> 16.83. The avx2 path
  // the same, on the same Zen 4 (`--int8-path avx2`, 20 repetitions alternating with and
  // without in one process, medians of the pair ratios, either one first), 1 / 2 threads: the
  // Llama-3.2-1B shape q8 1.044, 1.053 / 1.056, 1.018, OLMoE q8 1.080, 1.076 / 1.073, 1.060,
  // nenya q8 (its 384-column rows) 0.999, 0.990, 1.015, 0.996 / 1.011, 0.958. Not measured on
  // Intel, which takes it with the same hint.
  const bool ask_beside_loads = C == 1 && !kQ4 && kToL2 && !one_run;
  // Into L1 too only where rows have no tail (decode_prefetch: nenya's 384 columns read less).
  const int64_t to_l1 = row_bytes == kBlockBytes * blocks ? prefetch.q8_row_l1_bytes : 0;
  const AskBesideLoads ask = ask_beside_loads ? AskBesideLoads{ahead, to_l1} : AskBesideLoads{};
  // Those L1 asks run on in the order the rows are read: from a row's last blocks into the
  // same row of the next tile (row j + R, (R - 1) row_bytes further on), whose first block
  // would otherwise miss L1 at every row of every tile. Zen 4 (family 25 model 17, zmm path),
  // 1 thread, BM_DecodeStream's passes with and without alternating in one process (12 pairs,
  // medians of the per-pair ratios, three runs, either one first): OLMoE's experts 1.043-1.055
  // (gate and up alone 1.042-1.060, down 2048 x 1024 alone 1.050-1.064), the Llama FFN
  // 0.996-1.035. The models at 1 thread, 20 repetitions alternating the two in one process
  // (medians of the pair ratios, runs with either one first): OLMoE q8 0.999, 1.012, 1.014,
  // 1.024, the Llama-3.2-1B shape q8 1.025, 1.040. Asks two blocks on (wrapping alike) read
  // 2-6% slower than one block on, and the next tile's scales asked into L1 4-7% slower.
  const AskBesideLoads ask_at_row_end = {ask.to_l2, ask.to_l1 ? ask.to_l1 + (R - 1) * row_bytes : 0};
  for (int64_t b = 0; b < blocks; ++b) {
    const uint8_t* blk[R];
    WREN_UNROLL for (int j = 0; j < R; ++j) blk[j] = row[j] + stride * b;
    if constexpr (C == 1) {
      // A run's lines are asked for in address order, from one base.
      if (one_run)
        _Pragma("GCC unroll 16") for (int64_t at = 0; at < R * kBlockBytes; at += 64)
          _mm_prefetch(reinterpret_cast<const char*>(blk[0] + at + ahead), kHint);
      else if (!ask_beside_loads)
        WREN_UNROLL for (int j = 0; j < R; ++j) for (int64_t at = 0; at < kBlockBytes; at += 64)
          _mm_prefetch(reinterpret_cast<const char*>(blk[j] + at + ahead), kHint);
      // The next tile's scales, row j's at this block: one line per 4 blocks (64 bytes of f16).
      if (b % 4 == 0)
        WREN_UNROLL for (int j = 0; j < R; ++j)
          _mm_prefetch(reinterpret_cast<const char*>(sw[j] + 8 * b + next_tile_scales), kHint);
    }
    BlockSum isum[R][C][kParts];
    const AskBesideLoads block_ask = kBlockBytes * b + ask.to_l1 < row_bytes ? ask : ask_at_row_end;
    if constexpr (kVnni)
      vnni_block_sums<R, C, kQ4>(blk, xq, b, isum, block_ask);
    else avx2_block_sums<R, C, kQ4>(blk, xq, b, isum, block_ask);
    WREN_UNROLL for (int j = 0; j < R; ++j) {
      const BlockAcc wv = Lanes::f16(sw[j] + 8 * b);
      WREN_UNROLL for (int t = 0; t < C; ++t) {
        const BlockAcc d = Lanes::mul(wv, xq[t].scales.data() + 8 * b);
        WREN_UNROLL for (int p = 0; p < kParts; ++p) acc[j][t][p] = Lanes::fmadd(isum[j][t][p], d, acc[j][t][p]);
      }
    }
  }
  if constexpr (C == 1)
    WREN_UNROLL for (int j = 0; j < R; ++j) for (int64_t at = 0; at < row_bytes - kBlockBytes * blocks; at += 64)
      _mm_prefetch(reinterpret_cast<const char*>(tail[j] + at + ahead), kHint);
  __m256 sum[R][C];
  WREN_UNROLL for (int j = 0; j < R; ++j) WREN_UNROLL for (int t = 0; t < C; ++t) sum[j][t] = Lanes::groups(acc[j][t]);
  packed_tail<R, C, kQ4>(tail, sw, xq, blocks, w.groups(), sum);
  WREN_UNROLL for (int j = 0; j < R; ++j) WREN_UNROLL for (int t = 0; t < C; ++t) y[t * ldy + j] = hsum(sum[j][t]);
}

// Rows of a single group (cols == 32: the rank of a low-rank projection, GDN-2's W_b). The
// steps packed_tile takes for such a row (no block, a tail of one group, so every lane's sum
// is scaled by the one product s_w s_x before the lanes are summed) without the general tail's
// machinery, which cost ~14 ns a 32-byte row: nenya's gate rows were 4% of a decode step at
// ~6 times the time their bytes take. Eight rows' lanes are summed at once (hsum8). Same bits
// as packed_tile (the test compares them).
// A row of one group is all tail, and a tile's tails lie one after another, so row r is at
// r x its bytes in either layout (packed_row_offsets).
template <bool kQ4>
void one_group_rows(const MatrixView& w, const QuantizedActivation& xq, int64_t r0, int64_t r1, float* out) {
  constexpr int64_t kRowBytes = kQ4 ? 16 : 32;
  const auto* rows = static_cast<const uint8_t*>(w.packed) + w.packed_first * kRowBytes;
  const int8_t* x = kQ4 ? xq.q_nibble_lanes.data() : xq.q_lanes.data();
  const __m256i sums = _mm256_setr_epi32(xq.sums[0], 0, 0, 0, 0, 0, 0, 0);
  const __m256i offset = kQ4 ? _mm256_sub_epi32(_mm256_setzero_si256(), _mm256_slli_epi32(sums, 3)) : s8s8_offset(sums);
  const __m256i xe = load_bytes<kQ4>(x);
  const __m256i xo = kQ4 ? load_bytes<true>(x + 16) : xe;
  const __m256i low = _mm256_set1_epi8(0x0F);
  const float sx = xq.scales[0];
  // Row r's eight lanes, scaled, before their sum.
  const auto lanes = [&](int64_t r) {
    const __m256i bytes = load_bytes<kQ4>(rows + r * kRowBytes);
    __m256i isum;
    if constexpr (kQ4) {
      const __m256i lo = _mm256_and_si256(bytes, low), hi = _mm256_and_si256(_mm256_srli_epi16(bytes, 4), low);
      isum = dot2_u8s8(offset, lo, xe, hi, xo);
    } else {
      isum = dot_s8s8(offset, bytes, xe);
    }
    const __m256 d = _mm256_set1_ps(_cvtsh_ss(w.row_scales(r)[0].bits) * sx);
    return _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum), d, _mm256_setzero_ps());
  };
  int64_t r = r0;
  for (; r + 8 <= r1; r += 8) {
    __m256 v[8];
    WREN_UNROLL for (int j = 0; j < 8; ++j) v[j] = lanes(r + j);
    _mm256_storeu_ps(out + (r - r0), hsum8(v));
  }
  for (; r < r1; ++r) out[r - r0] = hsum(lanes(r));
}

// The first tile of a call over q8 rows of whole blocks lying one after another starts cold:
// no tile before it asked for its lines (a MoE layer's chosen experts lie anywhere, and each
// starts a call), and ten rows side by side are a pattern the L2 streamer learns slowly. So
// the call first asks, in address order, for what a tile's asks reach (rows_ask_reach): the
// first tile and the distance beyond it. (An added product's calls of 64 rows,
// matvec_add_range, follow on from each other and ask again for lines already asked for.)
// Zen 4 (family 25 model 17), the models, 20 repetitions alternating with and without in one
// process, medians of the pair ratios over two runs (either one first): OLMoE q8 at 1 thread
// 1.055-1.076 on the zmm path, 1.004-1.008 on avx2, 1.012-1.015 at 2 threads; the
// Llama-3.2-1B shape q8 0.998-1.015 (few, long matrices). Half the reach 5% slower than the
// whole, twice 2-4%; the first tile's scales asked for too, the same. q4 tiles (OLMoE q4
// 0.980-1.000) and nenya's rows with a tail (0.976-0.996) gained nothing and go without.
template <bool kToL2>
void ask_first_q8_tile(const MatrixView& w, int64_t r0, int64_t r1) {
  const auto* first = static_cast<const uint8_t*>(w.packed) + packed_row_at(DType::q8, w, r0).blocks;
  const int64_t bytes = std::min((r1 - r0) * w.cols, rows_ask_reach(false, kDecodeQ8Rows, w.cols));
  for (int64_t at = 0; at < bytes; at += 64)
    _mm_prefetch(reinterpret_cast<const char*>(first + at), kToL2 ? _MM_HINT_T1 : _MM_HINT_T0);
}

// Rows [r0, r1) of a part of the packed copy whose tiles are kTile rows (by_layout). Groups
// that are not whole 32-column blocks go to the plain path. Packed rows lie in one run of
// memory (row r + 1 starts where r ends, or a tile's rows' blocks interleaved), so R rows at a
// time are still one stream, and each block's offsets, scales and reductions serve R rows
// with R times the independent work. Rows of whole 256-column blocks go kDecodeRows at a
// time (kDecodeRows: four, or 8-10 q8 rows on the AVX-512 paths). Four against two on a Zen 5
// under KVM (probe 35-38 GB/s at 1 thread) the Llama-3.2-1B shape, alternating, 3 rounds, 1 / 2 threads: q8 15.8-16.5 / 31.3-31.8
// -> 19.0-19.1 / 35.9-37.1 tokens/s (zmm path), 15.2 / 29.1-29.6 -> 17.1-17.2 / 29.6-33.8
// (avx2), 15.4-16.0 / 30.1-31.3 -> 18.5-18.7 / 35.0-35.7 (avxvnni); q4 25.6 / 46.5-47.7 ->
// 26.7-27.0 / 49.3-50.1 (zmm), 23.7-24.4 / 44.4-44.8 -> 24.7-25.9 / 47.7-50.3 (avx2). Rows with
// a tail go four at a time (eight q8 rows with a tail were slower; the avx512vnni-zmm path reads
// q8 rows with a tail through the 256-bit ones, zmm_q8_rows): with the prefetch ahead of
// the tile (packed_tile), BM_DecodeStream's nenya rows, best of 3 alternating, 1 / 2 threads, q8
// 384 columns 23.0 / 38.7 -> 27.1 / 41.8 GB/s, 960 columns 28.4 / 51.1 -> 32.3 / 52.9, q4 384
// columns 18.6 / 31.4 -> 22.7 / 32.5, 960 columns 22.3-27.9 / 39.8-48.0 -> 24.4-25.2 / 43.2-45.5
// (before that prefetch, four slowed the 960 columns by 7-13%). Then two, then one. Rows of a
// single group take one_group_rows. Stored q8 rows are streamed one at a time: four rows side by
// side (four streams 256 bytes apart per step) read 1 GiB at a third of the speed on Zen 4 under
// KVM (4.5 vs 13.9 GB/s, 1 thread). Stored q4 rows: kRows at a time, then the rest one at a
// time.
template <bool kQ4, int kTile, bool kToL2>
void packed_rows_in(const MatrixView& w, const QuantizedActivation& xq, int64_t r0, int64_t r1, float* out) {
  int64_t r = r0;
  if constexpr (!kQ4 && kTile == 1)
    if (w.cols % 256 == 0 && r < r1) ask_first_q8_tile<kToL2>(w, r0, r1);
  if (w.cols % 256 == 0)
    for (; r + kDecodeRows<kQ4> <= r1; r += kDecodeRows<kQ4>)
      packed_tile<kDecodeRows<kQ4>, 1, kQ4, kTile, kToL2>(w, &xq, r, out + (r - r0), 1);
  for (; r + 4 <= r1; r += 4) packed_tile<4, 1, kQ4, kTile, kToL2>(w, &xq, r, out + (r - r0), 1);
  for (; r + 2 <= r1; r += 2) packed_tile<2, 1, kQ4, kTile, kToL2>(w, &xq, r, out + (r - r0), 1);
  for (; r < r1; ++r) packed_tile<1, 1, kQ4, kTile, kToL2>(w, &xq, r, out + (r - r0), 1);
}
// rows(a, b) over rows [r0, r1) of a packed copy in its two parts: the rows in tiles
// (packed_tiles_end) as rows.template operator()<packed_tile_rows>, then the rest as <1>, so
// a tile of the kernels never crosses between them and steps its rows by a stride known
// when compiled.
template <bool kQ4, class Rows>
void by_layout(const MatrixView& w, int64_t r0, int64_t r1, Rows&& rows) {
  constexpr DType kType = kQ4 ? DType::q4 : DType::q8;
  const int64_t split = std::clamp(packed_tiles_end(w), r0, r1);
  if (packed_tile_rows(kType, w.cols) == kPackedTileRows)
    rows.template operator()<kPackedTileRows>(r0, split);
  else rows.template operator()<1>(r0, split);
  rows.template operator()<1>(split, r1);
}
template <bool kQ4, bool kToL2>
void packed_rows_to(const MatrixView& w, const QuantizedActivation& xq, int64_t r0, int64_t r1, float* out) {
  if (w.cols == 32) return one_group_rows<kQ4>(w, xq, r0, r1, out);
  by_layout<kQ4>(w, r0, r1, [&]<int kTile>(int64_t a, int64_t b) {
    packed_rows_in<kQ4, kTile, kToL2>(w, xq, a, b, out + (a - r0));
  });
}
template <bool kQ4>
void packed_rows(const MatrixView& w, const QuantizedActivation& xq, int64_t r0, int64_t r1, float* out) {
  if (decode_prefetch().to_l2) return packed_rows_to<kQ4, true>(w, xq, r0, r1, out);
  packed_rows_to<kQ4, false>(w, xq, r0, r1, out);
}

void q8_rows(const MatrixView& w, const QuantizedActivation& xq, int64_t r0, int64_t r1,
             float* out) {
  if (w.group % 32 != 0) return q8_rows_scalar(w, xq, r0, r1, out);
  int64_t r = r0;
  if (use_packed(w)) return packed_rows<false>(w, xq, r0, r1, out);
  for (; r < r1; ++r) rows_block<1, false>(w, xq, r, out + (r - r0));
}

void q4_rows(const MatrixView& w, const QuantizedActivation& xq, int64_t r0, int64_t r1,
             float* out) {
  if (w.group % 32 != 0) return q4_rows_scalar(w, xq, r0, r1, out);
  int64_t r = r0;
  if (use_packed(w)) return packed_rows<true>(w, xq, r0, r1, out);
  if (w.group == 32 && w.groups() % 8 == 0) {
    for (; r + kRows <= r1; r += kRows) q4_pairs_block<kRows>(w, xq, r, out + (r - r0));
    for (; r < r1; ++r) q4_pairs_block<1>(w, xq, r, out + (r - r0));
    return;
  }
  for (; r + kRows <= r1; r += kRows) rows_block<kRows, true>(w, xq, r, out + (r - r0));
  for (; r < r1; ++r) rows_block<1, true>(w, xq, r, out + (r - r0));
}

// ---- The batched product (GemmFn): tiles of R rows x C tokens ---------------------------
//
// The loops of rows_block with C activations: each weight load (and q8's |q_w|) serves C
// tokens and each activation load R rows, and the R x C int32 sums of a group are scaled by
// their own s_w s_x. y[t * ldy + j] = W[r + j,:] . x_t for j < R, t < C.
template <int R, int C, bool kQ4>
void tile_block(const MatrixView& w, const QuantizedActivation* xq, int64_t r, float* y, int64_t ldy) {
  const int G = w.group;
  const int64_t groups = w.groups();
  const int8_t* x[C];
  WREN_UNROLL for (int t = 0; t < C; ++t) x[t] = kQ4 ? xq[t].q_nibble_order.data() : xq[t].q.data();
  const F16* sw[R];
  WREN_UNROLL for (int j = 0; j < R; ++j) sw[j] = w.row_scales(r + j);
  __m256 acc[R][C];
  WREN_UNROLL for (int j = 0; j < R; ++j) WREN_UNROLL for (int t = 0; t < C; ++t) acc[j][t] = _mm256_setzero_ps();
  for (int64_t g8 = 0; g8 < groups; g8 += 8) {
    const int64_t n = std::min<int64_t>(8, groups - g8);
    float d[R][C][8];
    WREN_UNROLL for (int j = 0; j < R; ++j) WREN_UNROLL for (int t = 0; t < C; ++t)
      scale_products(sw[j] + g8, xq[t].scales.data() + g8, n, d[j][t]);
    for (int64_t k = 0; k < n; ++k) {
      const int64_t g = g8 + k, c0 = g * G;
      __m256i isum[R][C];
      WREN_UNROLL for (int t = 0; t < C; ++t) {
        const __m256i init = kQ4 ? _mm256_setr_epi32(-8 * xq[t].sums[size_t(g)], 0, 0, 0, 0, 0, 0, 0)
                                 : _mm256_setzero_si256();
        WREN_UNROLL for (int j = 0; j < R; ++j) isum[j][t] = init;
      }
      for (int64_t c = c0; c < c0 + G; c += 32) {
        __m256i xv[C];
        WREN_UNROLL for (int t = 0; t < C; ++t) xv[t] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x[t] + c));
        WREN_UNROLL for (int j = 0; j < R; ++j) {
          if constexpr (kQ4) {
            const __m256i a = unpack_nibbles(w.q4_row(r + j) + c / 2);
            WREN_UNROLL for (int t = 0; t < C; ++t) isum[j][t] = dot_u8s8(isum[j][t], a, xv[t]);
          } else {
            const __m256i q = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w.q8_row(r + j) + c));
            const __m256i a = _mm256_abs_epi8(q);
            WREN_UNROLL for (int t = 0; t < C; ++t) isum[j][t] = dot_u8s8(isum[j][t], a, _mm256_sign_epi8(xv[t], q));
          }
        }
      }
      WREN_UNROLL for (int j = 0; j < R; ++j) WREN_UNROLL for (int t = 0; t < C; ++t)
        acc[j][t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum[j][t]), _mm256_broadcast_ss(&d[j][t][k]), acc[j][t]);
    }
  }
  WREN_UNROLL for (int j = 0; j < R; ++j) WREN_UNROLL for (int t = 0; t < C; ++t) y[t * ldy + j] = hsum(acc[j][t]);
}

// q4 with G = 32 and groups % 8 == 0, the two-groups-per-step loop of q4_pairs_block for R
// rows x C tokens.
template <int R, int C>
void q4_pairs_tile(const MatrixView& w, const QuantizedActivation* xq, int64_t r, float* y, int64_t ldy) {
  const int64_t groups = w.groups();
  const __m256i mask = _mm256_set1_epi8(0x0F);
  const uint8_t* row[R];
  const F16* sw[R];
  WREN_UNROLL for (int j = 0; j < R; ++j) {
    row[j] = w.q4_row(r + j);
    sw[j] = w.row_scales(r + j);
  }
  __m256 acc[R][C];
  WREN_UNROLL for (int j = 0; j < R; ++j) WREN_UNROLL for (int t = 0; t < C; ++t) acc[j][t] = _mm256_setzero_ps();
  for (int64_t g8 = 0; g8 < groups; g8 += 8) {
    __m256 d[R][C];
    WREN_UNROLL for (int j = 0; j < R; ++j) {
      const __m256 wv = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(sw[j] + g8)));
      WREN_UNROLL for (int t = 0; t < C; ++t) d[j][t] = _mm256_mul_ps(wv, _mm256_loadu_ps(xq[t].scales.data() + g8));
    }
    _Pragma("GCC unroll 4") for (int k = 0; k < 8; k += 2) {
      const int64_t g = g8 + k;
      __m256i x_even[C], x_odd[C], offset[C];
      WREN_UNROLL for (int t = 0; t < C; ++t) {
        const int8_t* x = xq[t].q_nibble_order.data();
        const __m256i a = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + g * 32));
        const __m256i b = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + g * 32 + 32));
        x_even[t] = _mm256_permute2x128_si256(a, b, 0x20);
        x_odd[t] = _mm256_permute2x128_si256(a, b, 0x31);
        offset[t] = _mm256_set_m128i(_mm_cvtsi32_si128(-8 * xq[t].sums[size_t(g + 1)]),
                                     _mm_cvtsi32_si128(-8 * xq[t].sums[size_t(g)]));
      }
      const __m256i pick = _mm256_setr_epi32(k, k, k, k, k + 1, k + 1, k + 1, k + 1);
      WREN_UNROLL for (int j = 0; j < R; ++j) {
        const __m256i bytes = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(row[j] + g * 16));
        const __m256i lo = _mm256_and_si256(bytes, mask);
        const __m256i hi = _mm256_and_si256(_mm256_srli_epi16(bytes, 4), mask);
        WREN_UNROLL for (int t = 0; t < C; ++t) {
          const __m256i isum = dot2_u8s8(offset[t], lo, x_even[t], hi, x_odd[t]);
          acc[j][t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum), _mm256_permutevar8x32_ps(d[j][t], pick), acc[j][t]);
        }
      }
    }
  }
  WREN_UNROLL for (int j = 0; j < R; ++j) WREN_UNROLL for (int t = 0; t < C; ++t) y[t * ldy + j] = hsum(acc[j][t]);
}

// The blocking: quantized_dot.h gemm_blocks with this path's tiles, over the parts of the
// packed copy (by_layout).
template <bool kQ4>
void packed_gemm_blocks(const MatrixView& w, const QuantizedActivation* xq, int64_t n_tokens, int64_t r0, int64_t r1,
                        float* y, int64_t ldy) {
  by_layout<kQ4>(w, r0, r1, [&]<int kTile>(int64_t a, int64_t b) {
    gemm_blocks<kGemmRows, kGemmTokens>(n_tokens, a, b, y + (a - r0), ldy, [&]<int R, int C>(int64_t r, int64_t t, float* out) {
      packed_tile<R, C, kQ4, kTile>(w, xq + t, r, out, ldy);
    });
  });
}
void q8_gemm(const MatrixView& w, const QuantizedActivation* xq, int64_t n_tokens, int64_t r0, int64_t r1,
             float* y, int64_t ldy) {
  if (w.group % 32 != 0) return q8_gemm_scalar(w, xq, n_tokens, r0, r1, y, ldy);
  if (n_tokens > 0 && use_packed(w))  // every xq[t] passed the check, so lanes too
    return packed_gemm_blocks<false>(w, xq, n_tokens, r0, r1, y, ldy);
  gemm_blocks<kGemmRows, kGemmTokens>(n_tokens, r0, r1, y, ldy, [&]<int R, int C>(int64_t r, int64_t t, float* out) {
    tile_block<R, C, false>(w, xq + t, r, out, ldy);
  });
}

void q4_gemm(const MatrixView& w, const QuantizedActivation* xq, int64_t n_tokens, int64_t r0, int64_t r1,
             float* y, int64_t ldy) {
  if (w.group % 32 != 0) return q4_gemm_scalar(w, xq, n_tokens, r0, r1, y, ldy);
  if (n_tokens > 0 && use_packed(w))
    return packed_gemm_blocks<true>(w, xq, n_tokens, r0, r1, y, ldy);
  if (w.group == 32 && w.groups() % 8 == 0)
    return gemm_blocks<kGemmRows, kGemmTokens>(n_tokens, r0, r1, y, ldy, [&]<int R, int C>(int64_t r, int64_t t, float* out) {
      q4_pairs_tile<R, C>(w, xq + t, r, out, ldy);
    });
  gemm_blocks<kGemmRows, kGemmTokens>(n_tokens, r0, r1, y, ldy, [&]<int R, int C>(int64_t r, int64_t t, float* out) {
    tile_block<R, C, true>(w, xq + t, r, out, ldy);
  });
}

// ---- Attention scores (ScoresFn): int8 query heads x int8 cache rows --------------------
//
// A block of H heads x R rows keeps its H R int32 sums in registers; each 32-column step
// loads the R rows once for the H heads (dot_s8s8: VNNI takes a row as k + 128 = k xor
// 0x80 against the signed head, so a sum gains 128 sum q, removed after; AVX2 takes |k|
// against sign(k) q). kGemmRows rows per block: 4 with 32 registers, 2 with 16.

// The lane sums of a, b, c, d as one vector's four lanes.
inline __m128i hsum4_epi32(__m256i a, __m256i b, __m256i c, __m256i d) {
  const __m256i abcd = _mm256_hadd_epi32(_mm256_hadd_epi32(a, b), _mm256_hadd_epi32(c, d));
  return _mm_add_epi32(_mm256_castsi256_si128(abcd), _mm256_extracti128_si256(abcd, 1));
}

// Heads v .. v+H-1 x rows j .. j+R-1 (R <= 4) into a.s: per head the R int32 sums in one
// vector's lanes, VNNI's offset and the columns past the 32-byte steps added there, then
// s = (scale s_v) s_j isum in f32 lanes.
template <int H, int R>
void scores_block(const ScoresArgs& a, int64_t cols, int64_t v, int64_t j) {
  static_assert(R <= 4);
  const int8_t* q[H];
  const int8_t* k[R];
  WREN_UNROLL for (int h = 0; h < H; ++h) q[h] = a.q.q + (v + h) * a.q.ldq;
  WREN_UNROLL for (int r = 0; r < R; ++r) k[r] = a.k[j + r];
  __m256i acc[H * R];
  _Pragma("GCC unroll 16") for (int u = 0; u < H * R; ++u) acc[u] = _mm256_setzero_si256();
  for (int64_t i = 0; i < cols; i += 32) {
    __m256i kv[R];
    WREN_UNROLL for (int r = 0; r < R; ++r) kv[r] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(k[r] + i));
    WREN_UNROLL for (int h = 0; h < H; ++h) {
      const __m256i qv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q[h] + i));
      WREN_UNROLL for (int r = 0; r < R; ++r) acc[h * R + r] = dot_s8s8(acc[h * R + r], kv[r], qv);
    }
  }
  float k_scale[4] = {};
  WREN_UNROLL for (int r = 0; r < R; ++r) k_scale[r] = a.k_scale[j + r];
  const __m128 row_scales = _mm_loadu_ps(k_scale);
  const __m256i zero = _mm256_setzero_si256();
  WREN_UNROLL for (int h = 0; h < H; ++h) {
    const __m256i* x = acc + h * R;
    __m128i sums = hsum4_epi32(x[0], R > 1 ? x[R > 1 ? 1 : 0] : zero, R > 2 ? x[R > 2 ? 2 : 0] : zero,
                               R > 3 ? x[R > 3 ? 3 : 0] : zero);
    if (cols < a.dh) {  // head sizes that are not a multiple of 32: the last columns one by one
      int32_t tail[4] = {};
      for (int r = 0; r < R; ++r)
        for (int64_t i = cols; i < a.dh; ++i) tail[r] += int32_t(q[h][i]) * k[r][i];
      sums = _mm_add_epi32(sums, _mm_loadu_si128(reinterpret_cast<const __m128i*>(tail)));
    }
    if constexpr (kVnni) {  // the rows were taken as k + 128 over the first `cols` columns
      int32_t q_sum = a.q.sum[v + h];
      for (int64_t i = cols; i < a.dh; ++i) q_sum -= q[h][i];
      sums = _mm_sub_epi32(sums, _mm_set1_epi32(128 * q_sum));
    }
    const __m128 factor = _mm_mul_ps(_mm_set1_ps(a.scale * a.q.scale[v + h]), row_scales);
    const __m128 scores = _mm_mul_ps(factor, _mm_cvtepi32_ps(sums));
    float* out = a.s + (v + h) * a.lds + j;
    if constexpr (R == 4) _mm_storeu_ps(out, scores);
    else {
      float lanes[4];
      _mm_storeu_ps(lanes, scores);
      for (int r = 0; r < R; ++r) out[r] = lanes[r];
    }
  }
}

void q8_scores(const ScoresArgs& a) {
  const int64_t cols = a.dh / 32 * 32;
  scores_blocks<kGemmRows>(a, [&]<int H, int R>(int64_t v, int64_t j) { scores_block<H, R>(a, cols, v, j); });
}
