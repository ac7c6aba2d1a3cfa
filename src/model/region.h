// model/: parallel regions of the forward pass. Decode streams every weight once per token,
// so both cores must read memory in every layer; a region gathers all the products a step
// can run at once (a layer's Q/K/V/gate projections, every chosen expert's gate and up
// rows, ...) and wakes the pool once for all of them, where one call per matrix would wake
// it for each and leave the small ones to a single core.
//
// Each product's rows are cut into items of about kItemBytes of weights (run_products: pieces
// of a quarter of that, taken up to four at a time); the cut depends on the shapes alone,
// never on the thread count, and each item computes its rows whole, so a region gives the
// same bits with any number of threads.
#pragma once

#include <algorithm>
#include <cstdint>
#include <span>

#include "kernels/threads.h"
#include "model/tensor.h"

namespace wren {

// One product of a region: y = W x, or y += alpha W x when `accumulate`.
struct Product {
  MatrixView w;
  const float* x = nullptr;
  float* y = nullptr;
  float alpha = 1.0f;
  bool accumulate = false;
};

// Weights per item: large enough that taking an item costs nothing next to streaming it,
// small enough that the last items even out the threads.
constexpr int64_t kItemBytes = int64_t(128) << 10;
// Item rows are multiples of 16, so two threads never write one cache line of y.
constexpr int64_t kItemRowAlign = 16;

// Decode's regions (run_products, and ffn.cpp's gated down projections) cut their items in
// kItemPieces pieces and let a thread take up to kItemPieces at once (ThreadPool::run_ranges,
// a run mapped to rows by piece_rows): one call still streams ~kItemBytes, and the threads
// end a region within a piece of each other.
constexpr int64_t kItemPieces = 4;

// Rows per item of one product: about `bytes` of its weights, a multiple of kItemRowAlign.
int64_t item_rows(const MatrixView& w, int64_t bytes = kItemBytes);

// The pieces [begin, end) of a region whose output k has pieces [first[k], first[k + 1]) of
// step[k] rows (rows[k] in all), as row ranges: f(k, r0, r1) once per output the run touches.
template <class F>
void piece_rows(const int64_t* first, const int64_t* step, const int64_t* rows, int64_t n, int64_t begin,
                int64_t end, F&& f) {
  for (int64_t k = std::upper_bound(first + 1, first + n + 1, begin) - (first + 1); k < n && first[k] < end; ++k) {
    const int64_t r0 = (std::max(begin, first[k]) - first[k]) * step[k];
    const int64_t r1 = std::min(rows[k], (std::min(end, first[k + 1]) - first[k]) * step[k]);
    if (r0 < r1) f(k, r0, r1);
  }
}

// Work on rows a region has just computed, in the same item: rows_done(i, r0, r1) after rows
// [r0, r1) of product i are written, on the thread that wrote them. A plain function and its
// context, so a token's region allocates nothing.
struct RowsDone {
  void (*fn)(void* ctx, int64_t product, int64_t r0, int64_t r1) = nullptr;
  void* ctx = nullptr;
  void operator()(int64_t product, int64_t r0, int64_t r1) const { if (fn) fn(ctx, product, r0, r1); }
};
template <class F>  // F(product, r0, r1), kept alive by the caller for the region
RowsDone rows_done(F& f) {
  return {[](void* ctx, int64_t i, int64_t r0, int64_t r1) { (*static_cast<F*>(ctx))(i, r0, r1); }, &f};
}

// Every product of the list, in one region of `pool` (on the caller when null). Products
// without rows are skipped.
void run_products(std::span<const Product> products, kernels::ThreadPool* pool, RowsDone after = {});

// One product of a batched region: Y = X W^T for the n rows of a batch (prefill's chunk, or
// one token of each of several sessions): y[t * ldy + r] = W[r,:] . x[t * ldx :], or with
// `accumulate` y[t * ldy + r] += alpha W[r,:] . x_t. The weights are read once for all rows.
struct BatchProduct {
  MatrixView w;
  const float* x = nullptr;
  int64_t ldx = 0;
  float* y = nullptr;
  int64_t ldy = 0;
  int64_t n = 0;
  float alpha = 1.0f;
  bool accumulate = false;
};

// run_products for batches: the items are the same row cuts, each computing its rows for
// every token of its batch (kernels' matmul_range: tiles of weight rows kept in cache while
// the tokens meet them). Each distinct (x, n, group) is quantised once, before the items run.
void run_batch_products(std::span<const BatchProduct> products, kernels::ThreadPool* pool);

}  // namespace wren
