// kernels/: scalar half-precision conversions, matrix views, and whole-matrix encoding.
// The per-row codecs live in quant_hwy.cpp (SIMD) and reference.cpp (scalar).
#include "kernels/types.h"

#include <cmath>
#include <cstring>

namespace wren::kernels {

namespace {

uint32_t float_bits(float x) {
  uint32_t b;
  std::memcpy(&b, &x, 4);
  return b;
}
float bits_float(uint32_t b) {
  float x;
  std::memcpy(&x, &b, 4);
  return x;
}

std::string shape_text(int64_t rows, int64_t cols) {
  return "[" + std::to_string(rows) + ", " + std::to_string(cols) + "]";
}

void check_shape(const char* what, const void* data, int64_t rows, int64_t cols) {
  if (rows < 0 || cols <= 0)
    throw KernelError(std::string(what) + " matrix: bad shape " + shape_text(rows, cols));
  if (!data && rows > 0) throw KernelError(std::string(what) + " matrix: null data");
}

}  // namespace

const char* to_string(DType t) {
  switch (t) {
    case DType::f32: return "f32";
    case DType::bf16: return "bf16";
    case DType::f16: return "f16";
    case DType::q8: return "q8";
    case DType::q4: return "q4";
  }
  return "?";
}

// bf16 = the high half of the f32 bits. Round to nearest even: add 0x7FFF plus the lowest
// kept bit, then truncate; a carry into the exponent is the correct rounding up.
BF16 f32_to_bf16(float x) {
  const uint32_t b = float_bits(x);
  if ((b & 0x7FFFFFFFu) > 0x7F800000u) return BF16{uint16_t((b >> 16) | 0x0040u)};
  return BF16{uint16_t((b + 0x7FFFu + ((b >> 16) & 1u)) >> 16)};
}

float bf16_to_f32(BF16 v) { return bits_float(uint32_t(v.bits) << 16); }

// f16 = sign | 5-bit exponent (bias 15) | 10-bit mantissa. f32 has bias 127, so a normal
// f16 exponent is the f32 exponent - 112.
F16 f32_to_f16(float x) {
  const uint32_t b = float_bits(x);
  const uint16_t sign = uint16_t((b >> 16) & 0x8000u);
  const uint32_t a = b & 0x7FFFFFFFu;
  if (a > 0x7F800000u) return F16{uint16_t(sign | 0x7E00u)};  // NaN stays (quiet) NaN
  // 65520 is halfway between 65504 (odd mantissa) and 65536: it and above round to inf.
  if (a >= 0x477FF000u) return F16{uint16_t(sign | 0x7C00u)};
  if (a < 0x38800000u) {  // below 2^-14: f16 subnormal, a multiple of 2^-24
    const float units = std::nearbyint(std::ldexp(bits_float(a), 24));  // ties to even
    return F16{uint16_t(sign | uint16_t(units))};
  }
  const uint32_t r = a - (112u << 23);
  return F16{uint16_t(sign | ((r + 0xFFFu + ((r >> 13) & 1u)) >> 13))};
}

void f32_to_f16_row(const float* x, int64_t n, F16* out) {
  for (int64_t i = 0; i < n; ++i) {
    out[i] = f32_to_f16(x[i]);
    if ((out[i].bits & 0x7FFFu) == 0x7C00u && std::isfinite(x[i]))
      throw KernelError("f16 row: value " + std::to_string(x[i]) + " at " + std::to_string(i) +
                        " is beyond f16's range (|x| < 65520)");
  }
}

F16 f16_round_up(float x) {
  F16 h = f32_to_f16(x);
  if (f16_to_f32(h) < x) ++h.bits;  // positive: the next code is the next larger value
  return h;
}

void check_groups(const char* what, int64_t n, int group, bool q4) {
  if (group <= 0 || n <= 0 || n % group != 0)
    throw KernelError(std::string(what) + ": group size " + std::to_string(group) +
                      " must be positive and divide the row length " + std::to_string(n));
  if (q4 && group % 2 != 0)
    throw KernelError(std::string(what) + ": group size " + std::to_string(group) +
                      " must be even (two 4-bit values per byte)");
}

// s = max|x| / qmax rounded up to an f16, so that |x| / s <= qmax and no value clips.
float group_scale(float max_abs, float qmax, F16* stored) {
  const float s = max_abs / qmax;
  if (!(s <= 65504.0f))
    throw KernelError("quantize: group max |x| = " + std::to_string(max_abs) +
                      " is not finite or too large for an f16 scale");
  *stored = f16_round_up(s);
  return f16_to_f32(*stored);
}

MatrixView MatrixView::f32(const float* w, int64_t rows, int64_t cols) {
  check_shape("f32", w, rows, cols);
  return MatrixView{DType::f32, w, nullptr, rows, cols, 0};
}

MatrixView MatrixView::bf16(const BF16* w, int64_t rows, int64_t cols) {
  check_shape("bf16", w, rows, cols);
  return MatrixView{DType::bf16, w, nullptr, rows, cols, 0};
}

MatrixView MatrixView::q8(const int8_t* q, const F16* scales, int64_t rows, int64_t cols,
                          int group) {
  check_shape("q8", q, rows, cols);
  check_groups("q8 matrix", cols, group, false);
  if (!scales && rows > 0) throw KernelError("q8 matrix: null scales");
  return MatrixView{DType::q8, q, scales, rows, cols, group};
}

MatrixView MatrixView::q4(const uint8_t* q, const F16* scales, int64_t rows, int64_t cols,
                          int group) {
  check_shape("q4", q, rows, cols);
  check_groups("q4 matrix", cols, group, true);
  if (!scales && rows > 0) throw KernelError("q4 matrix: null scales");
  return MatrixView{DType::q4, q, scales, rows, cols, group};
}

int64_t MatrixView::row_bytes() const {
  switch (type) {
    case DType::f32: return cols * 4;
    case DType::bf16:
    case DType::f16: return cols * 2;
    case DType::q8: return cols;
    case DType::q4: return cols / 2;
  }
  return 0;
}

int64_t MatrixView::bytes() const { return rows * (row_bytes() + groups() * 2); }

MatrixView MatrixView::slice_rows(int64_t first, int64_t count) const {
  if (first < 0 || count < 0 || first + count > rows)
    throw KernelError("slice_rows: rows [" + std::to_string(first) + ", " +
                      std::to_string(first + count) + ") outside a matrix of " +
                      std::to_string(rows) + " rows");
  MatrixView v = *this;
  v.data = static_cast<const uint8_t*>(data) + first * row_bytes();
  if (scales) v.scales = scales + first * groups();
  if (packed) v.packed_first = packed_first + first, v.packed_rows = packed_copy_rows();
  v.rows = count;
  return v;
}

MatrixView Matrix::view() const {
  switch (type) {
    case DType::f32:
      return MatrixView::f32(reinterpret_cast<const float*>(values.data()), rows, cols);
    case DType::bf16:
      return MatrixView::bf16(reinterpret_cast<const BF16*>(values.data()), rows, cols);
    case DType::q8:
      return MatrixView::q8(reinterpret_cast<const int8_t*>(values.data()), scales.data(), rows,
                            cols, group);
    case DType::q4: return MatrixView::q4(values.data(), scales.data(), rows, cols, group);
    case DType::f16: break;
  }
  throw KernelError("matrix of type f16 is not supported (f16 is a scale type)");
}

Matrix encode_matrix(const float* w, int64_t rows, int64_t cols, DType type, int group) {
  check_shape(to_string(type), w, rows, cols);
  Matrix m;
  m.type = type;
  m.rows = rows;
  m.cols = cols;
  const bool quantized = type == DType::q8 || type == DType::q4;
  m.group = quantized ? (group ? group : kDefaultGroup) : 0;
  if (quantized) check_groups(to_string(type), cols, m.group, type == DType::q4);
  if (type == DType::f16) throw KernelError("encode_matrix: f16 is a scale type, not a matrix type");
  const int64_t row_bytes = MatrixView{type, nullptr, nullptr, rows, cols, m.group}.row_bytes();
  m.values.resize(size_t(rows * row_bytes));
  if (quantized) m.scales.resize(size_t(rows * (cols / m.group)));
  for (int64_t r = 0; r < rows; ++r) {
    const float* x = w + r * cols;
    uint8_t* out = m.values.data() + r * row_bytes;
    F16* s = quantized ? m.scales.data() + r * (cols / m.group) : nullptr;
    switch (type) {
      case DType::f32: std::memcpy(out, x, size_t(row_bytes)); break;
      case DType::bf16: f32_to_bf16_row(x, cols, reinterpret_cast<BF16*>(out)); break;
      case DType::q8: quantize_q8_row(x, cols, m.group, reinterpret_cast<int8_t*>(out), s); break;
      case DType::q4: quantize_q4_row(x, cols, m.group, out, s); break;
      case DType::f16: break;
    }
  }
  return m;
}

void decode_row(const MatrixView& w, int64_t r, float* out) {
  switch (w.type) {
    case DType::f32: std::memcpy(out, w.f32_row(r), size_t(w.cols) * 4); break;
    case DType::bf16: bf16_to_f32_row(w.bf16_row(r), w.cols, out); break;
    case DType::q8: dequantize_q8_row(w.q8_row(r), w.row_scales(r), w.cols, w.group, out); break;
    case DType::q4: dequantize_q4_row(w.q4_row(r), w.row_scales(r), w.cols, w.group, out); break;
    case DType::f16: throw KernelError("decode_row: f16 matrices are not supported");
  }
}

}  // namespace wren::kernels
