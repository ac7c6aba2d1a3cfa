// kernels/: attention's two products over a tile of keys, through Highway with run-time
// dispatch (ops.h):
//   scores_tile:       s[v lds + j] = q_v . k_j, K given transposed (kt[i ldk + j] = k_j[i]):
//                      prefill's block of query vectors (model/attention_block.cpp), no dot
//                      ending in a horizontal sum
//   scores_rows:       s[v lds + j] = scale (q_v . k_j), the rows as the cache stores them:
//                      decode's query heads of one KV group (model/attention.cpp), blocks of
//                      4 heads x 4 rows of accumulators, four dots summed across lanes at once
//   weighted_sum_tile: o[v ldo : +n] += sum_j p[v ldp + j] rows[j], a null row skipped
// Rows are f32, bf16, f16 or q8 (widened to f32 as they are loaded, a q8 row's scale folded into the
// weight or the score). Four query vectors' accumulators stay in registers, so each K or V vector
// loaded serves four of them.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/attention_tile_hwy.cpp"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
#include "kernels/f16_hwy-inl.h"

#include <algorithm>

#include "kernels/ops.h"

HWY_BEFORE_NAMESPACE();
namespace wren::kernels::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;
using DF = hn::ScalableTag<float>;
using VF = hn::Vec<DF>;

// Row lists as decode's tiles give them: Load gives N values from column i of row j as f32, At
// one. A row's scale is applied by the caller of the block (folded into the logit scale or the
// value weight), so the blocks' inner loops are loads and multiply-adds only.
struct F32Rows {
  const float* const* r;
  VF Load(int64_t j, int64_t i) const { return hn::LoadU(DF(), r[j] + i); }
  float At(int64_t j, int64_t i) const { return r[j][i]; }
};
struct Q8Rows {
  const int8_t* const* r;
  VF Load(int64_t j, int64_t i) const {
    const hn::Rebind<int8_t, DF> d8;
    return hn::ConvertTo(DF(), hn::PromoteTo(hn::RebindToSigned<DF>(), hn::LoadU(d8, r[j] + i)));
  }
  float At(int64_t j, int64_t i) const { return float(r[j][i]); }
};
struct BF16Rows {  // kernels/f16_hwy-inl.h widens both 16-bit types
  const BF16* const* r;
  VF Load(int64_t j, int64_t i) const { return LoadBF16(DF(), reinterpret_cast<const uint16_t*>(r[j] + i)); }
  float At(int64_t j, int64_t i) const { return bf16_to_f32(r[j][i]); }
};
struct F16Rows {
  const F16* const* r;
  VF Load(int64_t j, int64_t i) const { return LoadF16(DF(), reinterpret_cast<const uint16_t*>(r[j] + i)); }
  float At(int64_t j, int64_t i) const { return f16_to_f32(r[j][i]); }
};
HWY_INLINE float LaneSum(VF v) { return hn::GetLane(hn::SumOfLanes(DF(), v)); }

// Targets with 32 vector registers (AVX-512, NEON, SVE) keep 16 accumulators and the four
// rows they meet in registers: blocks of 4 heads x 4 rows or columns. AVX2 and SSE have 16
// registers and use 4 x 2.
#if HWY_TARGET == HWY_SCALAR || HWY_TARGET == HWY_EMU128 || (HWY_ARCH_X86 && HWY_TARGET > HWY_AVX3)
constexpr bool kWideBlocks = false;
#else
constexpr bool kWideBlocks = true;
#endif

// out[0..3] = the lane sums of a, b, c, d. Two rounds of interleaving adds (32-bit, then
// 64-bit lanes) leave each lane l holding a partial sum of vector l mod 4 (interleaving per
// 128-bit block on x86 and NEON, over the whole vector on SVE: both keep that pattern); the
// 4-lane chunks are then added. Cheaper than four separate lane sums.
HWY_INLINE void Sum4(VF a, VF b, VF c, VF d, float* out) {
#if HWY_TARGET == HWY_SCALAR
  out[0] = LaneSum(a), out[1] = LaneSum(b), out[2] = LaneSum(c), out[3] = LaneSum(d);
#else
  const DF df;
  const hn::Repartition<uint64_t, DF> d64;
  const VF ab = hn::Add(hn::InterleaveLower(df, a, b), hn::InterleaveUpper(df, a, b));
  const VF cd = hn::Add(hn::InterleaveLower(df, c, d), hn::InterleaveUpper(df, c, d));
  const auto ab64 = hn::BitCast(d64, ab), cd64 = hn::BitCast(d64, cd);
  const VF abcd = hn::Add(hn::BitCast(df, hn::InterleaveLower(d64, ab64, cd64)),
                          hn::BitCast(df, hn::InterleaveUpper(d64, ab64, cd64)));
  const hn::CappedTag<float, 4> d4;
  HWY_ALIGN float lanes[hn::MaxLanes(df) < 4 ? 4 : hn::MaxLanes(df)];
  hn::Store(abcd, df, lanes);
  auto sum = hn::Load(d4, lanes);
  for (size_t l = 4; l < hn::Lanes(df); l += 4) sum = hn::Add(sum, hn::Load(d4, lanes + l));
  hn::StoreU(sum, d4, out);
#endif
}

// a_r += q k_r for r < 4: one query head's step against four rows.
HWY_INLINE void MulAdd4(VF q, VF k0, VF k1, VF k2, VF k3, VF& a0, VF& a1, VF& a2, VF& a3) {
  a0 = hn::MulAdd(q, k0, a0), a1 = hn::MulAdd(q, k1, a1), a2 = hn::MulAdd(q, k2, a2), a3 = hn::MulAdd(q, k3, a3);
}

// Four query vectors v .. v+3 against keys [j, j + 2N): s = sum_i q[v][i] kt[i][j ..]. (The
// 4 x 2 accumulators are named one by one here and in WeightedSum4x2: SVE's vectors are
// sizeless, so no struct or array may hold them.)
void Scores4x2(const float* q, int64_t ldq, const float* kt, int64_t ldk, int64_t dh, float* s, int64_t lds) {
  const DF d;
  const int64_t N = int64_t(hn::Lanes(d));
  VF a00 = hn::Zero(d), a01 = hn::Zero(d), a10 = hn::Zero(d), a11 = hn::Zero(d);
  VF a20 = hn::Zero(d), a21 = hn::Zero(d), a30 = hn::Zero(d), a31 = hn::Zero(d);
  for (int64_t i = 0; i < dh; ++i) {
    const VF k0 = hn::LoadU(d, kt + i * ldk), k1 = hn::LoadU(d, kt + i * ldk + N);
    const VF q0 = hn::Set(d, q[i]), q1 = hn::Set(d, q[ldq + i]);
    const VF q2 = hn::Set(d, q[2 * ldq + i]), q3 = hn::Set(d, q[3 * ldq + i]);
    a00 = hn::MulAdd(q0, k0, a00), a01 = hn::MulAdd(q0, k1, a01);
    a10 = hn::MulAdd(q1, k0, a10), a11 = hn::MulAdd(q1, k1, a11);
    a20 = hn::MulAdd(q2, k0, a20), a21 = hn::MulAdd(q2, k1, a21);
    a30 = hn::MulAdd(q3, k0, a30), a31 = hn::MulAdd(q3, k1, a31);
  }
  hn::StoreU(a00, d, s), hn::StoreU(a01, d, s + N);
  hn::StoreU(a10, d, s + lds), hn::StoreU(a11, d, s + lds + N);
  hn::StoreU(a20, d, s + 2 * lds), hn::StoreU(a21, d, s + 2 * lds + N);
  hn::StoreU(a30, d, s + 3 * lds), hn::StoreU(a31, d, s + 3 * lds + N);
}

// One query vector against keys [j, j + N).
void Scores1x1(const float* q, const float* kt, int64_t ldk, int64_t dh, float* s) {
  const DF d;
  VF a = hn::Zero(d);
  for (int64_t i = 0; i < dh; ++i) a = hn::MulAdd(hn::Set(d, q[i]), hn::LoadU(d, kt + i * ldk), a);
  hn::StoreU(a, d, s);
}

void ScoresTile(const float* q, int64_t ldq, int64_t n_q, const float* kt, int64_t ldk, int64_t n_keys, int64_t dh,
                float* s, int64_t lds) {
  const DF d;
  const int64_t N = int64_t(hn::Lanes(d));
  const auto scalar = [&](int64_t v, int64_t j) {
    float a = 0;
    for (int64_t i = 0; i < dh; ++i) a += q[v * ldq + i] * kt[i * ldk + j];
    s[v * lds + j] = a;
  };
  int64_t v = 0;
  for (; v + 4 <= n_q; v += 4) {
    int64_t j = 0;
    for (; j + 2 * N <= n_keys; j += 2 * N) Scores4x2(q + v * ldq, ldq, kt + j, ldk, dh, s + v * lds + j, lds);
    for (; j + N <= n_keys; j += N)
      for (int64_t u = v; u < v + 4; ++u) Scores1x1(q + u * ldq, kt + j, ldk, dh, s + u * lds + j);
    for (; j < n_keys; ++j)
      for (int64_t u = v; u < v + 4; ++u) scalar(u, j);
  }
  for (; v < n_q; ++v) {
    int64_t j = 0;
    for (; j + N <= n_keys; j += N) Scores1x1(q + v * ldq, kt + j, ldk, dh, s + v * lds + j);
    for (; j < n_keys; ++j) scalar(v, j);
  }
}

// Four query heads q .. q + 3 ldq against rows j .. j + 3: r[h][c] = q_h . k_{j+c}.
template <class Rows>
void ScoresRows4x4(const float* q, int64_t ldq, const Rows& k, int64_t j, int64_t dh, float r[4][4]) {
  const DF d;
  const int64_t N = int64_t(hn::Lanes(d));
  VF a00 = hn::Zero(d), a01 = hn::Zero(d), a02 = hn::Zero(d), a03 = hn::Zero(d);
  VF a10 = hn::Zero(d), a11 = hn::Zero(d), a12 = hn::Zero(d), a13 = hn::Zero(d);
  VF a20 = hn::Zero(d), a21 = hn::Zero(d), a22 = hn::Zero(d), a23 = hn::Zero(d);
  VF a30 = hn::Zero(d), a31 = hn::Zero(d), a32 = hn::Zero(d), a33 = hn::Zero(d);
  int64_t i = 0;
  for (; i + N <= dh; i += N) {
    const VF k0 = k.Load(j, i), k1 = k.Load(j + 1, i), k2 = k.Load(j + 2, i), k3 = k.Load(j + 3, i);
    MulAdd4(hn::LoadU(d, q + i), k0, k1, k2, k3, a00, a01, a02, a03);
    MulAdd4(hn::LoadU(d, q + ldq + i), k0, k1, k2, k3, a10, a11, a12, a13);
    MulAdd4(hn::LoadU(d, q + 2 * ldq + i), k0, k1, k2, k3, a20, a21, a22, a23);
    MulAdd4(hn::LoadU(d, q + 3 * ldq + i), k0, k1, k2, k3, a30, a31, a32, a33);
  }
  Sum4(a00, a01, a02, a03, r[0]), Sum4(a10, a11, a12, a13, r[1]);
  Sum4(a20, a21, a22, a23, r[2]), Sum4(a30, a31, a32, a33, r[3]);
  for (; i < dh; ++i)
    for (int h = 0; h < 4; ++h)
      for (int c = 0; c < 4; ++c) r[h][c] += q[h * ldq + i] * k.At(j + c, i);
}

// Four query heads against rows j and j + 1: r[h][c] = q_h . k_{j+c} for c < 2.
template <class Rows>
void ScoresRows4x2(const float* q, int64_t ldq, const Rows& k, int64_t j, int64_t dh, float r[4][4]) {
  const DF d;
  const int64_t N = int64_t(hn::Lanes(d));
  VF a00 = hn::Zero(d), a01 = hn::Zero(d), a10 = hn::Zero(d), a11 = hn::Zero(d);
  VF a20 = hn::Zero(d), a21 = hn::Zero(d), a30 = hn::Zero(d), a31 = hn::Zero(d);
  int64_t i = 0;
  for (; i + N <= dh; i += N) {
    const VF k0 = k.Load(j, i), k1 = k.Load(j + 1, i);
    VF qh = hn::LoadU(d, q + i);
    a00 = hn::MulAdd(qh, k0, a00), a01 = hn::MulAdd(qh, k1, a01);
    qh = hn::LoadU(d, q + ldq + i);
    a10 = hn::MulAdd(qh, k0, a10), a11 = hn::MulAdd(qh, k1, a11);
    qh = hn::LoadU(d, q + 2 * ldq + i);
    a20 = hn::MulAdd(qh, k0, a20), a21 = hn::MulAdd(qh, k1, a21);
    qh = hn::LoadU(d, q + 3 * ldq + i);
    a30 = hn::MulAdd(qh, k0, a30), a31 = hn::MulAdd(qh, k1, a31);
  }
  float s01[4], s23[4];
  Sum4(a00, a01, a10, a11, s01), Sum4(a20, a21, a30, a31, s23);
  for (int c = 0; c < 2; ++c)
    r[0][c] = s01[c], r[1][c] = s01[2 + c], r[2][c] = s23[c], r[3][c] = s23[2 + c];
  for (; i < dh; ++i)
    for (int h = 0; h < 4; ++h)
      for (int c = 0; c < 2; ++c) r[h][c] += q[h * ldq + i] * k.At(j + c, i);
}

// One query head against rows j .. j + 3 (the heads past the last four, and groups of one).
template <class Rows>
void ScoresRows1x4(const float* q, const Rows& k, int64_t j, int64_t dh, float r[4]) {
  const DF d;
  const int64_t N = int64_t(hn::Lanes(d));
  VF a0 = hn::Zero(d), a1 = hn::Zero(d), a2 = hn::Zero(d), a3 = hn::Zero(d);
  int64_t i = 0;
  for (; i + N <= dh; i += N)
    MulAdd4(hn::LoadU(d, q + i), k.Load(j, i), k.Load(j + 1, i), k.Load(j + 2, i), k.Load(j + 3, i), a0, a1, a2, a3);
  Sum4(a0, a1, a2, a3, r);
  for (; i < dh; ++i)
    for (int c = 0; c < 4; ++c) r[c] += q[i] * k.At(j + c, i);
}

template <class Rows>
float ScoresRows1x1(const float* q, const Rows& k, int64_t j, int64_t dh) {
  const DF d;
  const int64_t N = int64_t(hn::Lanes(d));
  VF a = hn::Zero(d);
  int64_t i = 0;
  for (; i + N <= dh; i += N) a = hn::MulAdd(hn::LoadU(d, q + i), k.Load(j, i), a);
  float r = LaneSum(a);
  for (; i < dh; ++i) r += q[i] * k.At(j, i);
  return r;
}

// s[v lds + j] = scale row_scale[j] (q_v . k_j): blocks of 4 heads x 4 rows (wide targets) or
// 4 x 2, then one head x 4 rows, then one by one.
template <class Rows>
void ScoresRowsOf(const float* q, int64_t ldq, int64_t n_q, const Rows& k, const float* row_scale, int64_t n_rows,
                  int64_t dh, float scale, float* s, int64_t lds) {
  const auto factor = [&](int64_t j) { return row_scale ? scale * row_scale[j] : scale; };
  int64_t v = 0;
  for (; v + 4 <= n_q; v += 4) {
    const float* qv = q + v * ldq;
    float* sv = s + v * lds;
    float r[4][4];
    const auto put = [&](int64_t j, int cols) {
      for (int c = 0; c < cols; ++c)
        for (int h = 0; h < 4; ++h) sv[h * lds + j + c] = r[h][c] * factor(j + c);
    };
    int64_t j = 0;
    if constexpr (kWideBlocks)
      for (; j + 4 <= n_rows; j += 4) ScoresRows4x4(qv, ldq, k, j, dh, r), put(j, 4);
    for (; j + 2 <= n_rows; j += 2) ScoresRows4x2(qv, ldq, k, j, dh, r), put(j, 2);
    for (; j < n_rows; ++j)
      for (int h = 0; h < 4; ++h) sv[h * lds + j] = ScoresRows1x1(qv + h * ldq, k, j, dh) * factor(j);
  }
  for (; v < n_q; ++v) {
    int64_t j = 0;
    for (; j + 4 <= n_rows; j += 4) {
      float r[4];
      ScoresRows1x4(q + v * ldq, k, j, dh, r);
      for (int c = 0; c < 4; ++c) s[v * lds + j + c] = r[c] * factor(j + c);
    }
    for (; j < n_rows; ++j) s[v * lds + j] = ScoresRows1x1(q + v * ldq, k, j, dh) * factor(j);
  }
}

void ScoresRows(const float* q, int64_t ldq, int64_t n_q, const CacheRows& k, int64_t n_rows, int64_t dh, float scale,
                float* s, int64_t lds) {
  if (k.q8) return ScoresRowsOf(q, ldq, n_q, Q8Rows{k.q8}, k.scale, n_rows, dh, scale, s, lds);
  if (k.bf16) return ScoresRowsOf(q, ldq, n_q, BF16Rows{k.bf16}, nullptr, n_rows, dh, scale, s, lds);
  if (k.f16) return ScoresRowsOf(q, ldq, n_q, F16Rows{k.f16}, nullptr, n_rows, dh, scale, s, lds);
  ScoresRowsOf(q, ldq, n_q, F32Rows{k.f32}, nullptr, n_rows, dh, scale, s, lds);
}

// Four query vectors' outputs, columns [c, c + 4N) each: o_h += sum_k w[h ldw + k] rows[k][c ..]
// over the n rows listed (their scales already in w).
template <class Rows>
void WeightedSum4x4(const float* w, int64_t ldw, const Rows& rows, int64_t n, int64_t c, float* o, int64_t ldo) {
  const DF d;
  const int64_t N = int64_t(hn::Lanes(d));
  float *o0 = o + c, *o1 = o0 + ldo, *o2 = o1 + ldo, *o3 = o2 + ldo;
  VF a00 = hn::LoadU(d, o0), a01 = hn::LoadU(d, o0 + N), a02 = hn::LoadU(d, o0 + 2 * N), a03 = hn::LoadU(d, o0 + 3 * N);
  VF a10 = hn::LoadU(d, o1), a11 = hn::LoadU(d, o1 + N), a12 = hn::LoadU(d, o1 + 2 * N), a13 = hn::LoadU(d, o1 + 3 * N);
  VF a20 = hn::LoadU(d, o2), a21 = hn::LoadU(d, o2 + N), a22 = hn::LoadU(d, o2 + 2 * N), a23 = hn::LoadU(d, o2 + 3 * N);
  VF a30 = hn::LoadU(d, o3), a31 = hn::LoadU(d, o3 + N), a32 = hn::LoadU(d, o3 + 2 * N), a33 = hn::LoadU(d, o3 + 3 * N);
  for (int64_t k = 0; k < n; ++k) {
    const VF x0 = rows.Load(k, c), x1 = rows.Load(k, c + N), x2 = rows.Load(k, c + 2 * N), x3 = rows.Load(k, c + 3 * N);
    MulAdd4(hn::Set(d, w[k]), x0, x1, x2, x3, a00, a01, a02, a03);
    MulAdd4(hn::Set(d, w[ldw + k]), x0, x1, x2, x3, a10, a11, a12, a13);
    MulAdd4(hn::Set(d, w[2 * ldw + k]), x0, x1, x2, x3, a20, a21, a22, a23);
    MulAdd4(hn::Set(d, w[3 * ldw + k]), x0, x1, x2, x3, a30, a31, a32, a33);
  }
  hn::StoreU(a00, d, o0), hn::StoreU(a01, d, o0 + N), hn::StoreU(a02, d, o0 + 2 * N), hn::StoreU(a03, d, o0 + 3 * N);
  hn::StoreU(a10, d, o1), hn::StoreU(a11, d, o1 + N), hn::StoreU(a12, d, o1 + 2 * N), hn::StoreU(a13, d, o1 + 3 * N);
  hn::StoreU(a20, d, o2), hn::StoreU(a21, d, o2 + N), hn::StoreU(a22, d, o2 + 2 * N), hn::StoreU(a23, d, o2 + 3 * N);
  hn::StoreU(a30, d, o3), hn::StoreU(a31, d, o3 + N), hn::StoreU(a32, d, o3 + 2 * N), hn::StoreU(a33, d, o3 + 3 * N);
}

// The same over columns [c, c + 2N).
template <class Rows>
void WeightedSum4x2(const float* w, int64_t ldw, const Rows& rows, int64_t n, int64_t c, float* o, int64_t ldo) {
  const DF d;
  const int64_t N = int64_t(hn::Lanes(d));
  float *o0 = o + c, *o1 = o0 + ldo, *o2 = o1 + ldo, *o3 = o2 + ldo;
  VF a00 = hn::LoadU(d, o0), a01 = hn::LoadU(d, o0 + N), a10 = hn::LoadU(d, o1), a11 = hn::LoadU(d, o1 + N);
  VF a20 = hn::LoadU(d, o2), a21 = hn::LoadU(d, o2 + N), a30 = hn::LoadU(d, o3), a31 = hn::LoadU(d, o3 + N);
  for (int64_t k = 0; k < n; ++k) {
    const VF x0 = rows.Load(k, c), x1 = rows.Load(k, c + N);
    VF wh = hn::Set(d, w[k]);
    a00 = hn::MulAdd(wh, x0, a00), a01 = hn::MulAdd(wh, x1, a01);
    wh = hn::Set(d, w[ldw + k]);
    a10 = hn::MulAdd(wh, x0, a10), a11 = hn::MulAdd(wh, x1, a11);
    wh = hn::Set(d, w[2 * ldw + k]);
    a20 = hn::MulAdd(wh, x0, a20), a21 = hn::MulAdd(wh, x1, a21);
    wh = hn::Set(d, w[3 * ldw + k]);
    a30 = hn::MulAdd(wh, x0, a30), a31 = hn::MulAdd(wh, x1, a31);
  }
  hn::StoreU(a00, d, o0), hn::StoreU(a01, d, o0 + N), hn::StoreU(a10, d, o1), hn::StoreU(a11, d, o1 + N);
  hn::StoreU(a20, d, o2), hn::StoreU(a21, d, o2 + N), hn::StoreU(a30, d, o3), hn::StoreU(a31, d, o3 + N);
}

// One query vector's output, columns [c, c + 4N): four independent sums, so the adds of
// consecutive rows do not wait on each other.
template <class Rows>
void WeightedSum1x4(const float* w, const Rows& rows, int64_t n, int64_t c, float* o) {
  const DF d;
  const int64_t N = int64_t(hn::Lanes(d));
  VF a0 = hn::LoadU(d, o + c), a1 = hn::LoadU(d, o + c + N), a2 = hn::LoadU(d, o + c + 2 * N), a3 = hn::LoadU(d, o + c + 3 * N);
  for (int64_t k = 0; k < n; ++k)
    MulAdd4(hn::Set(d, w[k]), rows.Load(k, c), rows.Load(k, c + N), rows.Load(k, c + 2 * N), rows.Load(k, c + 3 * N),
            a0, a1, a2, a3);
  hn::StoreU(a0, d, o + c), hn::StoreU(a1, d, o + c + N), hn::StoreU(a2, d, o + c + 2 * N), hn::StoreU(a3, d, o + c + 3 * N);
}

template <class Rows>
void WeightedSum1(const float* w, const Rows& rows, int64_t n, int64_t c, float* o) {
  const DF d;
  VF acc = hn::LoadU(d, o + c);
  for (int64_t k = 0; k < n; ++k) acc = hn::MulAdd(hn::Set(d, w[k]), rows.Load(k, c), acc);
  hn::StoreU(acc, d, o + c);
}

// o[v ldo : +n_cols] += sum_j p[v ldp + j] row_scale[j] rows[j], in row order, a null row never
// read. The rows go in lists of up to kList: each list names the rows read, once, and each
// block of four query vectors takes its weights for them, the row's scale folded in, so the
// blocks' loops hold no test and no scale.
template <class Rows, class T>
void WeightedSumOf(const float* p, int64_t ldp, int64_t n_q, const T* const* rows, const float* row_scale,
                   int64_t n_rows, int64_t n_cols, float* o, int64_t ldo) {
  constexpr int64_t kList = 64;
  const int64_t N = int64_t(hn::Lanes(DF()));
  const DF d;
  const hn::RebindToSigned<DF> di;
  const T* kept[kList];
  int32_t at[kList];
  float f[kList], w[4 * kList];
  for (int64_t j0 = 0; j0 < n_rows; j0 += kList) {
    int64_t m = 0;
    for (int64_t j = j0; j < std::min(n_rows, j0 + kList); ++j)
      if (rows[j]) kept[m] = rows[j], at[m] = int32_t(j), f[m] = row_scale ? row_scale[j] : 1.0f, ++m;
    if (m == 0) continue;
    const Rows list{kept};
    const auto weights = [&](int64_t v, int heads) {  // the listed rows' weights, gathered
      for (int h = 0; h < heads; ++h) {
        const float* ph = p + (v + h) * ldp;
        float* wh = w + h * kList;
        int64_t k = 0;
        for (; k + N <= m; k += N)
          hn::StoreU(hn::Mul(hn::GatherIndex(d, ph, hn::LoadU(di, at + k)), hn::LoadU(d, f + k)), d, wh + k);
        for (; k < m; ++k) wh[k] = ph[at[k]] * f[k];
      }
    };
    const auto scalar = [&](const float* wv, float* ov, int64_t c) {
      float a = ov[c];
      for (int64_t k = 0; k < m; ++k) a += wv[k] * list.At(k, c);
      ov[c] = a;
    };
    int64_t v = 0;
    for (; v + 4 <= n_q; v += 4) {
      weights(v, 4);
      float* ov = o + v * ldo;
      int64_t c = 0;
      if constexpr (kWideBlocks)
        for (; c + 4 * N <= n_cols; c += 4 * N) WeightedSum4x4(w, kList, list, m, c, ov, ldo);
      for (; c + 2 * N <= n_cols; c += 2 * N) WeightedSum4x2(w, kList, list, m, c, ov, ldo);
      for (; c + N <= n_cols; c += N)
        for (int h = 0; h < 4; ++h) WeightedSum1(w + h * kList, list, m, c, ov + h * ldo);
      for (; c < n_cols; ++c)
        for (int h = 0; h < 4; ++h) scalar(w + h * kList, ov + h * ldo, c);
    }
    for (; v < n_q; ++v) {
      weights(v, 1);
      float* ov = o + v * ldo;
      int64_t c = 0;
      for (; c + 4 * N <= n_cols; c += 4 * N) WeightedSum1x4(w, list, m, c, ov);
      for (; c + N <= n_cols; c += N) WeightedSum1(w, list, m, c, ov);
      for (; c < n_cols; ++c) scalar(w, ov, c);
    }
  }
}

void WeightedSumTile(const float* p, int64_t ldp, int64_t n_q, const CacheRows& rows, int64_t n_rows, int64_t n,
                     float* o, int64_t ldo) {
  if (rows.q8) return WeightedSumOf<Q8Rows>(p, ldp, n_q, rows.q8, rows.scale, n_rows, n, o, ldo);
  if (rows.bf16) return WeightedSumOf<BF16Rows>(p, ldp, n_q, rows.bf16, nullptr, n_rows, n, o, ldo);
  if (rows.f16) return WeightedSumOf<F16Rows>(p, ldp, n_q, rows.f16, nullptr, n_rows, n, o, ldo);
  WeightedSumOf<F32Rows>(p, ldp, n_q, rows.f32, nullptr, n_rows, n, o, ldo);
}

}  // namespace wren::kernels::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace wren::kernels {

HWY_EXPORT(ScoresTile);
HWY_EXPORT(ScoresRows);
HWY_EXPORT(WeightedSumTile);

void scores_tile(const float* q, int64_t ldq, int64_t n_q, const float* kt, int64_t ldk, int64_t n_keys, int64_t dh,
                 float* s, int64_t lds) {
  HWY_DYNAMIC_DISPATCH(ScoresTile)(q, ldq, n_q, kt, ldk, n_keys, dh, s, lds);
}

void scores_rows(const float* q, int64_t ldq, int64_t n_q, const CacheRows& k, int64_t n_rows, int64_t dh, float scale,
                 float* s, int64_t lds) {
  HWY_DYNAMIC_DISPATCH(ScoresRows)(q, ldq, n_q, k, n_rows, dh, scale, s, lds);
}

void weighted_sum_tile(const float* p, int64_t ldp, int64_t n_q, const CacheRows& rows, int64_t n_rows, int64_t n,
                       float* o, int64_t ldo) {
  HWY_DYNAMIC_DISPATCH(WeightedSumTile)(p, ldp, n_q, rows, n_rows, n, o, ldo);
}

}  // namespace wren::kernels
#endif  // HWY_ONCE
