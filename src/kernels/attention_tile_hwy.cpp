// kernels/: attention's two products over a tile of keys for a block of query vectors
// (prefill's chunk, model/attention_block.cpp), through Highway with run-time dispatch:
//   scores_tile:       s[v lds + j] = q_v . k_j, K given transposed (kt[i ldk + j] = k_j[i])
//   weighted_sum_tile: o[v ldo : +n] += sum_j p[v ldp + j] rows[j], a null row skipped
// Both keep four query vectors' accumulators in registers, so each K or V vector loaded
// serves four of them, and no dot ends in a horizontal sum: a decode step's dot_rows cannot
// (one query row), a block can.
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

// Four query vectors' outputs, columns [c, c + 2N) each: o += sum_j p[.][j] rows[j][c ..].
void WeightedSum4x2(const float* p, int64_t ldp, const float* const* rows, int64_t n_rows, int64_t c, float* o,
                    int64_t ldo) {
  const DF d;
  const int64_t N = int64_t(hn::Lanes(d));
  float* o_0 = o + c;
  VF a00 = hn::LoadU(d, o_0), a01 = hn::LoadU(d, o_0 + N);
  VF a10 = hn::LoadU(d, o_0 + ldo), a11 = hn::LoadU(d, o_0 + ldo + N);
  VF a20 = hn::LoadU(d, o_0 + 2 * ldo), a21 = hn::LoadU(d, o_0 + 2 * ldo + N);
  VF a30 = hn::LoadU(d, o_0 + 3 * ldo), a31 = hn::LoadU(d, o_0 + 3 * ldo + N);
  for (int64_t j = 0; j < n_rows; ++j) {
    if (!rows[j]) continue;
    const VF x0 = hn::LoadU(d, rows[j] + c), x1 = hn::LoadU(d, rows[j] + c + N);
    const VF p0 = hn::Set(d, p[j]), p1 = hn::Set(d, p[ldp + j]);
    const VF p2 = hn::Set(d, p[2 * ldp + j]), p3 = hn::Set(d, p[3 * ldp + j]);
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

void WeightedSum1(const float* p, const float* const* rows, int64_t n_rows, int64_t c, float* o) {
  const DF d;
  VF acc = hn::LoadU(d, o + c);
  for (int64_t j = 0; j < n_rows; ++j)
    if (rows[j]) acc = hn::MulAdd(hn::Set(d, p[j]), hn::LoadU(d, rows[j] + c), acc);
  hn::StoreU(acc, d, o + c);
}

void WeightedSumTile(const float* p, int64_t ldp, int64_t n_q, const float* const* rows, int64_t n_rows, int64_t n,
                     float* o, int64_t ldo) {
  const DF d;
  const int64_t N = int64_t(hn::Lanes(d));
  const auto scalar = [&](int64_t v, int64_t c) {
    float a = o[v * ldo + c];
    for (int64_t j = 0; j < n_rows; ++j)
      if (rows[j]) a += p[v * ldp + j] * rows[j][c];
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
    for (; c + N <= n; c += N) WeightedSum1(p + v * ldp, rows, n_rows, c, o + v * ldo);
    for (; c < n; ++c) scalar(v, c);
  }
}

}  // namespace wren::kernels::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace wren::kernels {

HWY_EXPORT(ScoresTile);
HWY_EXPORT(WeightedSumTile);

void scores_tile(const float* q, int64_t ldq, int64_t n_q, const float* kt, int64_t ldk, int64_t n_keys, int64_t dh,
                 float* s, int64_t lds) {
  HWY_DYNAMIC_DISPATCH(ScoresTile)(q, ldq, n_q, kt, ldk, n_keys, dh, s, lds);
}

void weighted_sum_tile(const float* p, int64_t ldp, int64_t n_q, const float* const* rows, int64_t n_rows, int64_t n,
                       float* o, int64_t ldo) {
  HWY_DYNAMIC_DISPATCH(WeightedSumTile)(p, ldp, n_q, rows, n_rows, n, o, ldo);
}

}  // namespace wren::kernels
#endif  // HWY_ONCE
