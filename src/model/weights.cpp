#include "model/weights.h"

#include <cmath>
#include <cstdio>
#include <cstring>
#include <stdexcept>

#include "config/init_rule.h"
#include "config/splitmix.h"
#include "kernels/huge_pages.h"
#include "kernels/ops.h"

namespace wren {

namespace {


uint64_t fnv1a(const std::string& s) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : s) h = (h ^ c) * 0x100000001b3ull;
  return h;
}

// A uniform in (0, 1) from the top 53 bits.
double uniform(uint64_t& s) { return (double(splitmix64(s) >> 11) + 0.5) * (1.0 / 9007199254740992.0); }

// n values of N(0, std^2) by Box-Muller, both of its outputs: each pair of uniforms (u1, u2)
// gives r cos(2 pi u2) and r sin(2 pi u2), r = sqrt(-2 ln u1), two independent normals (an odd
// n uses the cosine alone for its last). Initialising a 10B-parameter model spends nearly all
// its time here, so one log and one sincos serve two values.
void normal_row(double std, uint64_t& s, float* row, int64_t n) {
  for (int64_t j = 0; j < n; j += 2) {
    const double u1 = uniform(s), u2 = uniform(s);
    const double r = std * std::sqrt(-2.0 * std::log(u1));
    double sin_t, cos_t;
    ::sincos(6.283185307179586 * u2, &sin_t, &cos_t);
    row[j] = float(r * cos_t);
    if (j + 1 < n) row[j + 1] = float(r * sin_t);
  }
}

// Index of the sublayer an mHC boundary belongs to: 2 layer (+1 for the FFN).
int mhc_sublayer(const std::string& name) {
  int layer = 0;
  if (std::sscanf(name.c_str(), "layers.%d.", &layer) != 1) return 0;
  return 2 * layer + (name.find("ffn_mhc") != std::string::npos ? 1 : 0);
}

// mHC bias [n^2 + 2n] (NOTES.md 2, seed 002 figure 5-6): pre reads one stream per sublayer,
// cycling with depth (sigmoid(+-3) = 0.95 / 0.05); post = 2 sigmoid(0) = 1 writes every
// stream equally; the mixing logits give Sinkhorn a diagonal of ~0.95 (e^4.04 = 57 = 0.95 / (0.05 / 3)).
void mhc_bias(const ModelConfig& c, const TensorInfo& t, float* out) {
  const int n = c.residual.streams;
  if (t.numel() == n) {  // the final read-out gate: equal weights
    for (int j = 0; j < n; ++j) out[j] = 0.0f;
    return;
  }
  const int read = mhc_sublayer(t.name) % n;
  for (int j = 0; j < n; ++j) out[j] = j == read ? 3.0f : -3.0f;
  for (int j = 0; j < n; ++j) out[n + j] = 0.0f;
  for (int r = 0; r < n; ++r)
    for (int k = 0; k < n; ++k) out[2 * n + r * n + k] = r == k ? float(std::log(57.0)) : 0.0f;
}

}  // namespace

void init_rows(const ModelConfig& c, const TensorInfo& t, uint64_t seed, int64_t first, int64_t count, float* out) {
  const InitRule rule = init_rule(c, t);
  const int64_t cols = matrix_cols(t);
  if (rule.kind == InitKind::mhc_bias) {
    if (first != 0 || count != 1) throw std::invalid_argument(t.name + ": an mHC bias is one row");
    mhc_bias(c, t, out);
    return;
  }
  const uint64_t base = fnv1a(t.name) ^ (seed * 0x9E3779B97F4A7C15ull);
  for (int64_t r = 0; r < count; ++r) {
    uint64_t s = base + uint64_t(first + r) * 0xD1B54A32D192ED03ull;
    float* row = out + r * cols;
    if (rule.kind == InitKind::normal) {
      normal_row(rule.std, s, row, cols);
      continue;
    }
    for (int64_t j = 0; j < cols; ++j) {
      switch (rule.kind) {
        case InitKind::constant: row[j] = float(rule.value); break;
        case InitKind::uniform_log: row[j] = float(std::log(rule.lo + (rule.hi - rule.lo) * uniform(s))); break;
        case InitKind::inv_softplus: {
          const double dt = std::exp(std::log(rule.lo) + (std::log(rule.hi) - std::log(rule.lo)) * uniform(s));
          row[j] = float(dt + std::log(-std::expm1(-dt)));  // softplus^-1(dt) = log(e^dt - 1)
          break;
        }
        case InitKind::normal:
        case InitKind::mhc_bias: break;
      }
    }
  }
}

kernels::DType storage_type(const TensorInfo& t, kernels::DType matrices, int group) {
  const bool large = t.role == TensorRole::matrix || t.role == TensorRole::lookup;
  if (!large || t.component == Component::router) return kernels::DType::f32;
  const bool grouped = matrices == kernels::DType::q8 || matrices == kernels::DType::q4;
  if (grouped && matrix_cols(t) % group) return kernels::DType::bf16;  // rows too short for a group
  return matrices;
}

OwnedWeights init_weights(const ModelConfig& c, const WeightMap& w, uint64_t seed, kernels::DType matrices, int group) {
  OwnedWeights out;
  for (const TensorInfo& t : w.tensors) {
    const int64_t rows = matrix_rows(t), cols = matrix_cols(t);
    std::vector<float> values(size_t(rows * cols));
    init_rows(c, t, seed, 0, rows, values.data());
    out.set(t.name, kernels::encode_matrix(values.data(), rows, cols, storage_type(t, matrices, group), group));
  }
  return out;
}

const kernels::Matrix* OwnedWeights::find(const std::string& name) const {
  auto it = tensors_.find(name);
  return it == tensors_.end() ? nullptr : &it->second;
}

const kernels::Matrix& OwnedWeights::at(const TensorInfo& t) const {
  const kernels::Matrix* m = find(t.name);
  if (!m) throw std::runtime_error("weights: missing tensor " + t.name);
  if (m->rows != matrix_rows(t) || m->cols != matrix_cols(t))
    throw std::runtime_error("weights: tensor " + t.name + " has " + std::to_string(m->rows) + "x" +
                             std::to_string(m->cols) + " values, expected " + std::to_string(matrix_rows(t)) + "x" +
                             std::to_string(matrix_cols(t)) + " from the weight map");
  return *m;
}

kernels::MatrixView OwnedWeights::matrix(const TensorInfo& t) const { return at(t).view(); }

// The values and then the scales in one buffer of the huge-page arena: a decode step's
// streams then cross no 4 KiB page boundaries, nor any page of the mapped file.
void PackedWeights::pack(kernels::MatrixView& w) {
  if (!kernels::packable(w) || w.packed) return;
  const size_t n = size_t(w.rows * w.row_bytes()), scales = size_t(w.rows * w.groups()) * sizeof(kernels::F16);
  uint8_t* values = arena_.allocate(n + scales);
  kernels::pack_for_dot(w, values);
  std::memcpy(values + n, w.scales, scales);  // n is a multiple of 16 (group 32): the f16 copy is aligned
  w.packed = values;
  w.scales = reinterpret_cast<const kernels::F16*>(values + n);
  bytes_ += double(n + scales);
}

void PackedWeights::keep_rows(kernels::MatrixView& w) {
  if (!w.data || w.packed) return;
  const size_t n = size_t(w.rows * w.row_bytes());
  const size_t scales = w.scales ? size_t(w.rows * w.groups()) * sizeof(kernels::F16) : 0;
  const size_t at = (n + 15) / 16 * 16;  // the scales' place, aligned
  uint8_t* values = arena_.allocate(at + scales);
  std::memcpy(values, w.data, n);
  if (scales) std::memcpy(values + at, w.scales, scales);
  w.data = values;
  if (scales) w.scales = reinterpret_cast<const kernels::F16*>(values + at);
  bytes_ += double(at + scales);
}

kernels::MatrixView PackedWeights::transposed(const kernels::MatrixView& w) {
  const bool f32 = w.type == kernels::DType::f32;
  if (!f32 && w.type != kernels::DType::bf16)
    throw std::runtime_error("transposed: a " + std::string(kernels::to_string(w.type)) + " matrix (needs f32 or bf16)");
  const size_t size = f32 ? sizeof(float) : sizeof(kernels::BF16), n = size_t(w.rows * w.cols) * size;
  uint8_t* out = arena_.allocate(n);
  const auto* in = static_cast<const uint8_t*>(w.data);
  for (int64_t r = 0; r < w.rows; ++r)
    for (int64_t c = 0; c < w.cols; ++c) std::memcpy(out + size * size_t(c * w.rows + r), in + size * size_t(r * w.cols + c), size);
  bytes_ += double(n);
  return f32 ? kernels::MatrixView::f32(reinterpret_cast<const float*>(out), w.cols, w.rows)
             : kernels::MatrixView::bf16(reinterpret_cast<const kernels::BF16*>(out), w.cols, w.rows);
}

std::vector<float> WeightSource::floats(const TensorInfo& t) const {
  const kernels::MatrixView v = matrix(t);
  std::vector<float> out(size_t(v.rows * v.cols));
  for (int64_t r = 0; r < v.rows; ++r) kernels::decode_row(v, r, out.data() + r * v.cols);
  return out;
}

}  // namespace wren
