// The LM head pre-score (model/lm_head.h): the 4-bit copy and its error bounds, made once;
// per token the pre-score, the selection by bounds, and the exact rescoring of the candidates.
#include "model/lm_head.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <atomic>

#include "kernels/ops.h"
#include "model/region.h"

namespace wren {

namespace {

constexpr int kGroup = 32;

double norm2(const float* v, int64_t n) {
  double s = 0;
  for (int64_t j = 0; j < n; ++j) s += double(v[j]) * double(v[j]);
  return std::sqrt(s);
}

// ||w||_2, ||w4||_2 and ||w - w4||_2 of one row in one pass, in double. Four partial sums
// per norm: one running sum is a chain of dependent adds, which made this loop most of the
// pre-score's build time (a 128K-row head is built at every load).
struct RowNorms {
  double w = 0, w4 = 0, diff = 0;
};
RowNorms row_norms(const float* w, const float* w4, int64_t n) {
  double sw[4] = {}, s4[4] = {}, sd[4] = {};
  int64_t j = 0;
  for (; j + 4 <= n; j += 4)
    for (int k = 0; k < 4; ++k) {
      const double a = w[j + k], b = w4[j + k], d = double(w[j + k] - w4[j + k]);
      sw[k] += a * a, s4[k] += b * b, sd[k] += d * d;
    }
  for (; j < n; ++j) {
    const double a = w[j], b = w4[j], d = double(w[j] - w4[j]);
    sw[0] += a * a, s4[0] += b * b, sd[0] += d * d;
  }
  return {std::sqrt((sw[0] + sw[1]) + (sw[2] + sw[3])), std::sqrt((s4[0] + s4[1]) + (s4[2] + s4[3])),
          std::sqrt((sd[0] + sd[1]) + (sd[2] + sd[3]))};
}

// e_G = sqrt(G) / 254 (lm_head.h), rounded up: the share of ||x|| that rounding x to 8 bits
// per group of G can move.
double rounding_share(int group) { return std::sqrt(double(group)) / 254.0 * 1.01; }

}  // namespace

LmHeadBound lm_head_bound(const MatrixView& head) {
  if (kernels::f32_activations()) return {1.0f, 0.0f};
  const double e32 = rounding_share(kGroup);
  const bool integer_head = head.type == kernels::DType::q8 || head.type == kernels::DType::q4;
  const double d = !integer_head ? e32 : head.group == kGroup ? 0.0 : rounding_share(head.group) + e32;
  return {float(1.0 + e32), float(d)};
}

namespace {

// Rows [r0, r1) of the 4-bit copy and their bounds c_r, ||W_r||.
void prescore_rows(const MatrixView& head, int64_t r0, int64_t r1, LmHeadPrescore& pre) {
  const int64_t cols = head.cols;
  const double gamma = double(cols + 4) * 0x1p-24;
  const size_t n = size_t(cols);
  std::vector<float> w(n), w4(n);
  for (int64_t r = r0; r < r1; ++r) {
    kernels::decode_row(head, r, w.data());
    uint8_t* qr = pre.q4.values.data() + r * (cols / 2);
    kernels::F16* sr = pre.q4.scales.data() + r * (cols / kGroup);
    kernels::quantize_q4_row(w.data(), cols, kGroup, qr, sr);
    kernels::dequantize_q4_row(qr, sr, cols, kGroup, w4.data());
    // Rounded up a little: the bound must hold, the norms' sums of squares are in double.
    const RowNorms norms = row_norms(w.data(), w4.data(), cols);
    pre.c[size_t(r)] = float((norms.diff + gamma * (norms.w + norms.w4)) * 1.0001);
    pre.w_norm[size_t(r)] = float(norms.w * 1.0001);
  }
}

}  // namespace

std::shared_ptr<const LmHeadPrescore> make_lm_head_prescore(const MatrixView& head) {
  if (!present(head) || head.type == kernels::DType::q4 || head.cols % kGroup != 0) return nullptr;
  auto pre = std::make_shared<LmHeadPrescore>();
  const int64_t rows = head.rows, cols = head.cols;
  kernels::Matrix& q = pre->q4;
  q.type = kernels::DType::q4, q.rows = rows, q.cols = cols, q.group = kGroup;
  q.values.resize(size_t(rows * cols / 2));
  q.scales.resize(size_t(rows * (cols / kGroup)));
  pre->c.resize(size_t(rows)), pre->w_norm.resize(size_t(rows));
  // Made once at load, on every core: each row depends on that row alone.
  kernels::parallel_rows(&kernels::ThreadPool::shared(0), rows, 64,
                         [&](int64_t r0, int64_t r1) { prescore_rows(head, r0, r1, *pre); });
  pre->scored = q.view();
  pre->packed.pack(pre->scored);
  return pre;
}

void LmHeadScratch::reserve(const MatrixView& head) {
  const size_t rows = size_t(head.rows), cap = rows / 4 + 1;
  upper.resize(rows), lower.resize(rows), candidates.resize(rows);
  gathered.resize(cap * size_t(head.row_bytes()));
  if (head.packed) gathered_packed.resize(cap * size_t(head.row_bytes()));
  gathered_scales.resize(cap * size_t(head.groups()));
  rescored.resize(cap);
}

namespace {

// y = W x in one region of pieces (model/region.h). The head is a token's largest matrix:
// kernels::matvec's one half per thread left the first to finish waiting ~90 us a token for
// the other (nenya, 2 threads: 2.9% of the head's time), pieces end within one of each other.
void head_rows(const MatrixView& w, const float* x, float* y, kernels::ThreadPool* pool) {
  const Product product{w, x, y};
  run_products(std::span(&product, 1), pool);
}

}  // namespace

LmHeadRead lm_head_logits(const MatrixView& head, const LmHeadPrescore* pre, const LmHeadMode& mode, const float* x,
                          float* logits, LmHeadScratch& s, kernels::ThreadPool* pool) {
  const int64_t rows = head.rows;
  LmHeadRead read;
  const int keep = int(std::clamp<int64_t>(mode.keep, 1, rows));
  if (!mode.prescore || !pre || size_t(rows) > s.upper.size()) {
    head_rows(head, x, logits, pool);
    read.rescored = rows, read.bytes = double(head.bytes());
    return read;
  }
  // Pre-score and bounds in one region: as each piece's rows get p_r, the same item turns them
  // into their bounds, lower_r = p_r - b_r (s.lower) and upper_r = p_r + b_r (s.upper, in
  // place), and sets their logits to -inf; the caller alone then only selects. A NaN bound
  // (a NaN in x or in the head) sends the token to the exact head, whose logits carry the NaN.
  const MatrixView& q4 = pre->scored;
  const float x_norm = float(norm2(x, head.cols) * 1.0001);
  const LmHeadBound terms = lm_head_bound(head);
  float *upper = s.upper.data(), *lower = s.lower.data();
  std::atomic<bool> nan{false};
  auto bounds = [&](int64_t, int64_t r0, int64_t r1) {
    bool seen = false;
    for (int64_t r = r0; r < r1; ++r) {
      const float p = upper[r], b = terms.of(*pre, r, x_norm);
      lower[r] = p - b, upper[r] = p + b, logits[r] = -INFINITY;
      seen |= lower[r] != lower[r];
    }
    if (seen) nan.store(true, std::memory_order_relaxed);
  };
  const Product prescore{q4, x, upper};
  run_products(std::span(&prescore, 1), pool, rows_done(bounds));
  // L, the keep-th largest lower bound; candidates: every row whose upper bound reaches it.
  float bar = NAN;
  if (!nan.load(std::memory_order_relaxed)) {
    kernels::top_k(lower, rows, keep, s.candidates.data());  // best first
    bar = lower[s.candidates[size_t(keep - 1)]];
  }
  const int64_t cap = int64_t(s.rescored.size());
  const int64_t n = kernels::rows_at_least(upper, rows, bar, cap, s.candidates.data());
  read.bytes = double(q4.bytes());
  if (n > cap || n == 0) {  // no saving left (or a NaN bound): the exact head
    head_rows(head, x, logits, pool);
    read.rescored = rows, read.bytes += double(head.bytes());
    return read;
  }
  // Rescore the candidates in the stored precision: gather their rows into one small matrix
  // and run the same kernel the exact head runs, so each value equals the exact head's.
  const size_t row_bytes = size_t(head.row_bytes()), groups = size_t(head.groups());
  for (int64_t k = 0; k < n; ++k) {
    const int64_t r = s.candidates[size_t(k)];
    std::memcpy(s.gathered.data() + size_t(k) * row_bytes, static_cast<const uint8_t*>(head.data) + r * int64_t(row_bytes),
                row_bytes);
    if (groups) std::copy_n(head.row_scales(r), groups, s.gathered_scales.data() + size_t(k) * groups);
  }
  // The candidates' packed rows as the packed copy of a matrix of those rows alone.
  if (head.packed) kernels::gather_packed_rows(head, s.candidates.data(), n, s.gathered_packed.data());
  MatrixView sub = head;
  sub.data = s.gathered.data(), sub.scales = groups ? s.gathered_scales.data() : nullptr, sub.rows = n;
  sub.packed = head.packed ? s.gathered_packed.data() : nullptr, sub.packed_first = 0, sub.packed_rows = 0;
  head_rows(sub, x, s.rescored.data(), pool);
  for (int64_t k = 0; k < n; ++k) logits[s.candidates[size_t(k)]] = s.rescored[size_t(k)];
  read.prescored = true, read.rescored = n;
  read.bytes += double(n) * double(row_bytes + groups * sizeof(kernels::F16));
  return read;
}

}  // namespace wren
