// kernels/: products with a weight matrix (matvec, add_rows, matmul) and the f32 vector
// primitives dot / axpy, through Highway with run-time dispatch.
//
// A row dot W[r,:] . x keeps vector accumulators in f32 and reduces once at the end. For q8
// and q4 each group's partial sum sum_i q_i x_i is scaled by the group's s once:
//   W[r,:] . x = sum_g s_g sum_{i in g} q_i x_i.
// Threads split rows (matvec, matmul) or group-aligned columns (add_rows); each output
// element is produced by one thread with the same instruction sequence, so results do
// not depend on the thread count.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/matvec_hwy.cpp"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/cache_control.h"
#include "hwy/highway.h"

#include <algorithm>
#include <atomic>
#include <type_traits>
#include <vector>

#include "kernels/ops.h"
#include "kernels/quantized_dot.h"

HWY_BEFORE_NAMESPACE();
namespace wren::kernels::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;
using DF = hn::ScalableTag<float>;
using VF = hn::Vec<DF>;

float Sum(VF v) { return hn::GetLane(hn::SumOfLanes(DF(), v)); }

// The four storage types as f32 vectors of N lanes starting at column i.
VF LoadBF16(const BF16* p) {
  const DF d;
  const hn::Rebind<uint16_t, DF> d16;
  const auto u = hn::PromoteTo(hn::RebindToUnsigned<DF>(), hn::LoadU(d16, reinterpret_cast<const uint16_t*>(p)));
  return hn::BitCast(d, hn::ShiftLeft<16>(u));
}
VF LoadQ8(const int8_t* p) {
  const hn::Rebind<int8_t, DF> d8;
  return hn::ConvertTo(DF(), hn::PromoteTo(hn::RebindToSigned<DF>(), hn::LoadU(d8, p)));
}
// N bytes = 2N columns: even columns (low nibbles) and odd columns (high nibbles), minus 8.
// With 16 lanes a nibble is an index into the 16 values -8..7 (one lane permute, where the
// subtraction and conversion are two operations on the same two ports of a 512-bit core);
// the values are the same.
void LoadQ4(const uint8_t* p, VF& even, VF& odd) {
  const DF d;
  const hn::RebindToSigned<DF> di;
  const hn::Rebind<uint8_t, DF> d8;
  const auto b = hn::BitCast(di, hn::PromoteTo(hn::RebindToUnsigned<DF>(), hn::LoadU(d8, p)));
  if constexpr (hn::MaxLanes(DF()) == 16) {
    const VF values = hn::Iota(d, -8.0f);
    even = hn::TableLookupLanes(values, hn::IndicesFromVec(d, hn::And(b, hn::Set(di, 0xF))));
    odd = hn::TableLookupLanes(values, hn::IndicesFromVec(d, hn::ShiftRight<4>(b)));
    return;
  }
  const auto eight = hn::Set(di, 8);
  even = hn::ConvertTo(d, hn::Sub(hn::And(b, hn::Set(di, 0xF)), eight));
  odd = hn::ConvertTo(d, hn::Sub(hn::ShiftRight<4>(b), eight));
}
int Nibble(const uint8_t* q, int64_t c) { return ((c & 1) ? (q[c / 2] >> 4) : (q[c / 2] & 0xF)) - 8; }

// An f32 or bf16 row as f32 lanes: the one load the row dots below differ by.
template <class T>
VF LoadRow(const T* p) {
  if constexpr (std::is_same_v<T, BF16>) return LoadBF16(p);
  else return hn::LoadU(DF(), p);
}
template <class T>
float ElementOf(const T* p, int64_t i) {
  if constexpr (std::is_same_v<T, BF16>) return bf16_to_f32(p[i]);
  else return p[i];
}

// The last steps of a row dot, shared by the one-row and four-row forms so both give the same
// bits: the two sums added and reduced, then columns [i, n) one at a time.
template <class T>
float FinishDot(VF s0, VF s1, const T* w, const float* x, int64_t i, int64_t n) {
  float s = Sum(hn::Add(s0, s1));
  for (; i < n; ++i) s += ElementOf(w, i) * x[i];
  return s;
}

// w . x with two sums over 2N columns at a time, then N, then the scalar tail.
template <class T>
float DotOf(const T* w, const float* x, int64_t n) {
  const DF d;
  const int64_t N = int64_t(hn::Lanes(d));
  VF s0 = hn::Zero(d), s1 = hn::Zero(d);
  int64_t i = 0;
  for (; i + 2 * N <= n; i += 2 * N) {
    s0 = hn::MulAdd(LoadRow(w + i), hn::LoadU(d, x + i), s0);
    s1 = hn::MulAdd(LoadRow(w + i + N), hn::LoadU(d, x + i + N), s1);
  }
  if (i + N <= n) s0 = hn::MulAdd(LoadRow(w + i), hn::LoadU(d, x + i), s0), i += N;
  return FinishDot(s0, s1, w, x, i, n);
}
float DotF32(const float* a, const float* b, int64_t n) { return DotOf(a, b, n); }
float DotBF16(const BF16* w, const float* x, int64_t n) { return DotOf(w, x, n); }

float DotQ8(const int8_t* q, const F16* scales, const float* x, int64_t n, int group) {
  const DF d;
  const int64_t N = int64_t(hn::Lanes(d));
  VF total = hn::Zero(d);
  float total_tail = 0;
  for (int64_t g0 = 0, g = 0; g0 < n; g0 += group, ++g) {
    const float s = f16_to_f32(scales[g]);
    VF acc = hn::Zero(d);
    int64_t i = g0;
    for (; i + N <= g0 + group; i += N) acc = hn::MulAdd(LoadQ8(q + i), hn::LoadU(d, x + i), acc);
    float tail = 0;
    for (; i < g0 + group; ++i) tail += float(q[i]) * x[i];
    total = hn::MulAdd(acc, hn::Set(d, s), total);
    total_tail += s * tail;
  }
  return Sum(total) + total_tail;
}

float DotQ4(const uint8_t* q, const F16* scales, const float* x, int64_t n, int group) {
  const DF d;
  const int64_t N = int64_t(hn::Lanes(d));
  VF total = hn::Zero(d);
  float total_tail = 0;
  for (int64_t g0 = 0, g = 0; g0 < n; g0 += group, ++g) {
    const float s = f16_to_f32(scales[g]);
    VF acc = hn::Zero(d);
    int64_t i = g0;
    for (; i + 2 * N <= g0 + group; i += 2 * N) {
      VF we, wo, xe, xo;
      LoadQ4(q + i / 2, we, wo);
      hn::LoadInterleaved2(d, x + i, xe, xo);
      acc = hn::MulAdd(wo, xo, hn::MulAdd(we, xe, acc));
    }
    float tail = 0;
    for (; i < g0 + group; ++i) tail += float(Nibble(q, i)) * x[i];
    total = hn::MulAdd(acc, hn::Set(d, s), total);
    total_tail += s * tail;
  }
  return Sum(total) + total_tail;
}

float DotRow(const MatrixView& w, int64_t r, const float* x) {
  switch (w.type) {
    case DType::f32: return DotF32(w.f32_row(r), x, w.cols);
    case DType::bf16: return DotBF16(w.bf16_row(r), x, w.cols);
    case DType::q8: return DotQ8(w.q8_row(r), w.row_scales(r), x, w.cols, w.group);
    case DType::q4: return DotQ4(w.q4_row(r), w.row_scales(r), x, w.cols, w.group);
    case DType::f16: break;
  }
  return 0;
}

// Four rows of an f32 / bf16 W dotted with x at once: each vector of x is loaded once for the
// four, and each row keeps DotOf's own two sums, steps and FinishDot, so its result
// has the same bits as one row at a time (as the batched matmul computes it). nenya's f32
// routers (120 x 960) and bf16 mHC projections (24 x 3840) are such rows, read once a token.
// (Named sums, not arrays: a vector of a scalable target (SVE) cannot be an array element.)
template <class T>
void Dot4Rows(const T* const* row, const float* x, int64_t n, float* out) {
  const DF d;
  const int64_t N = int64_t(hn::Lanes(d));
  const T *w0 = row[0], *w1 = row[1], *w2 = row[2], *w3 = row[3];
  VF a0 = hn::Zero(d), a1 = hn::Zero(d), a2 = hn::Zero(d), a3 = hn::Zero(d);  // s0 of rows 0-3
  VF b0 = hn::Zero(d), b1 = hn::Zero(d), b2 = hn::Zero(d), b3 = hn::Zero(d);  // s1
  int64_t i = 0;
  for (; i + 2 * N <= n; i += 2 * N) {
    const VF x0 = hn::LoadU(d, x + i), x1 = hn::LoadU(d, x + i + N);
    a0 = hn::MulAdd(LoadRow(w0 + i), x0, a0), b0 = hn::MulAdd(LoadRow(w0 + i + N), x1, b0);
    a1 = hn::MulAdd(LoadRow(w1 + i), x0, a1), b1 = hn::MulAdd(LoadRow(w1 + i + N), x1, b1);
    a2 = hn::MulAdd(LoadRow(w2 + i), x0, a2), b2 = hn::MulAdd(LoadRow(w2 + i + N), x1, b2);
    a3 = hn::MulAdd(LoadRow(w3 + i), x0, a3), b3 = hn::MulAdd(LoadRow(w3 + i + N), x1, b3);
  }
  if (i + N <= n) {
    const VF x0 = hn::LoadU(d, x + i);
    a0 = hn::MulAdd(LoadRow(w0 + i), x0, a0), a1 = hn::MulAdd(LoadRow(w1 + i), x0, a1);
    a2 = hn::MulAdd(LoadRow(w2 + i), x0, a2), a3 = hn::MulAdd(LoadRow(w3 + i), x0, a3);
    i += N;
  }
  out[0] = FinishDot(a0, b0, w0, x, i, n), out[1] = FinishDot(a1, b1, w1, x, i, n);
  out[2] = FinishDot(a2, b2, w2, x, i, n), out[3] = FinishDot(a3, b3, w3, x, i, n);
}

// y[r] = W[r,:] . x, or y[r] += alpha W[r,:] . x, for r in [r0, r1) of an f32 / bf16 W.
void MatvecRange(const MatrixView& w, const float* x, float alpha, bool accumulate, float* y,
                 int64_t r0, int64_t r1) {
  const auto put = [&](int64_t r, float v) { y[r] = accumulate ? y[r] + alpha * v : v; };
  int64_t r = r0;
  const bool dense = w.type == DType::f32 || w.type == DType::bf16;
  for (; dense && r + 4 <= r1; r += 4) {
    float v[4];
    if (w.type == DType::f32) {
      const float* rows[4] = {w.f32_row(r), w.f32_row(r + 1), w.f32_row(r + 2), w.f32_row(r + 3)};
      Dot4Rows(rows, x, w.cols, v);
    } else {
      const BF16* rows[4] = {w.bf16_row(r), w.bf16_row(r + 1), w.bf16_row(r + 2), w.bf16_row(r + 3)};
      Dot4Rows(rows, x, w.cols, v);
    }
    for (int j = 0; j < 4; ++j) put(r + j, v[j]);
  }
  for (; r < r1; ++r) put(r, DotRow(w, r, x));
}

void Axpy(float a, const float* x, int64_t n, float* y) {
  const DF d;
  const int64_t N = int64_t(hn::Lanes(d));
  const VF va = hn::Set(d, a);
  int64_t i = 0;
  for (; i + N <= n; i += N) hn::StoreU(hn::MulAdd(va, hn::LoadU(d, x + i), hn::LoadU(d, y + i)), d, y + i);
  for (; i < n; ++i) y[i] += a * x[i];
}

void Axpby(float a, const float* x, float b, int64_t n, float* y) {
  const DF d;
  const int64_t N = int64_t(hn::Lanes(d));
  const VF va = hn::Set(d, a), vb = hn::Set(d, b);
  int64_t i = 0;
  for (; i + N <= n; i += N) hn::StoreU(hn::MulAdd(va, hn::LoadU(d, x + i), hn::Mul(vb, hn::LoadU(d, y + i))), d, y + i);
  for (; i < n; ++i) y[i] = a * x[i] + b * y[i];
}

// Four rows at a time, so ya and yb are loaded and stored once per four rows, their
// multiply-adds in row order (the bits of one row at a time); each step asks for the lines
// kStatePrefetchBytes past the rows it reads. Past the state's end that is the next head's
// state, which the same thread usually takes next (ThreadPool::run_items' shares).
constexpr int64_t kStatePrefetchBytes = 2048;
void StateProducts(const float* S, int64_t rows, int64_t cols, const float* a, const float* b, float* ya, float* yb) {
  const DF d;
  const int64_t N = int64_t(hn::Lanes(d)), row_bytes = cols * int64_t(sizeof(float));
  std::fill(ya, ya + cols, 0.0f), std::fill(yb, yb + cols, 0.0f);
  int64_t r = 0;
  for (; r + 4 <= rows; r += 4) {
    const char* ahead = reinterpret_cast<const char*>(S + r * cols) + kStatePrefetchBytes;
    for (int64_t at = 0; at < 4 * row_bytes; at += 64) hwy::Prefetch(ahead + at);
    const float *s0 = S + r * cols, *s1 = s0 + cols, *s2 = s1 + cols, *s3 = s2 + cols;
    const VF a0 = hn::Set(d, a[r]), a1 = hn::Set(d, a[r + 1]), a2 = hn::Set(d, a[r + 2]), a3 = hn::Set(d, a[r + 3]);
    const VF b0 = hn::Set(d, b[r]), b1 = hn::Set(d, b[r + 1]), b2 = hn::Set(d, b[r + 2]), b3 = hn::Set(d, b[r + 3]);
    int64_t c = 0;
    for (; c + N <= cols; c += N) {
      const VF v0 = hn::LoadU(d, s0 + c), v1 = hn::LoadU(d, s1 + c), v2 = hn::LoadU(d, s2 + c), v3 = hn::LoadU(d, s3 + c);
      const VF sa = hn::MulAdd(a3, v3, hn::MulAdd(a2, v2, hn::MulAdd(a1, v1, hn::MulAdd(a0, v0, hn::LoadU(d, ya + c)))));
      const VF sb = hn::MulAdd(b3, v3, hn::MulAdd(b2, v2, hn::MulAdd(b1, v1, hn::MulAdd(b0, v0, hn::LoadU(d, yb + c)))));
      hn::StoreU(sa, d, ya + c), hn::StoreU(sb, d, yb + c);
    }
    for (; c < cols; ++c)
      for (int64_t j = 0; j < 4; ++j) ya[c] += a[r + j] * S[(r + j) * cols + c], yb[c] += b[r + j] * S[(r + j) * cols + c];
  }
  for (; r < rows; ++r) {
    const VF ar = hn::Set(d, a[r]), br = hn::Set(d, b[r]);
    const float* sr = S + r * cols;
    int64_t c = 0;
    for (; c + N <= cols; c += N) {
      const VF v = hn::LoadU(d, sr + c);
      hn::StoreU(hn::MulAdd(ar, v, hn::LoadU(d, ya + c)), d, ya + c);
      hn::StoreU(hn::MulAdd(br, v, hn::LoadU(d, yb + c)), d, yb + c);
    }
    for (; c < cols; ++c) ya[c] += a[r] * sr[c], yb[c] += b[r] * sr[c];
  }
}

// Each row through this target's Axpby, called directly: one dispatch for the state, not one
// per row.
void StateDecayAdd(float* S, int64_t rows, int64_t cols, const float* decay, const float* k, const float* delta) {
  for (int64_t r = 0; r < rows; ++r) Axpby(k[r], delta, decay[r], cols, S + r * cols);
}

// Four q8 / q4 rows of AddRowsRange at once: each vector of y is loaded and stored once per
// four rows, its four multiply-adds in row order, so every y[i] takes the same steps as one
// row at a time (the same bits) with a quarter of y's loads and stores (q4: of y's planes, its
// even and odd columns apart, made once per call, AddQ4Quads). The products coefficient x group scale are
// formed first for a span of groups, the f16 scales widened N at a time (F16C / FP16 lanes):
// a scalar conversion per group and row cost more than the group's multiply-adds (q8: 12.0
// against 18.1 GB/s from L2 at 1 thread on AVX3, BM_AddRows).
constexpr int64_t kSpanGroups = 64;

// a[j][g] = coeffs[j] s_j[s0 + g] for g < n, s_j row j's scales from the range's first group.
void ScaledGroups4(const F16* const* scale, const float* coeffs, int64_t s0, int64_t n, float (*a)[kSpanGroups]) {
  const DF d;
  const hn::Rebind<hwy::float16_t, DF> d16;
  const int64_t N = int64_t(hn::Lanes(d));
  for (int j = 0; j < 4; ++j) {
    const F16* sj = scale[j] + s0;
    const VF vc = hn::Set(d, coeffs[j]);
    int64_t g = 0;
    for (; g + N <= n; g += N)
      hn::Store(hn::Mul(vc, hn::PromoteTo(d, hn::LoadU(d16, reinterpret_cast<const hwy::float16_t*>(sj + g)))), d,
                a[j] + g);
    for (; g < n; ++g) a[j][g] = coeffs[j] * f16_to_f32(sj[g]);
  }
}

// The coefficient x group scale of four rows, a span of groups at a time: a[j][g] for the
// span's group g, once fill(s0) has formed the span that starts at the range's group s0.
struct ScaledGroups {
  const F16* scale[4];
  const float* coeffs;
  HWY_ALIGN float a[4][kSpanGroups];
  ScaledGroups(const MatrixView& w, const int32_t* rows, const float* c, int64_t c0) : coeffs(c) {
    for (int j = 0; j < 4; ++j) scale[j] = w.row_scales(rows[j]) + c0 / w.group;
  }
  int64_t fill(int64_t s0, int64_t groups) {  // the span's length
    const int64_t n = std::min(kSpanGroups, groups - s0);
    ScaledGroups4(scale, coeffs, s0, n, a);
    return n;
  }
};

// The fired rows are scattered, so the hardware's stream prefetch starts over at each one: a
// quad asks for the next quad's rows (up to four of the `left` rows after it) as it reads its
// own, a cache line of each per line of its own, and for their scales before it starts. BM_AddRows q8, 16384
// rows, 1 thread, Emerald Rapids, alternating, 3 rounds: half fired 14.1-14.7 -> 15.4-16.4
// GB/s, all 14.1-14.9 -> 15.8-16.3 (q4, bound by its unpacking, half fired: 5.4-5.9 ->
// 5.3-6.5); full-size embla-1 q8 tg48, 1 / 2 threads, 11.6-12.4 / 18.9-21.3 -> 13.3-13.5 /
// 22.1-24.7 tokens/s.
struct NextRows {
  const char* row[4] = {};
  int n = 0;
  NextRows(const MatrixView& w, const int32_t* next, int64_t left, int64_t c0, int64_t c1)
      : n(int(std::clamp<int64_t>(left, 0, 4))) {
    for (int j = 0; j < n; ++j) {
      row[j] = static_cast<const char*>(w.data) + next[j] * w.row_bytes();
      const char* s = reinterpret_cast<const char*>(w.row_scales(next[j]) + c0 / w.group);
      for (int64_t at = 0; at < (c1 - c0) / w.group * int64_t(sizeof(F16)); at += 64) hwy::Prefetch(s + at);
    }
  }
  void lines(int64_t b0, int64_t b1) const {  // the bytes [b0, b1) of each row
    for (int j = 0; j < n; ++j)
      for (int64_t at = b0; at < b1; at += 64) hwy::Prefetch(row[j] + at);
  }
};

void AddQ8Rows4(const MatrixView& w, const int32_t* rows, const float* coeffs, float* y, int64_t c0, int64_t c1,
                int64_t left) {
  const DF d;
  const int64_t N = int64_t(hn::Lanes(d)), groups = (c1 - c0) / w.group;
  const int8_t* q[4];
  for (int j = 0; j < 4; ++j) q[j] = w.q8_row(rows[j]);
  const NextRows ahead(w, rows + 4, left, c0, c1);
  ScaledGroups sg(w, rows, coeffs, c0);
  for (int64_t s0 = 0; s0 < groups; s0 += kSpanGroups)
    for (int64_t g = 0, n = sg.fill(s0, groups); g < n; ++g) {
      const int64_t g0 = c0 + (s0 + g) * w.group;
      if (g0 % 64 == 0 || g == 0) ahead.lines(g0, g0 + w.group);
      int64_t i = g0;
      for (; i + N <= g0 + w.group; i += N) {  // (no arrays of vectors: SVE's are sizeless)
        VF acc = hn::LoadU(d, y + i);
        for (int j = 0; j < 4; ++j) acc = hn::MulAdd(hn::Set(d, sg.a[j][g]), LoadQ8(q[j] + i), acc);
        hn::StoreU(acc, d, y + i);
      }
      for (; i < g0 + w.group; ++i)
        for (int j = 0; j < 4; ++j) y[i] += sg.a[j][g] * float(q[j][i]);
    }
}

// q4 quads add into y's planes (ToPlanes): each whole 2N-column block of a group holds its
// even columns, then its odd ones, as a row's low and high nibbles give them, so a quad loads
// and stores them plainly; a group's last columns short of a block stay in place.
void AddQ4Rows4(const MatrixView& w, const int32_t* rows, const float* coeffs, float* planes, int64_t c0,
                int64_t c1, int64_t left) {
  const DF d;
  const int64_t N = int64_t(hn::Lanes(d)), groups = (c1 - c0) / w.group;
  const uint8_t* q[4];
  for (int j = 0; j < 4; ++j) q[j] = w.q4_row(rows[j]);
  const NextRows ahead(w, rows + 4, left, c0, c1);
  ScaledGroups sg(w, rows, coeffs, c0);
  for (int64_t s0 = 0; s0 < groups; s0 += kSpanGroups)
    for (int64_t g = 0, n = sg.fill(s0, groups); g < n; ++g) {
      const int64_t g0 = c0 + (s0 + g) * w.group;
      if (g0 % 128 == 0 || g == 0) ahead.lines(g0 / 2, (g0 + w.group) / 2);
      int64_t i = g0;
      for (; i + 2 * N <= g0 + w.group; i += 2 * N) {
        VF ye = hn::LoadU(d, planes + i), yo = hn::LoadU(d, planes + i + N);
        for (int j = 0; j < 4; ++j) {
          VF we, wo;
          LoadQ4(q[j] + i / 2, we, wo);
          const VF va = hn::Set(d, sg.a[j][g]);
          ye = hn::MulAdd(va, we, ye), yo = hn::MulAdd(va, wo, yo);
        }
        hn::StoreU(ye, d, planes + i), hn::StoreU(yo, d, planes + i + N);
      }
      for (; i < g0 + w.group; ++i)
        for (int j = 0; j < 4; ++j) planes[i] += sg.a[j][g] * float(Nibble(q[j], i));
    }
}

// y[c0:c1) to the planes of AddQ4Rows4 and back (`back`). Once per call, not once per quad: a
// 512-bit interleave is two lane permutes, on the port the nibbles' widening also needs.
// BM_AddRows q4, 1 thread, Emerald Rapids, best of 3 alternating rounds, GB/s (512 rows half
// fired / 16384 half / 16384 all): 6.3 / 6.3 / 5.7 before, 7.4 / 7.0 / 7.2 with LoadQ4's
// table, 8.9 / 8.5 / 8.8 with the planes too; full-size embla-1 q4 tg48 at 1 thread within
// the sitting's noise (16.1, 18.8 against 15.3, 19.7 tokens/s): its rows there stream from
// memory at about the same rate either way.
void ToPlanes(int64_t group, float* y, float* planes, int64_t c0, int64_t c1, bool back) {
  const DF d;
  const int64_t N = int64_t(hn::Lanes(d));
  for (int64_t g0 = c0; g0 < c1; g0 += group) {
    int64_t i = g0;
    for (; i + 2 * N <= g0 + group; i += 2 * N) {
      if (back) {
        hn::StoreInterleaved2(hn::LoadU(d, planes + i), hn::LoadU(d, planes + i + N), d, y + i);
      } else {
        VF even, odd;
        hn::LoadInterleaved2(d, y + i, even, odd);
        hn::StoreU(even, d, planes + i), hn::StoreU(odd, d, planes + i + N);
      }
    }
    for (; i < g0 + group; ++i)
      if (back) y[i] = planes[i];
      else planes[i] = y[i];
  }
}

// The q4 quads of AddRowsRange, through y's planes (kept per thread, grown once).
int64_t AddQ4Quads(const MatrixView& w, const int32_t* rows, const float* coeffs, int64_t n_rows, float* y,
                   int64_t c0, int64_t c1) {
  if (n_rows < 4) return 0;
  thread_local std::vector<float> planes;
  if (planes.size() < size_t(c1)) planes.resize(size_t(c1));
  ToPlanes(w.group, y, planes.data(), c0, c1, false);
  int64_t k = 0;
  for (; k + 4 <= n_rows; k += 4) AddQ4Rows4(w, rows + k, coeffs + k, planes.data(), c0, c1, n_rows - k - 4);
  ToPlanes(w.group, y, planes.data(), c0, c1, true);
  return k;
}

// y[c0:c1) += sum_i coeffs[i] W[rows[i], c0:c1). For q8/q4, c0 and c1 are group bounds and
// each group is one f32 axpy: y += (coeff s_g) q, the int8 or nibble values widened in SIMD
// registers (q4: low nibbles to even columns, high to odd, through y's planes); q8 and
// q4 rows four at a time (AddQ8Rows4, AddQ4Rows4), then the rest.
void AddRowsRange(const MatrixView& w, const int32_t* rows, const float* coeffs, int64_t n_rows,
                  float* y, int64_t c0, int64_t c1) {
  const DF d;
  const int64_t N = int64_t(hn::Lanes(d));
  int64_t k = 0;
  if (w.type == DType::q8)
    for (; k + 4 <= n_rows; k += 4) AddQ8Rows4(w, rows + k, coeffs + k, y, c0, c1, n_rows - k - 4);
  if (w.type == DType::q4) k = AddQ4Quads(w, rows, coeffs, n_rows, y, c0, c1);
  for (; k < n_rows; ++k) {
    const int64_t r = rows[k];
    const float c = coeffs[k];
    if (w.type == DType::f32) {
      Axpy(c, w.f32_row(r) + c0, c1 - c0, y + c0);
    } else if (w.type == DType::bf16) {
      const BF16* p = w.bf16_row(r);
      const VF vc = hn::Set(d, c);
      int64_t i = c0;
      for (; i + N <= c1; i += N) hn::StoreU(hn::MulAdd(vc, LoadBF16(p + i), hn::LoadU(d, y + i)), d, y + i);
      for (; i < c1; ++i) y[i] += c * bf16_to_f32(p[i]);
    } else {
      const F16* scale = w.row_scales(r) + c0 / w.group;  // c0 is a group bound
      for (int64_t g0 = c0; g0 < c1; g0 += w.group, ++scale) {
        const float a = c * f16_to_f32(*scale);  // coefficient x group scale
        const VF va = hn::Set(d, a);
        int64_t i = g0;
        if (w.type == DType::q8) {
          const int8_t* q = w.q8_row(r);
          for (; i + N <= g0 + w.group; i += N)
            hn::StoreU(hn::MulAdd(va, LoadQ8(q + i), hn::LoadU(d, y + i)), d, y + i);
          for (; i < g0 + w.group; ++i) y[i] += a * float(q[i]);
        } else {
          const uint8_t* q = w.q4_row(r);
          for (; i + 2 * N <= g0 + w.group; i += 2 * N) {
            VF we, wo, ye, yo;
            LoadQ4(q + i / 2, we, wo);
            hn::LoadInterleaved2(d, y + i, ye, yo);
            hn::StoreInterleaved2(hn::MulAdd(va, we, ye), hn::MulAdd(va, wo, yo), d, y + i);
          }
          for (; i < g0 + w.group; ++i) y[i] += a * float(Nibble(q, i));
        }
      }
    }
  }
}

// out[t] = row . x[t] for four token vectors at once: the row is loaded once per step.
void Dot4(const float* row, const float* x, int64_t stride, int64_t n, float* out) {
  const DF d;
  const int64_t N = int64_t(hn::Lanes(d));
  VF s0 = hn::Zero(d), s1 = hn::Zero(d), s2 = hn::Zero(d), s3 = hn::Zero(d);
  int64_t i = 0;
  for (; i + N <= n; i += N) {
    const VF w = hn::LoadU(d, row + i);
    s0 = hn::MulAdd(w, hn::LoadU(d, x + i), s0);
    s1 = hn::MulAdd(w, hn::LoadU(d, x + stride + i), s1);
    s2 = hn::MulAdd(w, hn::LoadU(d, x + 2 * stride + i), s2);
    s3 = hn::MulAdd(w, hn::LoadU(d, x + 3 * stride + i), s3);
  }
  float t[4] = {Sum(s0), Sum(s1), Sum(s2), Sum(s3)};
  for (; i < n; ++i)
    for (int k = 0; k < 4; ++k) t[k] += row[i] * x[k * stride + i];
  for (int k = 0; k < 4; ++k) out[k] = t[k];
}

// Rows [r0, r1) of Y = W X for all tokens (x_t = x + t ldx, y[t ldy + r]), one tile of
// tokens at a time: each row is decoded into `buf` once per tile and stays in L1 while the
// tile is scored.
void MatmulRange(const MatrixView& w, const float* x, int64_t ldx, int64_t n_tokens, float* y, int64_t ldy,
                 int64_t r0, int64_t r1, float* buf) {
  constexpr int64_t kTokenTile = 32;
  const int64_t cols = w.cols;
  for (int64_t t0 = 0; t0 < n_tokens; t0 += kTokenTile) {
    const int64_t t1 = std::min(n_tokens, t0 + kTokenTile);
    for (int64_t r = r0; r < r1; ++r) {
      const float* row = w.f32_row(r);
      if (w.type != DType::f32) {
        decode_row(w, r, buf);
        row = buf;
      }
      int64_t t = t0;
      for (; t + 4 <= t1; t += 4) {
        float out[4];
        Dot4(row, x + t * ldx, ldx, cols, out);
        for (int k = 0; k < 4; ++k) y[(t + k) * ldy + r] = out[k];
      }
      for (; t < t1; ++t) y[t * ldy + r] = DotF32(row, x + t * ldx, cols);
    }
  }
}

const char* TargetName() { return hwy::TargetName(HWY_TARGET); }

}  // namespace wren::kernels::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace wren::kernels {

HWY_EXPORT(DotRow);
HWY_EXPORT(MatvecRange);
HWY_EXPORT(AddRowsRange);
HWY_EXPORT(MatmulRange);
HWY_EXPORT(DotF32);
HWY_EXPORT(Axpy);
HWY_EXPORT(StateProducts);
HWY_EXPORT(StateDecayAdd);
HWY_EXPORT(Axpby);
HWY_EXPORT(TargetName);

namespace {
// Below this many weights per call a thread hand-off costs more than it saves.
constexpr int64_t kMinParallelWork = 1 << 15;
// Row chunks are multiples of 16 so threads never write the same cache line of y.
constexpr int64_t kRowAlign = 16;
}  // namespace

const char* active_target() { return HWY_DYNAMIC_DISPATCH(TargetName)(); }

namespace {
std::atomic<bool> g_f32_activations{false};
}  // namespace

void set_f32_activations(bool on) { g_f32_activations.store(on, std::memory_order_relaxed); }
bool f32_activations() { return g_f32_activations.load(std::memory_order_relaxed); }

namespace {
// Rows [r0, r1): f32 / bf16 through Highway; q8 / q4 through the integer path, its dots
// gathered in blocks on the stack when they are added to y.
void range(const MatrixView& w, const float* x, const QuantizedActivation* xq, float alpha,
           bool accumulate, float* y, int64_t r0, int64_t r1) {
  if ((w.type != DType::q8 && w.type != DType::q4) || f32_activations()) {
    HWY_DYNAMIC_DISPATCH(MatvecRange)(w, x, alpha, accumulate, y, r0, r1);
    return;
  }
  if (!xq) throw KernelError(std::string("matvec_range: a ") + to_string(w.type) + " matrix needs the quantised activation");
  if (!accumulate) {
    quantized::dot_rows(w, *xq, r0, r1, y + r0);
    return;
  }
  constexpr int64_t kBlock = 64;
  float dots[kBlock];
  for (int64_t b = r0; b < r1; b += kBlock) {
    const int64_t e = std::min(r1, b + kBlock);
    quantized::dot_rows(w, *xq, b, e, dots);
    for (int64_t r = b; r < e; ++r) y[r] += alpha * dots[r - b];
  }
}

// Shared by matvec and matvec_add: x is quantised once (q8 / q4) into the caller's
// thread-local activation, then read by every row on every thread.
void matvec_rows(const MatrixView& w, const float* x, float alpha, bool accumulate, float* y,
                 ThreadPool* pool) {
  const QuantizedActivation* xq = nullptr;
  if ((w.type == DType::q8 || w.type == DType::q4) && !f32_activations()) {
    thread_local QuantizedActivation scratch;  // grown once per thread
    quantize_activation(x, w.cols, w.group, scratch, activation_rows(w.type));
    xq = &scratch;
  }
  if (w.rows * w.cols < kMinParallelWork) pool = nullptr;
  parallel_rows(pool, w.rows, kRowAlign, [&](int64_t r0, int64_t r1) {
    range(w, x, xq, alpha, accumulate, y, r0, r1);
  });
}
}  // namespace

void matvec(const MatrixView& w, const float* x, float* y, ThreadPool* pool) {
  matvec_rows(w, x, 1.0f, false, y, pool);
}

void matvec_add(const MatrixView& w, const float* x, float alpha, float* y, ThreadPool* pool) {
  matvec_rows(w, x, alpha, true, y, pool);
}

void matvec_range(const MatrixView& w, const float* x, const QuantizedActivation* xq, float* y,
                  int64_t r0, int64_t r1) {
  range(w, x, xq, 1.0f, false, y, r0, r1);
}

void matvec_add_range(const MatrixView& w, const float* x, const QuantizedActivation* xq,
                      float alpha, float* y, int64_t r0, int64_t r1) {
  range(w, x, xq, alpha, true, y, r0, r1);
}

float dot_row(const MatrixView& w, int64_t row, const float* x) {
  return HWY_DYNAMIC_DISPATCH(DotRow)(w, row, x);
}

void add_rows(const MatrixView& w, const int32_t* rows, const float* coeffs, int64_t n_rows,
              float* y, ThreadPool* pool) {
  if (n_rows * w.cols < kMinParallelWork) pool = nullptr;
  // Column chunks: whole groups for q8 / q4 (a group shares one scale), cache lines else.
  const int64_t align = w.group ? w.group * ((kRowAlign + w.group - 1) / w.group) : kRowAlign;
  parallel_rows(pool, w.cols, align, [&](int64_t c0, int64_t c1) {
    HWY_DYNAMIC_DISPATCH(AddRowsRange)(w, rows, coeffs, n_rows, y, c0, c1);
  });
}

void matmul(const MatrixView& w, const float* x, int64_t n_tokens, float* y, ThreadPool* pool) {
  if (w.rows * w.cols * n_tokens < kMinParallelWork) pool = nullptr;
  parallel_rows(pool, w.rows, kRowAlign, [&](int64_t r0, int64_t r1) {
    thread_local std::vector<float> buf;  // one decoded row, grown once per thread
    if (buf.size() < size_t(w.cols)) buf.resize(size_t(w.cols));
    HWY_DYNAMIC_DISPATCH(MatmulRange)(w, x, w.cols, n_tokens, y, w.rows, r0, r1, buf.data());
  });
}

void quantize_batch(const float* x, int64_t n, int64_t cols, int64_t ldx, int group,
                    std::vector<QuantizedActivation>& out) {
  if (out.size() < size_t(n)) out.resize(size_t(n));
  for (int64_t t = 0; t < n; ++t) quantize_activation(x + t * ldx, cols, group, out[size_t(t)]);
}

void matmul_range(const MatrixView& w, const ActivationBatch& x, float* y, int64_t ldy, int64_t r0,
                  int64_t r1) {
  if (r0 >= r1 || x.n <= 0) return;
  if ((w.type == DType::q8 || w.type == DType::q4) && !f32_activations()) {
    if (!x.xq) throw KernelError(std::string("matmul_range: a ") + to_string(w.type) + " matrix needs the quantised batch");
    quantized::gemm_rows(w, x.xq, x.n, r0, r1, y + r0, ldy);
    return;
  }
  thread_local std::vector<float> buf;  // one decoded row, grown once per thread
  if (buf.size() < size_t(w.cols)) buf.resize(size_t(w.cols));
  HWY_DYNAMIC_DISPATCH(MatmulRange)(w, x.x, x.ldx, x.n, y, ldy, r0, r1, buf.data());
}

float dot(const float* a, const float* b, int64_t n) { return HWY_DYNAMIC_DISPATCH(DotF32)(a, b, n); }

void axpy(float a, const float* x, int64_t n, float* y) { HWY_DYNAMIC_DISPATCH(Axpy)(a, x, n, y); }
void axpby(float a, const float* x, float b, int64_t n, float* y) { HWY_DYNAMIC_DISPATCH(Axpby)(a, x, b, n, y); }
void state_products(const float* S, int64_t rows, int64_t cols, const float* a, const float* b, float* ya, float* yb) {
  HWY_DYNAMIC_DISPATCH(StateProducts)(S, rows, cols, a, b, ya, yb);
}
void state_decay_add(float* S, int64_t rows, int64_t cols, const float* decay, const float* k, const float* delta) {
  HWY_DYNAMIC_DISPATCH(StateDecayAdd)(S, rows, cols, decay, k, delta);
}

}  // namespace wren::kernels
#endif  // HWY_ONCE
