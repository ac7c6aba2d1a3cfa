// kernels/: norms, softmax, activations, RoPE and top-k through Highway with run-time
// dispatch. Transcendentals use Highway's contrib/math (Exp, Log1p: within a few ulp), so
// these kernels match kernels/reference.cpp to a few f32 ulp rather than bit for bit.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/elementwise_hwy.cpp"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
#include "hwy/contrib/math/math-inl.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "kernels/ops.h"

HWY_BEFORE_NAMESPACE();
namespace wren::kernels::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;
using DF = hn::ScalableTag<float>;
using VF = hn::Vec<DF>;

// Highway's Exp is valid up to x = 104; above 88.8 e^x overflows f32 anyway.
VF SafeExp(VF x) { return hn::CallExp(DF(), hn::Min(x, hn::Set(DF(), 88.8f))); }

float SumSquares(const float* x, int64_t n) {
  const DF d;
  const int64_t N = int64_t(hn::Lanes(d));
  VF s = hn::Zero(d);
  int64_t i = 0;
  for (; i + N <= n; i += N) {
    const VF v = hn::LoadU(d, x + i);
    s = hn::MulAdd(v, v, s);
  }
  float r = hn::GetLane(hn::SumOfLanes(d, s));
  for (; i < n; ++i) r += x[i] * x[i];
  return r;
}

// out = x * r * g, g from the gain as documented in ops.h.
void ScaleByGain(const float* x, float r, const float* gain, bool unit_offset, int64_t n,
                 float* out) {
  const DF d;
  const int64_t N = int64_t(hn::Lanes(d));
  const VF vr = hn::Set(d, r), one = hn::Set(d, 1.0f);
  int64_t i = 0;
  for (; i + N <= n; i += N) {
    VF v = hn::Mul(hn::LoadU(d, x + i), vr);
    if (gain) {
      const VF g = hn::LoadU(d, gain + i);
      v = hn::Mul(v, unit_offset ? hn::Add(one, g) : g);
    }
    hn::StoreU(v, d, out + i);
  }
  for (; i < n; ++i) out[i] = x[i] * r * (gain ? (unit_offset ? 1.0f + gain[i] : gain[i]) : 1.0f);
}

void RmsNorm(const float* x, const float* gain, int64_t n, float eps, bool unit_offset,
             float* out) {
  const float r = float(1.0 / std::sqrt(double(SumSquares(x, n)) / double(n) + eps));
  ScaleByGain(x, r, gain, unit_offset, n, out);
}

void L2Normalize(const float* x, int64_t n, float eps, float* out) {
  const float r = float(1.0 / std::sqrt(double(SumSquares(x, n)) + eps));
  ScaleByGain(x, r, nullptr, false, n, out);
}

// Applies f to every vector of x; the tail goes through a lane-padded vector so that the
// same f (and so the same rounding) serves every element.
template <class F>
void Map(const float* x, int64_t n, float* out, const F& f) {
  const DF d;
  const int64_t N = int64_t(hn::Lanes(d));
  int64_t i = 0;
  for (; i + N <= n; i += N) hn::StoreU(f(hn::LoadU(d, x + i)), d, out + i);
  if (i < n) {
    HWY_ALIGN float buf[hn::MaxLanes(d)] = {};
    std::copy(x + i, x + n, buf);
    hn::Store(f(hn::Load(d, buf)), d, buf);
    std::copy(buf, buf + (n - i), out + i);
  }
}

VF Sigmoid(VF v) {
  const VF one = hn::Set(DF(), 1.0f);
  return hn::Div(one, hn::Add(one, SafeExp(hn::Neg(v))));
}

void Exp(const float* x, int64_t n, float* out) { Map(x, n, out, SafeExp); }
void SigmoidRow(const float* x, int64_t n, float* out) { Map(x, n, out, Sigmoid); }
void Silu(const float* x, int64_t n, float* out) {
  Map(x, n, out, [](VF v) { return hn::Mul(v, Sigmoid(v)); });
}
void Softplus(const float* x, int64_t n, float* out) {
  Map(x, n, out, [](VF v) {
    const DF d;
    return hn::Add(hn::Max(v, hn::Zero(d)), hn::CallLog1p(d, SafeExp(hn::Neg(hn::Abs(v)))));
  });
}
void Relu2(const float* x, int64_t n, float* out) {
  Map(x, n, out, [](VF v) {
    const VF r = hn::Max(v, hn::Zero(DF()));
    return hn::Mul(r, r);
  });
}

// out[j] = max(out[j], x[r ldx + j]) over r, as std::max(out[j], x): a NaN x is passed over.
void MaxRows(const float* x, int64_t ldx, int64_t rows, int64_t n, float* out) {
  const DF d;
  const int64_t N = int64_t(hn::Lanes(d));
  int64_t j = 0;
  for (; j + N <= n; j += N) {
    VF m = hn::LoadU(d, out + j);
    for (int64_t r = 0; r < rows; ++r) {
      const VF v = hn::LoadU(d, x + r * ldx + j);
      m = hn::IfThenElse(hn::Lt(m, v), v, m);
    }
    hn::StoreU(m, d, out + j);
  }
  for (; j < n; ++j)
    for (int64_t r = 0; r < rows; ++r) out[j] = std::max(out[j], x[r * ldx + j]);
}

// m = max x, x = e^(x - m) in place, sum of the new x: two f32 accumulators, added in double.
ExpSum ExpBelowMax(float* x, int64_t n) {
  const DF d;
  const int64_t N = int64_t(hn::Lanes(d));
  VF vm = hn::Set(d, -INFINITY);
  int64_t i = 0;
  for (; i + N <= n; i += N) vm = hn::Max(vm, hn::LoadU(d, x + i));
  float m = hn::GetLane(hn::MaxOfLanes(d, vm));
  for (; i < n; ++i) m = std::max(m, x[i]);
  if (m == -INFINITY) {
    std::fill(x, x + n, 0.0f);
    return {m, 0.0};
  }
  const VF neg_m = hn::Set(d, -m);
  VF s0 = hn::Zero(d), s1 = hn::Zero(d);
  for (i = 0; i + 2 * N <= n; i += 2 * N) {
    const VF e0 = SafeExp(hn::Add(hn::LoadU(d, x + i), neg_m)), e1 = SafeExp(hn::Add(hn::LoadU(d, x + i + N), neg_m));
    hn::StoreU(e0, d, x + i), hn::StoreU(e1, d, x + i + N);
    s0 = hn::Add(s0, e0), s1 = hn::Add(s1, e1);
  }
  double sum = double(hn::GetLane(hn::SumOfLanes(d, s0))) + double(hn::GetLane(hn::SumOfLanes(d, s1)));
  for (; i < n; ++i) sum += x[i] = std::exp(x[i] - m);
  return {m, sum};
}

void Softmax(float* x, int64_t n) {
  const ExpSum e = ExpBelowMax(x, n);
  if (e.max == -INFINITY) return;  // all 0 already
  const VF inv = hn::Set(DF(), float(1.0 / e.sum));
  Map(x, n, x, [&](VF v) { return hn::Mul(v, inv); });
}

// cs = [cos a_0 .. cos a_{h-1}, sin a_0 .. sin a_{h-1}], a_i = pos f_i formed in double.
void Rope(float* x, int n_heads, int head_dim, int rotary_dim, const float* inv_freq,
          int64_t pos, float* cs) {
  const int64_t h = rotary_dim / 2;
  for (int64_t i = 0; i < h; ++i) {
    const double a = double(pos) * inv_freq[i];
    cs[i] = float(std::cos(a));
    cs[h + i] = float(std::sin(a));
  }
  const DF d;
  const int64_t N = int64_t(hn::Lanes(d));
  for (int head = 0; head < n_heads; ++head) {
    float* v = x + int64_t(head) * head_dim;
    int64_t i = 0;
    for (; i + N <= h; i += N) {
      const VF x1 = hn::LoadU(d, v + i), x2 = hn::LoadU(d, v + h + i);
      const VF c = hn::LoadU(d, cs + i), s = hn::LoadU(d, cs + h + i);
      hn::StoreU(hn::NegMulAdd(x2, s, hn::Mul(x1, c)), d, v + i);
      hn::StoreU(hn::MulAdd(x1, s, hn::Mul(x2, c)), d, v + h + i);
    }
    for (; i < h; ++i) {
      const float x1 = v[i], x2 = v[h + i];
      v[i] = x1 * cs[i] - x2 * cs[h + i];
      v[h + i] = x2 * cs[i] + x1 * cs[h + i];
    }
  }
}

// Blocks of N values none of which reaches t are skipped with one compare; the rest are kept
// one by one, in order, up to cap + 1 of them.
int64_t RowsAtLeast(const float* x, int64_t n, float t, int64_t cap, int32_t* idx) {
  const DF d;
  const int64_t N = int64_t(hn::Lanes(d));
  const auto vt = hn::Set(d, t);
  int64_t found = 0, i = 0;
  for (; i + N <= n && found <= cap; i += N) {
    if (hn::AllFalse(d, hn::Ge(hn::LoadU(d, x + i), vt))) continue;
    for (int64_t j = i; j < i + N && found <= cap; ++j)
      if (x[j] >= t) idx[found++] = int32_t(j);
  }
  for (; i < n && found <= cap; ++i)
    if (x[i] >= t) idx[found++] = int32_t(i);
  return found;
}

// A heap of the k best indices seen so far, worst on top. A block of N values is skipped
// when none is strictly greater than the worst kept value: a later equal value ranks below
// it (higher index), and NaN ranks below every number.
void TopK(const float* x, int64_t n, int k, int32_t* idx) {
  const auto better = [x](int32_t a, int32_t b) {
    const bool nan_a = std::isnan(x[a]), nan_b = std::isnan(x[b]);
    if (nan_a != nan_b) return nan_b;
    if (!nan_a && x[a] != x[b]) return x[a] > x[b];
    return a < b;
  };
  if (k == 0) return;
  for (int i = 0; i < k; ++i) {
    idx[i] = i;
    std::push_heap(idx, idx + i + 1, better);
  }
  const auto consider = [&](int64_t i) {
    if (better(int32_t(i), idx[0])) {
      std::pop_heap(idx, idx + k, better);
      idx[k - 1] = int32_t(i);
      std::push_heap(idx, idx + k, better);
    }
  };
  const DF d;
  const int64_t N = int64_t(hn::Lanes(d));
  int64_t i = k;
  for (; i + N <= n; i += N) {
    const float worst = x[idx[0]];
    if (!std::isnan(worst) && hn::AllFalse(d, hn::Gt(hn::LoadU(d, x + i), hn::Set(d, worst))))
      continue;
    for (int64_t j = i; j < i + N; ++j) consider(j);
  }
  for (; i < n; ++i) consider(i);
  std::sort_heap(idx, idx + k, better);  // ascending in "better" order: best first
}

}  // namespace wren::kernels::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace wren::kernels {

HWY_EXPORT(RmsNorm);
HWY_EXPORT(L2Normalize);
HWY_EXPORT(Softmax);
HWY_EXPORT(ExpBelowMax);
HWY_EXPORT(Exp);
HWY_EXPORT(SigmoidRow);
HWY_EXPORT(Silu);
HWY_EXPORT(Softplus);
HWY_EXPORT(Relu2);
HWY_EXPORT(MaxRows);
HWY_EXPORT(Rope);
HWY_EXPORT(TopK);
HWY_EXPORT(RowsAtLeast);

void rmsnorm(const float* x, const float* gain, int64_t n, float eps, bool unit_offset,
             float* out) {
  HWY_DYNAMIC_DISPATCH(RmsNorm)(x, gain, n, eps, unit_offset, out);
}
void l2_normalize(const float* x, int64_t n, float eps, float* out) {
  HWY_DYNAMIC_DISPATCH(L2Normalize)(x, n, eps, out);
}
void softmax(float* x, int64_t n) {
  if (n > 0) HWY_DYNAMIC_DISPATCH(Softmax)(x, n);
}
ExpSum exp_below_max(float* x, int64_t n) { return HWY_DYNAMIC_DISPATCH(ExpBelowMax)(x, n); }
void exp(const float* x, int64_t n, float* out) { HWY_DYNAMIC_DISPATCH(Exp)(x, n, out); }
void sigmoid(const float* x, int64_t n, float* out) { HWY_DYNAMIC_DISPATCH(SigmoidRow)(x, n, out); }
void silu(const float* x, int64_t n, float* out) { HWY_DYNAMIC_DISPATCH(Silu)(x, n, out); }
void softplus(const float* x, int64_t n, float* out) { HWY_DYNAMIC_DISPATCH(Softplus)(x, n, out); }
void relu2(const float* x, int64_t n, float* out) { HWY_DYNAMIC_DISPATCH(Relu2)(x, n, out); }
void max_rows(const float* x, int64_t ldx, int64_t rows, int64_t n, float* out) {
  HWY_DYNAMIC_DISPATCH(MaxRows)(x, ldx, rows, n, out);
}

std::vector<float> rope_inv_freq(int rotary_dim, double theta, const RopeScaling& sc) {
  if (rotary_dim <= 0 || rotary_dim % 2 != 0)
    throw KernelError("rope: rotary_dim " + std::to_string(rotary_dim) + " must be even and positive");
  if (!(theta > 1.0)) throw KernelError("rope: theta " + std::to_string(theta) + " must be > 1");
  if (sc.factor != 0 && !(sc.factor > 0 && sc.high_freq > sc.low_freq && sc.original_context > 0))
    throw KernelError("rope: llama3 scaling needs factor > 0, high_freq > low_freq, original_context > 0");
  const double pi = 3.14159265358979323846;
  std::vector<float> f(size_t(rotary_dim / 2));
  for (int i = 0; i < rotary_dim / 2; ++i) {
    double v = std::pow(theta, -2.0 * i / rotary_dim);
    if (sc.factor != 0) {
      const double wavelen = 2 * pi / v;
      const double low_wavelen = sc.original_context / sc.low_freq;
      const double high_wavelen = sc.original_context / sc.high_freq;
      if (wavelen > low_wavelen) {
        v /= sc.factor;
      } else if (wavelen >= high_wavelen) {
        const double s = (sc.original_context / wavelen - sc.low_freq) / (sc.high_freq - sc.low_freq);
        v = (1 - s) * v / sc.factor + s * v;
      }
    }
    f[size_t(i)] = float(v);
  }
  return f;
}

void rope(float* x, int n_heads, int head_dim, int rotary_dim, const float* inv_freq,
          int64_t pos) {
  if (rotary_dim <= 0 || rotary_dim % 2 != 0 || rotary_dim > head_dim)
    throw KernelError("rope: rotary_dim " + std::to_string(rotary_dim) +
                      " must be even, positive and at most head_dim " + std::to_string(head_dim));
  thread_local std::vector<float> cs;  // cos and sin of this position, grown once
  if (cs.size() < size_t(rotary_dim)) cs.resize(size_t(rotary_dim));
  HWY_DYNAMIC_DISPATCH(Rope)(x, n_heads, head_dim, rotary_dim, inv_freq, pos, cs.data());
}

int64_t rows_at_least(const float* x, int64_t n, float t, int64_t cap, int32_t* idx) {
  return HWY_DYNAMIC_DISPATCH(RowsAtLeast)(x, n, t, cap, idx);
}

void top_k(const float* x, int64_t n, int k, int32_t* idx) {
  if (k < 0 || k > n)
    throw KernelError("top_k: k = " + std::to_string(k) + " outside [0, n = " + std::to_string(n) + "]");
  HWY_DYNAMIC_DISPATCH(TopK)(x, n, k, idx);
}

}  // namespace wren::kernels
#endif  // HWY_ONCE
