// kernels/: scalar reference kernels. Each is the equation of its ops.h counterpart written
// out directly; sums run in double so that the reference is the more accurate side.
#include "kernels/reference.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

namespace wren::kernels::ref {

// ---- Codecs ---------------------------------------------------------------------------

namespace {

// max |x_i| over a group, NaN if any x_i is not finite (group_scale rejects it).
float group_max_abs(const float* xg, int group) {
  float max_abs = 0;
  for (int i = 0; i < group; ++i) {
    if (!std::isfinite(xg[i])) max_abs = NAN;
    if (!std::isnan(max_abs)) max_abs = std::max(max_abs, std::fabs(xg[i]));
  }
  return max_abs;
}

}  // namespace

void quantize_q8_row(const float* x, int64_t n, int group, int8_t* q, F16* scales) {
  check_groups("quantize_q8_row", n, group, false);
  for (int64_t g = 0; g < n / group; ++g) {
    const float* xg = x + g * group;
    const float max_abs = group_max_abs(xg, group);
    const float s = group_scale(max_abs, 127.0f, &scales[g]);
    for (int i = 0; i < group; ++i) {
      const float v = s > 0 ? std::nearbyint(xg[i] / s) : 0.0f;  // ties to even
      q[g * group + i] = int8_t(std::clamp(v, -127.0f, 127.0f));
    }
  }
}

void dequantize_q8_row(const int8_t* q, const F16* scales, int64_t n, int group, float* out) {
  for (int64_t i = 0; i < n; ++i) out[i] = f16_to_f32(scales[i / group]) * float(q[i]);
}

void quantize_q4_row(const float* x, int64_t n, int group, uint8_t* q, F16* scales) {
  check_groups("quantize_q4_row", n, group, true);
  for (int64_t g = 0; g < n / group; ++g) {
    const float* xg = x + g * group;
    const float max_abs = group_max_abs(xg, group);
    const float s = group_scale(max_abs, 7.0f, &scales[g]);
    for (int i = 0; i < group; i += 2) {
      int nib[2];
      for (int k = 0; k < 2; ++k) {
        const float v = s > 0 ? std::nearbyint(xg[i + k] / s) : 0.0f;
        nib[k] = int(std::clamp(v, -7.0f, 7.0f)) + 8;
      }
      q[(g * group + i) / 2] = uint8_t(nib[0] | (nib[1] << 4));
    }
  }
}

void dequantize_q4_row(const uint8_t* q, const F16* scales, int64_t n, int group, float* out) {
  for (int64_t i = 0; i < n; ++i) {
    const int nibble = (i % 2 == 0) ? (q[i / 2] & 0xF) : (q[i / 2] >> 4);
    out[i] = f16_to_f32(scales[i / group]) * float(nibble - 8);
  }
}

void f32_to_bf16_row(const float* x, int64_t n, BF16* out) {
  for (int64_t i = 0; i < n; ++i) out[i] = f32_to_bf16(x[i]);
}

void bf16_to_f32_row(const BF16* x, int64_t n, float* out) {
  for (int64_t i = 0; i < n; ++i) out[i] = bf16_to_f32(x[i]);
}

// ---- Matrix products -------------------------------------------------------------------

float weight(const MatrixView& w, int64_t r, int64_t c) {
  switch (w.type) {
    case DType::f32: return w.f32_row(r)[c];
    case DType::bf16: return bf16_to_f32(w.bf16_row(r)[c]);
    case DType::q8: return f16_to_f32(w.row_scales(r)[c / w.group]) * float(w.q8_row(r)[c]);
    case DType::q4: {
      const uint8_t b = w.q4_row(r)[c / 2];
      const int v = (c % 2 == 0 ? (b & 0xF) : (b >> 4)) - 8;
      return f16_to_f32(w.row_scales(r)[c / w.group]) * float(v);
    }
    case DType::f16: break;
  }
  throw KernelError("ref::weight: unsupported matrix type");
}

float dot_row(const MatrixView& w, int64_t row, const float* x) {
  double s = 0;
  for (int64_t c = 0; c < w.cols; ++c) s += double(weight(w, row, c)) * x[c];
  return float(s);
}

double dot_row_quantized(const MatrixView& w, int64_t row, const QuantizedActivation& xq) {
  double s = 0;
  for (int64_t c = 0; c < w.cols; ++c)
    s += double(weight(w, row, c)) * double(xq.scales[size_t(c / xq.group)]) * xq.q[size_t(c)];
  return s;
}

void matvec(const MatrixView& w, const float* x, float* y) {
  for (int64_t r = 0; r < w.rows; ++r) y[r] = ref::dot_row(w, r, x);
}

void matvec_add(const MatrixView& w, const float* x, float alpha, float* y) {
  for (int64_t r = 0; r < w.rows; ++r) y[r] += alpha * ref::dot_row(w, r, x);
}

void add_rows(const MatrixView& w, const int32_t* rows, const float* coeffs, int64_t n_rows,
              float* y) {
  for (int64_t i = 0; i < n_rows; ++i)
    for (int64_t c = 0; c < w.cols; ++c) y[c] += coeffs[i] * weight(w, rows[i], c);
}

void matmul(const MatrixView& w, const float* x, int64_t n_tokens, float* y) {
  for (int64_t t = 0; t < n_tokens; ++t) ref::matvec(w, x + t * w.cols, y + t * w.rows);
}

// ---- Vector primitives ---------------------------------------------------------------

float dot(const float* a, const float* b, int64_t n) {
  double s = 0;
  for (int64_t i = 0; i < n; ++i) s += double(a[i]) * b[i];
  return float(s);
}

void axpy(float a, const float* x, int64_t n, float* y) {
  for (int64_t i = 0; i < n; ++i) y[i] += a * x[i];
}

void axpby(float a, const float* x, float b, int64_t n, float* y) {
  for (int64_t i = 0; i < n; ++i) y[i] = float(double(a) * x[i] + double(b) * y[i]);
}

void state_products(const float* S, int64_t rows, int64_t cols, const float* a, const float* b, float* ya, float* yb) {
  for (int64_t c = 0; c < cols; ++c) {
    double sa = 0, sb = 0;
    for (int64_t r = 0; r < rows; ++r) sa += double(a[r]) * S[r * cols + c], sb += double(b[r]) * S[r * cols + c];
    ya[c] = float(sa), yb[c] = float(sb);
  }
}

void state_decay_add(float* S, int64_t rows, int64_t cols, const float* decay, const float* k, const float* delta) {
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c)
      S[r * cols + c] = float(double(decay[r]) * S[r * cols + c] + double(k[r]) * delta[c]);
}

void rmsnorm(const float* x, const float* gain, int64_t n, float eps, bool unit_offset,
             float* out) {
  double ss = 0;
  for (int64_t i = 0; i < n; ++i) ss += double(x[i]) * x[i];
  const double r = 1.0 / std::sqrt(ss / double(n) + eps);
  for (int64_t i = 0; i < n; ++i) {
    const double g = gain ? (unit_offset ? 1.0 + gain[i] : gain[i]) : 1.0;
    out[i] = float(x[i] * r * g);
  }
}

void l2_normalize(const float* x, int64_t n, float eps, float* out) {
  double ss = 0;
  for (int64_t i = 0; i < n; ++i) ss += double(x[i]) * x[i];
  const double r = 1.0 / std::sqrt(ss + eps);
  for (int64_t i = 0; i < n; ++i) out[i] = float(x[i] * r);
}

void softmax(float* x, int64_t n) {
  const float m = *std::max_element(x, x + n);
  if (m == -INFINITY) {
    std::fill(x, x + n, 0.0f);
    return;
  }
  double sum = 0;
  for (int64_t i = 0; i < n; ++i) sum += std::exp(double(x[i]) - m);
  for (int64_t i = 0; i < n; ++i) x[i] = float(std::exp(double(x[i]) - m) / sum);
}

ExpSum exp_below_max(float* x, int64_t n) {
  const float m = n ? *std::max_element(x, x + n) : -INFINITY;
  if (m == -INFINITY) {
    std::fill(x, x + n, 0.0f);
    return {m, 0.0};
  }
  double sum = 0;
  for (int64_t i = 0; i < n; ++i) sum += x[i] = float(std::exp(double(x[i]) - m));
  return {m, sum};
}

void exp(const float* x, int64_t n, float* out) {
  for (int64_t i = 0; i < n; ++i) out[i] = float(std::exp(double(x[i])));
}

void sigmoid(const float* x, int64_t n, float* out) {
  for (int64_t i = 0; i < n; ++i) out[i] = float(1.0 / (1.0 + std::exp(-double(x[i]))));
}

void silu(const float* x, int64_t n, float* out) {
  for (int64_t i = 0; i < n; ++i) out[i] = float(x[i] / (1.0 + std::exp(-double(x[i]))));
}

void softplus(const float* x, int64_t n, float* out) {
  for (int64_t i = 0; i < n; ++i) {
    const double v = x[i];
    out[i] = float(std::max(v, 0.0) + std::log1p(std::exp(-std::fabs(v))));
  }
}

void relu2(const float* x, int64_t n, float* out) {
  for (int64_t i = 0; i < n; ++i) out[i] = x[i] > 0 ? x[i] * x[i] : 0.0f;
}

void rope(float* x, int n_heads, int head_dim, int rotary_dim, const float* inv_freq,
          int64_t pos) {
  const int h = rotary_dim / 2;
  for (int head = 0; head < n_heads; ++head) {
    float* v = x + int64_t(head) * head_dim;
    for (int i = 0; i < h; ++i) {
      const double a = double(pos) * inv_freq[i];
      const double c = std::cos(a), s = std::sin(a), x1 = v[i], x2 = v[i + h];
      v[i] = float(x1 * c - x2 * s);
      v[i + h] = float(x2 * c + x1 * s);
    }
  }
}

void top_k(const float* x, int64_t n, int k, int32_t* idx) {
  std::vector<int32_t> order(static_cast<size_t>(n));
  std::iota(order.begin(), order.end(), 0);
  // "a before b": a is a number and b is NaN or smaller. Stable sort keeps lower index first.
  std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) {
    return !std::isnan(x[a]) && (std::isnan(x[b]) || x[a] > x[b]);
  });
  std::copy(order.begin(), order.begin() + k, idx);
}

int64_t rows_at_least(const float* x, int64_t n, float t, int64_t cap, int32_t* idx) {
  int64_t found = 0;
  for (int64_t i = 0; i < n && found <= cap; ++i)
    if (x[i] >= t) idx[found++] = int32_t(i);
  return found;
}

}  // namespace wren::kernels::ref
