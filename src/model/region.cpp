// model/: one parallel region over the row items of several products (see region.h).
#include "model/region.h"

#include <algorithm>
#include <vector>

#include "kernels/ops.h"

namespace wren {

namespace {

bool quantised(const MatrixView& w) { return w.type == kernels::DType::q8 || w.type == kernels::DType::q4; }

// Rows [r0, r1) of one product; xq is its input quantised for the integer path (q8 / q4).
void product_rows(const Product& p, const kernels::QuantizedActivation* xq, int64_t r0, int64_t r1) {
  if (p.accumulate)
    kernels::matvec_add_range(p.w, p.x, xq, p.alpha, p.y, r0, r1);
  else
    kernels::matvec_range(p.w, p.x, xq, p.y, r0, r1);
}

}  // namespace

int64_t item_rows(const MatrixView& w, int64_t bytes) {
  const int64_t row = std::max<int64_t>(1, w.bytes() / std::max<int64_t>(1, w.rows));
  const int64_t rows = std::max<int64_t>(1, bytes / row);
  return std::max(kItemRowAlign, rows / kItemRowAlign * kItemRowAlign);
}

void run_products(std::span<const Product> products, kernels::ThreadPool* pool, RowsDone after) {
  const int64_t n = int64_t(products.size());
  // first[i]: the first piece of product i, the pieces of all products numbered in order;
  // step[i]: its rows per piece. The caller's buffers, grown once.
  thread_local std::vector<int64_t> first_buf, step_buf, rows_buf;
  first_buf.resize(size_t(n + 1)), step_buf.resize(size_t(n)), rows_buf.resize(size_t(n));
  int64_t *first = first_buf.data(), *step = step_buf.data(), *rows = rows_buf.data();
  first[0] = 0;
  for (int64_t i = 0; i < n; ++i) {
    const MatrixView& w = products[size_t(i)].w;
    step[i] = present(w) ? item_rows(w, kItemBytes / kItemPieces) : 1;
    rows[i] = present(w) ? w.rows : 0;
    first[i + 1] = first[i] + (rows[i] + step[i] - 1) / step[i];
  }
  // Each distinct (x, group) of the quantised products is quantised once, on the caller,
  // before the items run, for the precisions of the rows that read it: xq_of[i] indexes
  // activation[] (-1: f32 / bf16, none needed), made from product quantised_by[a].
  thread_local std::vector<kernels::QuantizedActivation> activation;
  thread_local std::vector<int64_t> xq_buf, quantised_by;
  thread_local std::vector<unsigned> rows_of;
  xq_buf.assign(size_t(n), -1);
  quantised_by.clear(), rows_of.clear();
  for (int64_t i = 0; i < n; ++i) {
    const Product& p = products[size_t(i)];
    if (!present(p.w) || !quantised(p.w)) continue;
    for (int64_t j = 0; j < i && xq_buf[size_t(i)] < 0; ++j)
      if (xq_buf[size_t(j)] >= 0 && products[size_t(j)].x == p.x && products[size_t(j)].w.group == p.w.group &&
          products[size_t(j)].w.cols == p.w.cols)
        xq_buf[size_t(i)] = xq_buf[size_t(j)];
    if (xq_buf[size_t(i)] < 0) {
      xq_buf[size_t(i)] = int64_t(quantised_by.size());
      quantised_by.push_back(i), rows_of.push_back(0);
    }
    rows_of[size_t(xq_buf[size_t(i)])] |= kernels::activation_rows(p.w.type);
  }
  if (activation.size() < quantised_by.size()) activation.resize(quantised_by.size());
  for (size_t a = 0; a < quantised_by.size(); ++a) {
    const Product& p = products[size_t(quantised_by[a])];
    kernels::quantize_activation(p.x, p.w.cols, p.w.group, activation[a], rows_of[a]);
  }
  // The items run on other threads too: they see the caller's buffers through pointers
  // (a thread_local named inside the lambda would be the worker's own).
  const int64_t* xq_of = xq_buf.data();
  const kernels::QuantizedActivation* xq = activation.data();
  // A run of pieces [begin, end) is one call per product it touches, over that product's rows.
  kernels::run_ranges(pool, first[n], kItemPieces, [&](int64_t begin, int64_t end) {
    piece_rows(first, step, rows, n, begin, end, [&](int64_t i, int64_t r0, int64_t r1) {
      product_rows(products[size_t(i)], xq_of[i] >= 0 ? xq + xq_of[i] : nullptr, r0, r1);
      after(i, r0, r1);
    });
  });
}

namespace {

// y[t ldy + r] (+)= alpha W[r,:] . x_t for r in [r0, r1): the dots of up to kBlock rows go
// through a stack buffer when they are added.
void batch_rows(const BatchProduct& p, const kernels::QuantizedActivation* xq, int64_t r0, int64_t r1) {
  const kernels::ActivationBatch x{p.x, p.ldx, xq, p.n};
  if (!p.accumulate) {
    kernels::matmul_range(p.w, x, p.y, p.ldy, r0, r1);
    return;
  }
  constexpr int64_t kBlock = 64, kTokens = 16;
  float dots[kTokens * kBlock];
  for (int64_t t0 = 0; t0 < p.n; t0 += kTokens) {
    const int64_t nt = std::min(kTokens, p.n - t0);
    const kernels::ActivationBatch part{p.x + t0 * p.ldx, p.ldx, xq ? xq + t0 : nullptr, nt};
    for (int64_t b = r0; b < r1; b += kBlock) {
      const int64_t e = std::min(r1, b + kBlock);
      kernels::matmul_range(p.w.slice_rows(b, e - b), part, dots, kBlock, 0, e - b);
      for (int64_t t = 0; t < nt; ++t)
        for (int64_t r = b; r < e; ++r) p.y[(t0 + t) * p.ldy + r] += p.alpha * dots[t * kBlock + (r - b)];
    }
  }
}

}  // namespace

void run_batch_products(std::span<const BatchProduct> products, kernels::ThreadPool* pool) {
  const int64_t n = int64_t(products.size());
  thread_local std::vector<int64_t> first_buf, step_buf, xq_buf;
  first_buf.resize(size_t(n + 1)), step_buf.resize(size_t(n));
  int64_t *first = first_buf.data(), *step = step_buf.data();
  first[0] = 0;
  for (int64_t i = 0; i < n; ++i) {
    const BatchProduct& p = products[size_t(i)];
    const bool some = present(p.w) && p.n > 0;
    step[i] = some ? item_rows(p.w) : 1;
    first[i + 1] = first[i] + (some ? (p.w.rows + step[i] - 1) / step[i] : 0);
  }
  // activation[a]: one quantised batch per distinct (x, n, group, cols), grown once.
  thread_local std::vector<std::vector<kernels::QuantizedActivation>> activation;
  xq_buf.assign(size_t(n), -1);
  int64_t n_activations = 0;
  for (int64_t i = 0; i < n; ++i) {
    const BatchProduct& p = products[size_t(i)];
    if (!present(p.w) || p.n <= 0 || !quantised(p.w) || kernels::f32_activations()) continue;
    for (int64_t j = 0; j < i && xq_buf[size_t(i)] < 0; ++j) {
      const BatchProduct& q = products[size_t(j)];
      if (xq_buf[size_t(j)] >= 0 && q.x == p.x && q.n == p.n && q.ldx == p.ldx && q.w.group == p.w.group &&
          q.w.cols == p.w.cols)
        xq_buf[size_t(i)] = xq_buf[size_t(j)];
    }
    if (xq_buf[size_t(i)] >= 0) continue;
    if (size_t(n_activations) == activation.size()) activation.emplace_back();
    kernels::quantize_batch(p.x, p.n, p.w.cols, p.ldx, p.w.group, activation[size_t(n_activations)]);
    xq_buf[size_t(i)] = n_activations++;
  }
  const int64_t* xq_of = xq_buf.data();
  const std::vector<kernels::QuantizedActivation>* xq = activation.data();
  kernels::run_items(pool, first[n], [&](int64_t item) {
    const int64_t i = std::upper_bound(first + 1, first + n + 1, item) - (first + 1);
    const BatchProduct& p = products[size_t(i)];
    const int64_t r0 = (item - first[i]) * step[i];
    batch_rows(p, xq_of[i] >= 0 ? xq[xq_of[i]].data() : nullptr, r0, std::min(p.w.rows, r0 + step[i]));
  });
}

}  // namespace wren
