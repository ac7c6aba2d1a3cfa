// kernels/: attention's two products over a tile of keys, through Highway with run-time
// dispatch (ops.h):
//   scores_tile:       s[v lds + j] = q_v . k_j, K given transposed (kt[i ldk + j] = k_j[i]):
//                      prefill's block of query vectors (model/attention_block.cpp), no dot
//                      ending in a horizontal sum
//   scores_rows:       s[v lds + j] = scale (q_v . k_j), the rows as the cache stores them:
//                      decode's query heads of one KV group (model/attention.cpp), 4 heads x
//                      2 rows of accumulators, one horizontal sum per dot
//   weighted_sum_tile: o[v ldo : +n] += sum_j p[v ldp + j] rows[j], a null row skipped
// Rows are f32 or q8 (widened to f32 as they are loaded, their scale folded into the weight or
// the score). Four query vectors' accumulators stay in registers, so each K or V vector
// loaded serves four of them.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/attention_tile_hwy.cpp"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"

#include "kernels/ops.h"

HWY_BEFORE_NAMESPACE();
namespace wren::kernels::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;
using DF = hn::ScalableTag<float>;
using VF = hn::Vec<DF>;

// The two row stores of CacheRows: Load gives N values from column i of row j as f32, At one,
// Scale the row's factor.
struct F32Rows {
  const float* const* r;
  bool Null(int64_t j) const { return !r[j]; }
  VF Load(int64_t j, int64_t i) const { return hn::LoadU(DF(), r[j] + i); }
  float At(int64_t j, int64_t i) const { return r[j][i]; }
  float Scale(int64_t) const { return 1.0f; }
};
struct Q8Rows {
  const int8_t* const* r;
  const float* scale;
  bool Null(int64_t j) const { return !r[j]; }
  VF Load(int64_t j, int64_t i) const {
    const hn::Rebind<int8_t, DF> d8;
    return hn::ConvertTo(DF(), hn::PromoteTo(hn::RebindToSigned<DF>(), hn::LoadU(d8, r[j] + i)));
  }
  float At(int64_t j, int64_t i) const { return float(r[j][i]); }
  float Scale(int64_t j) const { return scale[j]; }
};
HWY_INLINE float LaneSum(VF v) { return hn::GetLane(hn::SumOfLanes(DF(), v)); }

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

// Four query heads q .. q + 3 ldq against rows j and j + 1: s[h lds + r] = scale (q_h . k_r).
template <class Rows>
void ScoresRows4x2(const float* q, int64_t ldq, const Rows& k, int64_t j, int64_t dh, float scale, float* s,
                   int64_t lds) {
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
  float r[4][2] = {{LaneSum(a00), LaneSum(a01)}, {LaneSum(a10), LaneSum(a11)}, {LaneSum(a20), LaneSum(a21)}, {LaneSum(a30), LaneSum(a31)}};
  for (; i < dh; ++i)
    for (int h = 0; h < 4; ++h)
      for (int c = 0; c < 2; ++c) r[h][c] += q[h * ldq + i] * k.At(j + c, i);
  for (int c = 0; c < 2; ++c) {
    const float f = scale * k.Scale(j + c);
    for (int h = 0; h < 4; ++h) s[h * lds + c] = r[h][c] * f;
  }
}

// One query head against rows j .. j + 3 (the heads past the last four, and groups of one).
template <class Rows>
void ScoresRows1x4(const float* q, const Rows& k, int64_t j, int64_t dh, float scale, float* s) {
  const DF d;
  const int64_t N = int64_t(hn::Lanes(d));
  VF a0 = hn::Zero(d), a1 = hn::Zero(d), a2 = hn::Zero(d), a3 = hn::Zero(d);
  int64_t i = 0;
  for (; i + N <= dh; i += N) {
    const VF qh = hn::LoadU(d, q + i);
    a0 = hn::MulAdd(qh, k.Load(j, i), a0), a1 = hn::MulAdd(qh, k.Load(j + 1, i), a1);
    a2 = hn::MulAdd(qh, k.Load(j + 2, i), a2), a3 = hn::MulAdd(qh, k.Load(j + 3, i), a3);
  }
  float r[4] = {LaneSum(a0), LaneSum(a1), LaneSum(a2), LaneSum(a3)};
  for (; i < dh; ++i)
    for (int c = 0; c < 4; ++c) r[c] += q[i] * k.At(j + c, i);
  for (int c = 0; c < 4; ++c) s[c] = r[c] * (scale * k.Scale(j + c));
}

template <class Rows>
void ScoresRows1x1(const float* q, const Rows& k, int64_t j, int64_t dh, float scale, float* s) {
  const DF d;
  const int64_t N = int64_t(hn::Lanes(d));
  VF a = hn::Zero(d);
  int64_t i = 0;
  for (; i + N <= dh; i += N) a = hn::MulAdd(hn::LoadU(d, q + i), k.Load(j, i), a);
  float r = LaneSum(a);
  for (; i < dh; ++i) r += q[i] * k.At(j, i);
  *s = r * (scale * k.Scale(j));
}

template <class Rows>
void ScoresRowsOf(const float* q, int64_t ldq, int64_t n_q, const Rows& k, int64_t n_rows, int64_t dh, float scale,
                  float* s, int64_t lds) {
  int64_t v = 0;
  for (; v + 4 <= n_q; v += 4) {
    int64_t j = 0;
    for (; j + 2 <= n_rows; j += 2) ScoresRows4x2(q + v * ldq, ldq, k, j, dh, scale, s + v * lds + j, lds);
    for (; j < n_rows; ++j)
      for (int64_t u = v; u < v + 4; ++u) ScoresRows1x1(q + u * ldq, k, j, dh, scale, s + u * lds + j);
  }
  for (; v < n_q; ++v) {
    int64_t j = 0;
    for (; j + 4 <= n_rows; j += 4) ScoresRows1x4(q + v * ldq, k, j, dh, scale, s + v * lds + j);
    for (; j < n_rows; ++j) ScoresRows1x1(q + v * ldq, k, j, dh, scale, s + v * lds + j);
  }
}

void ScoresRows(const float* q, int64_t ldq, int64_t n_q, const CacheRows& k, int64_t n_rows, int64_t dh, float scale,
                float* s, int64_t lds) {
  if (k.q8) return ScoresRowsOf(q, ldq, n_q, Q8Rows{k.q8, k.scale}, n_rows, dh, scale, s, lds);
  ScoresRowsOf(q, ldq, n_q, F32Rows{k.f32}, n_rows, dh, scale, s, lds);
}

// Four query vectors' outputs, columns [c, c + 2N) each: o += sum_j p[.][j] rows[j][c ..].
template <class Rows>
void WeightedSum4x2(const float* p, int64_t ldp, const Rows& rows, int64_t n_rows, int64_t c, float* o, int64_t ldo) {
  const DF d;
  const int64_t N = int64_t(hn::Lanes(d));
  float* o_0 = o + c;
  VF a00 = hn::LoadU(d, o_0), a01 = hn::LoadU(d, o_0 + N);
  VF a10 = hn::LoadU(d, o_0 + ldo), a11 = hn::LoadU(d, o_0 + ldo + N);
  VF a20 = hn::LoadU(d, o_0 + 2 * ldo), a21 = hn::LoadU(d, o_0 + 2 * ldo + N);
  VF a30 = hn::LoadU(d, o_0 + 3 * ldo), a31 = hn::LoadU(d, o_0 + 3 * ldo + N);
  for (int64_t j = 0; j < n_rows; ++j) {
    if (rows.Null(j)) continue;
    const VF x0 = rows.Load(j, c), x1 = rows.Load(j, c + N);
    const float f = rows.Scale(j);
    const VF p0 = hn::Set(d, p[j] * f), p1 = hn::Set(d, p[ldp + j] * f);
    const VF p2 = hn::Set(d, p[2 * ldp + j] * f), p3 = hn::Set(d, p[3 * ldp + j] * f);
    a00 = hn::MulAdd(p0, x0, a00), a01 = hn::MulAdd(p0, x1, a01);
    a10 = hn::MulAdd(p1, x0, a10), a11 = hn::MulAdd(p1, x1, a11);
    a20 = hn::MulAdd(p2, x0, a20), a21 = hn::MulAdd(p2, x1, a21);
    a30 = hn::MulAdd(p3, x0, a30), a31 = hn::MulAdd(p3, x1, a31);
  }
  hn::StoreU(a00, d, o_0), hn::StoreU(a01, d, o_0 + N);
  hn::StoreU(a10, d, o_0 + ldo), hn::StoreU(a11, d, o_0 + ldo + N);
  hn::StoreU(a20, d, o_0 + 2 * ldo), hn::StoreU(a21, d, o_0 + 2 * ldo + N);
  hn::StoreU(a30, d, o_0 + 3 * ldo), hn::StoreU(a31, d, o_0 + 3 * ldo + N);
}

// One query vector's output, columns [c, c + 4N): four independent sums, so the adds of
// consecutive rows do not wait on each other.
template <class Rows>
void WeightedSum1x4(const float* p, const Rows& rows, int64_t n_rows, int64_t c, float* o) {
  const DF d;
  const int64_t N = int64_t(hn::Lanes(d));
  VF a0 = hn::LoadU(d, o + c), a1 = hn::LoadU(d, o + c + N);
  VF a2 = hn::LoadU(d, o + c + 2 * N), a3 = hn::LoadU(d, o + c + 3 * N);
  for (int64_t j = 0; j < n_rows; ++j) {
    if (rows.Null(j)) continue;
    const VF w = hn::Set(d, p[j] * rows.Scale(j));
    a0 = hn::MulAdd(w, rows.Load(j, c), a0), a1 = hn::MulAdd(w, rows.Load(j, c + N), a1);
    a2 = hn::MulAdd(w, rows.Load(j, c + 2 * N), a2), a3 = hn::MulAdd(w, rows.Load(j, c + 3 * N), a3);
  }
  hn::StoreU(a0, d, o + c), hn::StoreU(a1, d, o + c + N);
  hn::StoreU(a2, d, o + c + 2 * N), hn::StoreU(a3, d, o + c + 3 * N);
}

template <class Rows>
void WeightedSum1(const float* p, const Rows& rows, int64_t n_rows, int64_t c, float* o) {
  const DF d;
  VF acc = hn::LoadU(d, o + c);
  for (int64_t j = 0; j < n_rows; ++j)
    if (!rows.Null(j)) acc = hn::MulAdd(hn::Set(d, p[j] * rows.Scale(j)), rows.Load(j, c), acc);
  hn::StoreU(acc, d, o + c);
}

template <class Rows>
void WeightedSumOf(const float* p, int64_t ldp, int64_t n_q, const Rows& rows, int64_t n_rows, int64_t n, float* o,
                   int64_t ldo) {
  const DF d;
  const int64_t N = int64_t(hn::Lanes(d));
  const auto scalar = [&](int64_t v, int64_t c) {
    float a = o[v * ldo + c];
    for (int64_t j = 0; j < n_rows; ++j)
      if (!rows.Null(j)) a += p[v * ldp + j] * rows.Scale(j) * rows.At(j, c);
    o[v * ldo + c] = a;
  };
  int64_t v = 0;
  for (; v + 4 <= n_q; v += 4) {
    int64_t c = 0;
    for (; c + 2 * N <= n; c += 2 * N) WeightedSum4x2(p + v * ldp, ldp, rows, n_rows, c, o + v * ldo, ldo);
    for (; c + N <= n; c += N)
      for (int64_t u = v; u < v + 4; ++u) WeightedSum1(p + u * ldp, rows, n_rows, c, o + u * ldo);
    for (; c < n; ++c)
      for (int64_t u = v; u < v + 4; ++u) scalar(u, c);
  }
  for (; v < n_q; ++v) {
    int64_t c = 0;
    for (; c + 4 * N <= n; c += 4 * N) WeightedSum1x4(p + v * ldp, rows, n_rows, c, o + v * ldo);
    for (; c + N <= n; c += N) WeightedSum1(p + v * ldp, rows, n_rows, c, o + v * ldo);
    for (; c < n; ++c) scalar(v, c);
  }
}

void WeightedSumTile(const float* p, int64_t ldp, int64_t n_q, const CacheRows& rows, int64_t n_rows, int64_t n,
                     float* o, int64_t ldo) {
  if (rows.q8) return WeightedSumOf(p, ldp, n_q, Q8Rows{rows.q8, rows.scale}, n_rows, n, o, ldo);
  WeightedSumOf(p, ldp, n_q, F32Rows{rows.f32}, n_rows, n, o, ldo);
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
