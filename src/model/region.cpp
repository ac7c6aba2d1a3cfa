// model/: one parallel region over the row items of several products (see region.h).
#include "model/region.h"

#include <algorithm>
#include <vector>

#include "kernels/ops.h"

namespace wren {

namespace {

// Rows [r0, r1) of one product.
void product_rows(const Product& p, int64_t r0, int64_t r1) {
  const MatrixView rows = p.w.slice_rows(r0, r1 - r0);
  if (p.accumulate)
    kernels::matvec_add(rows, p.x, p.alpha, p.y + r0, nullptr);
  else
    kernels::matvec(rows, p.x, p.y + r0, nullptr);
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
  kernels::run_items(pool, first[n], [&](int64_t item) {
    const int64_t i = std::upper_bound(first + 1, first + n + 1, item) - (first + 1);
    const Product& p = products[size_t(i)];
    const int64_t r0 = (item - first[i]) * step[i];
    product_rows(p, r0, std::min(p.w.rows, r0 + step[i]));
  });
}

}  // namespace wren
