// model/: Nenya's gated engram (see engram_gate.h for the equations).
#include "model/engram_gate.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <stdexcept>
#include <string>

#include "kernels/ops.h"
#include "model/engram.h"
#include "model/region.h"

namespace wren {

namespace {

void check(bool ok, const std::string& field, int64_t got, int64_t want) {
  if (!ok)
    throw std::runtime_error("gated engram: " + field + " is " + std::to_string(got) + ", expected " +
                             std::to_string(want));
}

void check_shapes(const EngramGateWeights& w, const EngramHasher& hasher, int n, int d, const EngramGateState& st,
                  size_t context) {
  const int64_t nd = int64_t(n) * d;
  check(w.tables.rows == hasher.total_rows(), "tables rows", w.tables.rows, hasher.total_rows());
  const int64_t width = int64_t(hasher.tables()) * w.tables.cols;
  check(w.w_value.rows == d, "w_value rows", w.w_value.rows, d);
  check(w.w_value.cols == width, "w_value cols", w.w_value.cols, width);
  check(w.w_key.rows == nd, "w_key rows", w.w_key.rows, nd);
  check(w.w_key.cols == width, "w_key cols", w.w_key.cols, width);
  check(int64_t(w.key_norm.size()) == nd, "key_norm size", int64_t(w.key_norm.size()), nd);
  check(int64_t(w.stream_norm.size()) == nd, "stream_norm size", int64_t(w.stream_norm.size()), nd);
  check(st.n == n && st.d == d, "state streams x width", int64_t(st.n) * st.d, nd);
  check(int64_t(w.conv.size()) == int64_t(d) * st.kernel, "conv size", int64_t(w.conv.size()),
        int64_t(d) * st.kernel);
  check(int64_t(context) == hasher.max_order(), "context length", int64_t(context), hasher.max_order());
}

}  // namespace

void EngramGateState::init(int n_streams, int width, int conv_kernel) {
  if (n_streams < 1 || width < 1 || conv_kernel < 1)
    throw std::runtime_error("gated engram state: streams, width and conv kernel must be >= 1, got " +
                             std::to_string(n_streams) + ", " + std::to_string(width) + ", " +
                             std::to_string(conv_kernel));
  n = n_streams;
  d = width;
  kernel = conv_kernel;
  history.assign(size_t(n) * size_t(kernel - 1) * size_t(d), 0.0f);
}

void EngramGateState::reset() { std::fill(history.begin(), history.end(), 0.0f); }

void engram_gate_add(const EngramGateWeights& w, const EngramHasher& hasher, std::span<const int32_t> context,
                     float* streams, int n, int d, float eps, bool unit_offset, EngramGateState& state,
                     EngramGateScratch& s, kernels::ThreadPool* pool) {
  check_shapes(w, hasher, n, d, state, context.size());
  s.e.resize(size_t(w.w_value.cols));
  s.rows.resize(size_t(hasher.tables()));
  s.v.resize(size_t(d));
  s.k.resize(size_t(int64_t(n) * d));

  engram_lookup(hasher, w.tables, context, s.e.data(), s.rows);
  // v and all n keys in one region; the gate itself (norms, dots, the conv) runs here.
  const Product projections[] = {{w.w_value, s.e.data(), s.v.data()}, {w.w_key, s.e.data(), s.k.data()}};
  run_products(projections, pool);
  engram_gate_apply(w, {s.v.data(), s.k.data()}, streams, n, d, eps, unit_offset, state, s);
}

void engram_gate_apply(const EngramGateWeights& w, EngramGateRow row, float* streams, int n, int d, float eps,
                       bool unit_offset, EngramGateState& state, EngramGateScratch& s) {
  check(state.n == n && state.d == d, "state streams x width", int64_t(state.n) * state.d, int64_t(n) * d);
  check(w.w_value.rows == d && w.w_key.rows == int64_t(n) * d, "w_key rows", w.w_key.rows, int64_t(n) * d);
  const int K = state.kernel;
  s.xn.resize(size_t(d));
  s.u.resize(size_t(d));
  s.alpha.resize(size_t(n));
  const float inv_sqrt_d = 1.0f / std::sqrt(float(d));
  for (int st = 0; st < n; ++st) {
    float* x = streams + int64_t(st) * d;
    float* k = row.k + int64_t(st) * d;
    kernels::rmsnorm(x, w.stream_norm.data() + int64_t(st) * d, d, eps, unit_offset, s.xn.data());
    kernels::rmsnorm(k, w.key_norm.data() + int64_t(st) * d, d, eps, unit_offset, k);
    const float score = kernels::dot(s.xn.data(), k, d) * inv_sqrt_d;
    const float a = kernels::sigmoid(score);
    s.alpha[size_t(st)] = a;

    // u = a v; x += conv over (history oldest first, then u): tap i < K-1 reads the value
    // K-1-i tokens back, tap K-1 the current one.
    float* u = s.u.data();
    for (int c = 0; c < d; ++c) u[c] = a * row.v[c];
    float* hist = state.history.data() + int64_t(st) * (K - 1) * d;
    for (int c = 0; c < d; ++c) {
      const float* wc = w.conv.data() + int64_t(c) * K;
      float y = wc[K - 1] * u[c];
      for (int i = 0; i < K - 1; ++i) y += wc[i] * hist[int64_t(i) * d + c];
      x[c] += y;
    }
    if (K > 1) {  // drop the oldest, append u
      std::memmove(hist, hist + d, sizeof(float) * size_t(K - 2) * size_t(d));
      std::memcpy(hist + int64_t(K - 2) * d, u, sizeof(float) * size_t(d));
    }
  }
}

void engram_gate_batch_reserve(const EngramGateWeights& w, const EngramHasher& hasher, int64_t n, EngramGateBatch& b) {
  b.width = w.w_value.cols, b.d = w.w_value.rows, b.nd = w.w_key.rows;
  const auto grow = [](auto& v, int64_t size) {
    if (v.size() < size_t(size)) v.resize(size_t(size));
  };
  grow(b.e, n * b.width), grow(b.v, n * b.d), grow(b.k, n * b.nd);
  b.rows.resize(size_t(hasher.tables()));
}

void engram_gate_batch_project(const EngramGateWeights& w, int64_t n, EngramGateBatch& b, kernels::ThreadPool* pool) {
  const BatchProduct projections[] = {{w.w_value, b.e.data(), b.width, b.v.data(), b.d, n},
                                      {w.w_key, b.e.data(), b.width, b.k.data(), b.nd, n}};
  run_batch_products(projections, pool);
}

}  // namespace wren
