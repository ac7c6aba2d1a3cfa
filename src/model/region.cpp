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

int64_t item_rows(const MatrixView& w) {
  const int64_t row = std::max<int64_t>(1, w.bytes() / std::max<int64_t>(1, w.rows));
  const int64_t rows = std::max<int64_t>(1, kItemBytes / row);
  return std::max(kItemRowAlign, rows / kItemRowAlign * kItemRowAlign);
}

void run_products(std::span<const Product> products, kernels::ThreadPool* pool) {
  const int64_t n = int64_t(products.size());
  // first[i]: the first item of product i, the items of all products numbered in order;
  // step[i]: its rows per item. The caller's buffers, grown once.
  thread_local std::vector<int64_t> first_buf, step_buf;
  first_buf.resize(size_t(n + 1)), step_buf.resize(size_t(n));
  int64_t *first = first_buf.data(), *step = step_buf.data();
  first[0] = 0;
  for (int64_t i = 0; i < n; ++i) {
    const MatrixView& w = products[size_t(i)].w;
    step[i] = present(w) ? item_rows(w) : 1;
    first[i + 1] = first[i] + (present(w) ? (w.rows + step[i] - 1) / step[i] : 0);
  }
  // Each distinct (x, group) of the quantised products is quantised once, on the caller,
  // before the items run: xq_of[i] indexes activation[] (-1: f32 / bf16, none needed).
  thread_local std::vector<kernels::QuantizedActivation> activation;
  thread_local std::vector<int64_t> xq_buf;
  xq_buf.assign(size_t(n), -1);
  int64_t n_activations = 0;
  for (int64_t i = 0; i < n; ++i) {
    const Product& p = products[size_t(i)];
    if (!present(p.w) || !quantised(p.w)) continue;
    for (int64_t j = 0; j < i && xq_buf[size_t(i)] < 0; ++j)
      if (xq_buf[size_t(j)] >= 0 && products[size_t(j)].x == p.x && products[size_t(j)].w.group == p.w.group &&
          products[size_t(j)].w.cols == p.w.cols)
        xq_buf[size_t(i)] = xq_buf[size_t(j)];
    if (xq_buf[size_t(i)] >= 0) continue;
    if (size_t(n_activations) == activation.size()) activation.emplace_back();
    kernels::quantize_activation(p.x, p.w.cols, p.w.group, activation[size_t(n_activations)]);
    xq_buf[size_t(i)] = n_activations++;
  }
  // The items run on other threads too: they see the caller's buffers through pointers
  // (a thread_local named inside the lambda would be the worker's own).
  const int64_t* xq_of = xq_buf.data();
  const kernels::QuantizedActivation* xq = activation.data();
  kernels::run_items(pool, first[n], [&](int64_t item) {
    const int64_t i = std::upper_bound(first + 1, first + n + 1, item) - (first + 1);
    const Product& p = products[size_t(i)];
    const int64_t r0 = (item - first[i]) * step[i];
    product_rows(p, xq_of[i] >= 0 ? xq + xq_of[i] : nullptr, r0, std::min(p.w.rows, r0 + step[i]));
  });
}

}  // namespace wren
