// model/: mHC residual streams (see mhc.h for the equations).
#include "model/mhc.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <stdexcept>
#include <string>

#include "kernels/ops.h"

namespace wren {

namespace {

void check_weights(const MhcWeights& w, int n, int d, int64_t outputs, size_t alphas, const char* what) {
  const auto fail = [&](const std::string& field, const std::string& got, const std::string& want) {
    throw std::runtime_error(std::string(what) + ": " + field + " is " + got + ", expected " + want +
                             " for n = " + std::to_string(n) + " streams of width d = " + std::to_string(d));
  };
  if (w.phi.rows != int64_t(n) * d || w.phi.cols != outputs)
    fail("phi", std::to_string(w.phi.rows) + "x" + std::to_string(w.phi.cols),
         std::to_string(int64_t(n) * d) + "x" + std::to_string(outputs));
  if (present(w.phi_t) && (w.phi_t.rows != outputs || w.phi_t.cols != int64_t(n) * d))
    fail("phi's transposed copy", std::to_string(w.phi_t.rows) + "x" + std::to_string(w.phi_t.cols),
         std::to_string(outputs) + "x" + std::to_string(int64_t(n) * d));
  if (w.alpha.size() != alphas) fail("alpha", std::to_string(w.alpha.size()) + " values", std::to_string(alphas));
  if (w.bias.size() != size_t(outputs)) fail("bias", std::to_string(w.bias.size()) + " values", std::to_string(outputs));
}

// s.m[0:outputs) = r vec(x) phi with r = 1 / sqrt(mean(vec(x)^2) + eps): phi^T vec(x) by rows
// of the transposed copy where the load made one; else the sum of phi's rows weighted by the
// entries of vec(x), which add_rows forms for any storage type. The rows of the transposed
// copy, four to an item, are each dotted whole: any thread count gives the same bits.
void project(const MhcWeights& w, int n, int d, float eps, const float* streams, MhcScratch& s,
             kernels::ThreadPool* pool) {
  const MatrixView& phi = w.phi;
  const int64_t nd = int64_t(n) * d;
  s.reserve(n, d);
  if (s.m.size() < size_t(phi.cols)) s.m.resize(size_t(phi.cols));
  const double ss = kernels::dot(streams, streams, nd);
  const float r = float(1.0 / std::sqrt(ss / double(nd) + double(eps)));
  if (present(w.phi_t)) {  // f32 or bf16 (model.cpp): matvec_range needs no quantised x
    float* m = s.m.data();
    constexpr int64_t kRowsPerItem = 4;  // the f32 / bf16 matvec dots four rows per pass over x
    const int64_t rows = w.phi_t.rows;
    kernels::run_items(pool, (rows + kRowsPerItem - 1) / kRowsPerItem, [&](int64_t i) {
      kernels::matvec_range(w.phi_t, streams, nullptr, m, i * kRowsPerItem, std::min(rows, (i + 1) * kRowsPerItem));
    });
  } else {
    std::fill(s.m.begin(), s.m.begin() + phi.cols, 0.0f);
    kernels::add_rows(phi, s.row_ids.data(), streams, nd, s.m.data(), nullptr);
  }
  for (int64_t o = 0; o < phi.cols; ++o) s.m[size_t(o)] *= r;
}

}  // namespace

void MhcScratch::reserve(int n, int d) {
  const size_t nd = size_t(n) * size_t(d);
  if (row_ids.size() < nd) {
    row_ids.resize(nd);
    std::iota(row_ids.begin(), row_ids.end(), 0);
  }
  if (old.size() < nd) old.resize(nd);
  const size_t outputs = size_t(n) * size_t(n) + 2 * size_t(n);
  if (m.size() < outputs) m.resize(outputs);
  if (rows.size() < size_t(n) + 1) rows.resize(size_t(n) + 1);
  if (weights.size() < size_t(n) * (size_t(n) + 1)) weights.resize(size_t(n) * (size_t(n) + 1));
}

void mhc_init_streams(const float* embedding, int n, int d, float* streams) {
  for (int j = 0; j < n; ++j) std::memcpy(streams + int64_t(j) * d, embedding, sizeof(float) * size_t(d));
}

namespace {

// The rounds in the log domain: each step subtracts a log-sum-exp taken relative to the max,
// so no logit overflows exp and no row or column underflows to all zeros, however far apart.
void sinkhorn_in_logs(float* M, int n, int iters) {
  // log-sum-exp of n values `stride` apart, relative to their max so exp never overflows
  // and the largest term is exactly 1 (the sum is never 0).
  const auto lse = [n](const float* x, int stride) {
    float mx = x[0];
    for (int i = 1; i < n; ++i) mx = std::max(mx, x[i * stride]);
    double sum = 0;
    for (int i = 0; i < n; ++i) sum += std::exp(double(x[i * stride]) - mx);
    return double(mx) + std::log(sum);
  };
  for (int it = 0; it < iters; ++it) {
    for (int j = 0; j < n; ++j) {  // rows: sum_k exp(M[j,k]) = 1
      float* row = M + int64_t(j) * n;
      const double l = lse(row, 1);
      for (int k = 0; k < n; ++k) row[k] = float(row[k] - l);
    }
    for (int k = 0; k < n; ++k) {  // columns: sum_j exp(M[j,k]) = 1
      const double l = lse(M + k, n);
      for (int j = 0; j < n; ++j) M[int64_t(j) * n + k] = float(M[int64_t(j) * n + k] - l);
    }
  }
  for (int i = 0; i < n * n; ++i) M[i] = std::exp(M[i]);
}

// The same rounds on the scaled matrix itself, in double: K = exp(M - max_k M[j,k]) row by
// row (the first step is a row softmax, so a row's offset changes nothing), then each step
// divides a row or a column by its sum. n^2 exponentials in all, where the log domain takes
// 2 n^2 exponentials and 2 n logarithms a round (nenya: 64 boundaries a token, 20 rounds:
// 1.3% of a decode step, every core but one idle). Taken only while every logit is within
// kSpread of its row's max: then every entry is at least e^-kSpread / n after a row step, the
// Sinkhorn scalings stay within that range (Sinkhorn-Knopp's scaling vectors span no more
// than the matrix does), and nothing comes near double's e^-708. False (M untouched) when
// the logits are further apart, not finite, or n is over kMaxStreams.
bool sinkhorn_scaled(float* M, int n, int iters) {
  constexpr int kMaxStreams = 8;
  constexpr double kSpread = 200;
  if (n > kMaxStreams) return false;
  double K[kMaxStreams * kMaxStreams];
  for (int j = 0; j < n; ++j) {
    const float* row = M + int64_t(j) * n;
    const double mx = *std::max_element(row, row + n);
    for (int k = 0; k < n; ++k) {
      const double shifted = double(row[k]) - mx;
      if (!(shifted >= -kSpread)) return false;  // also NaN and infinities
      K[j * n + k] = shifted;
    }
  }
  for (int i = 0; i < n * n; ++i) K[i] = std::exp(K[i]);
  for (int it = 0; it < iters; ++it) {
    for (int j = 0; j < n; ++j) {  // rows: sum_k K[j,k] = 1
      double sum = 0;
      for (int k = 0; k < n; ++k) sum += K[j * n + k];
      for (int k = 0; k < n; ++k) K[j * n + k] /= sum;
    }
    for (int k = 0; k < n; ++k) {  // columns: sum_j K[j,k] = 1
      double sum = 0;
      for (int j = 0; j < n; ++j) sum += K[j * n + k];
      for (int j = 0; j < n; ++j) K[j * n + k] /= sum;
    }
  }
  for (int i = 0; i < n * n; ++i) M[i] = float(K[i]);
  return true;
}

}  // namespace

void sinkhorn(float* M, int n, int iters) {
  if (!sinkhorn_scaled(M, n, iters)) sinkhorn_in_logs(M, n, iters);
}

void mhc_coefficients(const MhcWeights& w, int n, int d, float eps, int iters, const float* streams, MhcBoundary& b,
                      MhcScratch& s, kernels::ThreadPool* pool) {
  const int64_t outputs = int64_t(n) * n + 2 * n;
  check_weights(w, n, d, outputs, 3, "mHC boundary");
  project(w, n, d, eps, streams, s, pool);
  const float* m = s.m.data();
  const float* bias = w.bias.data();
  const float a0 = w.alpha[0], a1 = w.alpha[1], a2 = w.alpha[2];
  b.pre.resize(size_t(n));
  b.post.resize(size_t(n));
  b.C.resize(size_t(n) * size_t(n));
  for (int j = 0; j < n; ++j) {
    b.pre[size_t(j)] = kernels::sigmoid(a0 * m[j] + bias[j]);
    b.post[size_t(j)] = 2.0f * kernels::sigmoid(a1 * m[n + j] + bias[n + j]);
  }
  for (int i = 0; i < n * n; ++i) b.C[size_t(i)] = a2 * m[2 * n + i] + bias[2 * n + i];
  sinkhorn(b.C.data(), n, iters);
}

namespace {

// y[k d : +d] = sum_j w[k ldw + j] rows[j] for k < outputs, rows of width d: each row is read
// once for all outputs and the terms are added in row order (kernels::weighted_sum_tile), the
// same sums as one axpy per term.
void mix_rows(const float* w, int64_t ldw, int outputs, const float* const* rows, int n_rows, int d, float* y) {
  std::fill(y, y + int64_t(outputs) * d, 0.0f);
  kernels::weighted_sum_tile(w, ldw, outputs, {.f32 = rows}, n_rows, d, y, d);
}

// s.rows[j] = x_j, the n streams.
const float* const* stream_rows(int n, int d, const float* streams, MhcScratch& s) {
  for (int j = 0; j < n; ++j) s.rows[size_t(j)] = streams + int64_t(j) * d;
  return s.rows.data();
}

}  // namespace

void mhc_read(const MhcBoundary& b, int n, int d, const float* streams, float* h, MhcScratch& s) {
  s.reserve(n, d);
  mix_rows(b.pre.data(), n, 1, stream_rows(n, d, streams, s), n, d, h);
}

void mhc_write(const MhcBoundary& b, int n, int d, const float* f, float* streams, MhcScratch& s) {
  s.reserve(n, d);
  float* old = s.old.data();
  std::memcpy(old, streams, sizeof(float) * size_t(n) * size_t(d));
  // Row 0 is f, row 1 + j the old x_j; new stream k weighs them post_k and C[j,k].
  const int64_t ldw = n + 1;
  float* w = s.weights.data();
  s.rows[0] = f;
  for (int j = 0; j < n; ++j) s.rows[size_t(j + 1)] = old + int64_t(j) * d;
  for (int k = 0; k < n; ++k) {
    w[k * ldw] = b.post[size_t(k)];
    for (int j = 0; j < n; ++j) w[k * ldw + 1 + j] = b.C[size_t(j) * size_t(n) + size_t(k)];
  }
  mix_rows(w, ldw, n, s.rows.data(), n + 1, d, streams);
}

void mhc_readout(StreamReadout readout, const MhcWeights& w, int n, int d, float eps, const float* streams, float* y,
                 MhcScratch& s, float* weights, kernels::ThreadPool* pool) {
  s.reserve(n, d);
  float* g = s.old.data();  // n gate values; `old` is free outside mhc_write
  if (readout == StreamReadout::sum) {
    std::fill(g, g + n, 1.0f);
  } else {
    check_weights(w, n, d, n, 1, "mHC read-out");
    project(w, n, d, eps, streams, s, pool);
    for (int j = 0; j < n; ++j) g[j] = kernels::sigmoid(w.alpha[0] * s.m[size_t(j)] + w.bias[size_t(j)]) + kMhcReadoutEps;
  }
  mix_rows(g, n, 1, stream_rows(n, d, streams, s), n, d, y);
  if (weights) std::copy(g, g + n, weights);
}

}  // namespace wren
