// kernels/: activation quantisation, the plain integer dot path, and the run-time choice of
// the SIMD path (quantized_dot.h).
#include "kernels/quantized_dot.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

namespace wren::kernels {

// Per group (in SIMD, quant_hwy.cpp): s = max|x| / 127, q = round_half_even(x / s), and the
// sum of q, which serves q4's +8 offset. The nibble order serves the q4 SIMD paths, which
// unpack 16 bytes into 16 low nibbles (even columns) and 16 high nibbles (odd columns) and
// meet x in the same order.
ActivationRows activation_rows(DType type) { return type == DType::q4 ? kForQ4Rows : kForQ8Rows; }

void quantize_activation(const float* x, int64_t n, int group, QuantizedActivation& out, unsigned rows) {
  if (group <= 0 || n <= 0 || n % group != 0)
    throw KernelError("quantize_activation: group size " + std::to_string(group) +
                      " must be positive and divide the length " + std::to_string(n));
  const int64_t groups = n / group;
  out.n = n;
  out.group = group;
  out.rows = rows & kForAnyRows;
  if (out.q.size() < size_t(n)) out.q.resize(size_t(n));
  if (out.scales.size() < size_t(groups)) out.scales.resize(size_t(groups));
  if (out.sums.size() < size_t(groups)) out.sums.resize(size_t(groups));
  quantized::quantize_activation_groups(x, n, group, out.q.data(), out.scales.data(),
                                        out.sums.data());
  const bool q8 = out.rows & kForQ8Rows, q4 = out.rows & kForQ4Rows;
  if (q4 && group % 32 == 0) {
    if (out.q_nibble_order.size() < size_t(n)) out.q_nibble_order.resize(size_t(n));
    for (int64_t b = 0; b < n; b += 32)
      for (int j = 0; j < 16; ++j) {
        out.q_nibble_order[size_t(b + j)] = out.q[size_t(b + 2 * j)];
        out.q_nibble_order[size_t(b + 16 + j)] = out.q[size_t(b + 2 * j + 1)];
      }
  }
  // The decode-order copies, for groups of 32 (what packed rows have).
  const auto lanes = [&](bool made, const std::vector<int8_t>& from, std::vector<int8_t>& to) {
    if (!made || group != 32) return;
    if (to.size() < size_t(n)) to.resize(size_t(n));
    quantized::decode_order(from.data(), n, 8, to.data());
  };
  lanes(q8, out.q, out.q_lanes);
  lanes(q4, out.q_nibble_order, out.q_nibble_lanes);
}

bool packable(const MatrixView& w) {
  return (w.type == DType::q8 || w.type == DType::q4) && w.group == 32 && w.data;
}

namespace {
// Row src_r of a packed copy of src_rows rows to row dst_r of one of dst_rows rows (of one
// type and width; quantized_dot.h packed_row_offsets). A row in decode order alone is row 0
// of a copy of one row.
void move_packed_row(DType type, int64_t cols, const uint8_t* src, int64_t src_rows, int64_t src_r, uint8_t* dst,
                     int64_t dst_rows, int64_t dst_r) {
  const quantized::PackedRowOffsets from = quantized::packed_row_offsets(type, src_rows, cols, src_r);
  const quantized::PackedRowOffsets to = quantized::packed_row_offsets(type, dst_rows, cols, dst_r);
  const int64_t block_bytes = quantized::packed_block_bytes(type), blocks = cols / 256;
  const int64_t tail_bytes = (type == DType::q4 ? cols / 2 : cols) - blocks * block_bytes;
  for (int64_t b = 0; b < blocks; ++b)
    std::memcpy(dst + to.blocks + b * to.block_stride, src + from.blocks + b * from.block_stride, size_t(block_bytes));
  std::memcpy(dst + to.tail, src + from.tail, size_t(tail_bytes));
}
}  // namespace

void pack_for_dot(const MatrixView& w, uint8_t* out) {
  if (!packable(w))
    throw KernelError("pack_for_dot: a " + std::string(to_string(w.type)) + " matrix of " + std::to_string(w.cols) +
                      " columns, group " + std::to_string(w.group) +
                      " (needs q8 / q4 of group 32)");
  const int64_t row = w.row_bytes();
  const int words = w.type == DType::q8 ? 8 : 4;  // 32 or 16 bytes per group
  std::vector<uint8_t> ordered(static_cast<size_t>(row));
  for (int64_t r = 0; r < w.rows; ++r) {
    quantized::decode_order(static_cast<const uint8_t*>(w.data) + r * row, w.cols, words, ordered.data());
    move_packed_row(w.type, w.cols, ordered.data(), 1, 0, out, w.rows, r);
  }
}

void gather_packed_rows(const MatrixView& w, const int32_t* rows, int64_t n, uint8_t* out) {
  if (!packable(w) || !w.packed)
    throw KernelError("gather_packed_rows: the matrix carries no packed copy");
  for (int64_t k = 0; k < n; ++k) {
    if (rows[k] < 0 || rows[k] >= w.rows)
      throw KernelError("gather_packed_rows: row " + std::to_string(rows[k]) + " outside a matrix of " +
                        std::to_string(w.rows) + " rows");
    move_packed_row(w.type, w.cols, static_cast<const uint8_t*>(w.packed), w.packed_copy_rows(), w.packed_first + rows[k], out,
                    n, k);
  }
}

namespace quantized {

void decode_order(const void* in, int64_t cols, int words, void* out) {
  const auto* src = static_cast<const uint8_t*>(in);
  auto* dst = static_cast<uint8_t*>(out);
  const int64_t groups = cols / 32;
  for (int64_t g = 0; g < groups; g += 8) {
    const int n = int(std::min<int64_t>(8, groups - g));  // 8, or the tail's groups
    for (int l = 0; l < n; ++l)
      for (int k = 0; k < words; ++k) std::memcpy(dst + 4 * (n * k + l), src + 4 * (words * l + k), 4);
    src += 4 * words * n, dst += 4 * words * n;
  }
}

void q8_rows_scalar(const MatrixView& w, const QuantizedActivation& xq, int64_t r0, int64_t r1,
                    float* out) {
  const int G = w.group;
  for (int64_t r = r0; r < r1; ++r) {
    const int8_t* qw = w.q8_row(r);
    const F16* sw = w.row_scales(r);
    float acc = 0;
    for (int64_t g = 0; g < w.groups(); ++g) {
      int32_t isum = 0;
      for (int i = 0; i < G; ++i) isum += int32_t(qw[g * G + i]) * xq.q[size_t(g * G + i)];
      acc += f16_to_f32(sw[g]) * xq.scales[size_t(g)] * float(isum);
    }
    out[r - r0] = acc;
  }
}

void q4_rows_scalar(const MatrixView& w, const QuantizedActivation& xq, int64_t r0, int64_t r1,
                    float* out) {
  const int G = w.group;
  for (int64_t r = r0; r < r1; ++r) {
    const uint8_t* qw = w.q4_row(r);
    const F16* sw = w.row_scales(r);
    float acc = 0;
    for (int64_t g = 0; g < w.groups(); ++g) {
      int32_t isum = 0;  // sum (v + 8) q over the group's G / 2 bytes
      for (int j = 0; j < G / 2; ++j) {
        const uint8_t b = qw[g * G / 2 + j];
        isum += int32_t(b & 0xF) * xq.q[size_t(g * G + 2 * j)] +
                int32_t(b >> 4) * xq.q[size_t(g * G + 2 * j + 1)];
      }
      isum -= 8 * xq.sums[size_t(g)];
      acc += f16_to_f32(sw[g]) * xq.scales[size_t(g)] * float(isum);
    }
    out[r - r0] = acc;
  }
}

void q8_gemm_scalar(const MatrixView& w, const QuantizedActivation* xq, int64_t n_tokens, int64_t r0,
                    int64_t r1, float* y, int64_t ldy) {
  for (int64_t t = 0; t < n_tokens; ++t) q8_rows_scalar(w, xq[t], r0, r1, y + t * ldy);
}

void q4_gemm_scalar(const MatrixView& w, const QuantizedActivation* xq, int64_t n_tokens, int64_t r0,
                    int64_t r1, float* y, int64_t ldy) {
  for (int64_t t = 0; t < n_tokens; ++t) q4_rows_scalar(w, xq[t], r0, r1, y + t * ldy);
}

void q8_scores_scalar(const ScoresArgs& a) {
  for (int64_t v = 0; v < a.n_q; ++v) {
    const int8_t* q = a.q.q + v * a.q.ldq;
    const float factor = a.scale * a.q.scale[v];
    for (int64_t j = 0; j < a.n_rows; ++j) {
      int32_t isum = 0;
      for (int64_t i = 0; i < a.dh; ++i) isum += int32_t(q[i]) * a.k[j][i];
      a.s[v * a.lds + j] = factor * a.k_scale[j] * float(isum);
    }
  }
}

#if !defined(__x86_64__) && !defined(__aarch64__)
PathList arch_paths() { return {nullptr, 0}; }  // no SIMD path for this CPU: scalar only
#endif

namespace {

bool always() { return true; }
constexpr Path kScalar{"scalar", always, q8_rows_scalar, q4_rows_scalar, q8_gemm_scalar, q4_gemm_scalar,
                       q8_scores_scalar};

// The best supported path, or the one set_int8_path forced.
const Path* best_path() {
  const PathList arch = arch_paths();
  for (int i = 0; i < arch.count; ++i)
    if (arch.paths[i].supported()) return &arch.paths[i];
  return &kScalar;
}
std::atomic<const Path*> g_active{nullptr};

const Path& active() {
  const Path* p = g_active.load(std::memory_order_acquire);
  if (!p) {
    p = best_path();
    g_active.store(p, std::memory_order_release);
  }
  return *p;
}

}  // namespace

namespace {
void check_activation(const MatrixView& w, const QuantizedActivation& xq) {
  if (xq.group != w.group || xq.n != w.cols)
    throw KernelError("matvec_range: activation quantised with n " + std::to_string(xq.n) +
                      ", group " + std::to_string(xq.group) + " for a " + to_string(w.type) +
                      " matrix of " + std::to_string(w.cols) + " columns, group " +
                      std::to_string(w.group));
  if (!(xq.rows & activation_rows(w.type)))
    throw KernelError(std::string("matvec_range: activation quantised without the arrangements ") +
                      to_string(w.type) + " rows read");
}
}  // namespace

void gemm_rows(const MatrixView& w, const QuantizedActivation* xq, int64_t n_tokens, int64_t r0,
               int64_t r1, float* y, int64_t ldy) {
  for (int64_t t = 0; t < n_tokens; ++t) check_activation(w, xq[t]);
  const Path& p = active();
  if (w.type == DType::q8) p.q8_gemm(w, xq, n_tokens, r0, r1, y, ldy);
  else if (w.type == DType::q4) p.q4_gemm(w, xq, n_tokens, r0, r1, y, ldy);
  else throw KernelError(std::string("quantized gemm: not a q8 / q4 matrix: ") + to_string(w.type));
}

void dot_rows(const MatrixView& w, const QuantizedActivation& xq, int64_t r0, int64_t r1,
              float* out) {
  check_activation(w, xq);
  const Path& p = active();
  if (w.type == DType::q8) p.q8(w, xq, r0, r1, out);
  else if (w.type == DType::q4) p.q4(w, xq, r0, r1, out);
  else throw KernelError(std::string("quantized dot: not a q8 / q4 matrix: ") + to_string(w.type));
}

}  // namespace quantized

void quantize_heads(const float* x, int64_t n_q, int64_t dh, int8_t* q, float* scale, int32_t* sum) {
  if (n_q <= 0) return;
  if (dh <= 0 || dh > int64_t(1) << 30)
    throw KernelError("quantize_heads: head size " + std::to_string(dh) + " must be in [1, 2^30]");
  quantized::quantize_activation_groups(x, n_q * dh, int(dh), q, scale, sum);
}

void scores_rows_int8(const Int8Heads& q, int64_t n_q, const int8_t* const* k, const float* k_scale,
                      int64_t n_rows, int64_t dh, float scale, float* s, int64_t lds) {
  quantized::active().q8_scores({q, n_q, k, k_scale, n_rows, dh, scale, s, lds});
}

const char* active_int8_path() { return quantized::active().name; }

std::vector<const char*> supported_int8_paths() {
  std::vector<const char*> names;
  const quantized::PathList arch = quantized::arch_paths();
  for (int i = 0; i < arch.count; ++i)
    if (arch.paths[i].supported()) names.push_back(arch.paths[i].name);
  names.push_back(quantized::kScalar.name);
  return names;
}

void set_int8_path(const char* name) {
  using namespace quantized;
  if (!name) {
    g_active.store(best_path());
    return;
  }
  const PathList arch = arch_paths();
  for (int i = 0; i < arch.count; ++i)
    if (std::string(arch.paths[i].name) == name) {
      if (!arch.paths[i].supported())
        throw KernelError(std::string("set_int8_path: this CPU cannot run '") + name + "'");
      g_active.store(&arch.paths[i]);
      return;
    }
  if (std::string(name) == kScalar.name) {
    g_active.store(&kScalar);
    return;
  }
  throw KernelError(std::string("set_int8_path: unknown path '") + name + "'");
}

}  // namespace wren::kernels
