// Nenya's gated engram (model/engram_gate): equals a direct double-precision transcription of
// NOTES.md 2 over a sequence (conv state carried), adds nothing with a zero value projection,
// and a reset state behaves as a fresh one.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "config/engram_hash.h"
#include "model/engram_gate.h"

#include "test_util.h"

namespace wren {
namespace {

using testing_util::normal;

// A small gated-add engram: 2 orders x 2 heads of 4-value rows (width 16), n streams of width d.
struct Fixture {
  EngramSpec spec;
  int n = 3, d = 8, K = 4;
  std::vector<float> tables, w_value, w_key;
  EngramGateWeights w;
  explicit Fixture(uint32_t seed, int streams = 3) : n(streams) {
    spec.orders = {2, 3};
    spec.heads_per_order = 2;
    spec.rows = 37;
    spec.row_dim = 4;
    spec.placement = EngramPlacement::gated_add;
    spec.conv_kernel = K;
    spec.seed = 5;
    int64_t total = 0;
    for (int64_t r : engram_table_rows(spec)) total += r;
    const int width = spec.width();
    tables = normal(size_t(total * spec.row_dim), 1.0f, seed + 1);
    w_value = normal(size_t(d * width), 0.4f, seed + 2);
    w_key = normal(size_t(n * d * width), 0.4f, seed + 3);
    w.tables = kernels::MatrixView::f32(tables.data(), total, spec.row_dim);
    w.w_value = kernels::MatrixView::f32(w_value.data(), d, width);
    w.w_key = kernels::MatrixView::f32(w_key.data(), int64_t(n) * d, width);
    w.key_norm = normal(size_t(n * d), 0.3f, seed + 4);
    w.stream_norm = normal(size_t(n * d), 0.3f, seed + 5);
    for (auto& g : w.key_norm) g += 1.0f;
    for (auto& g : w.stream_norm) g += 1.0f;
    w.conv = normal(size_t(d * K), 0.5f, seed + 6);
  }
};

std::vector<int32_t> context_at(const std::vector<int32_t>& tokens, int t, int order) {
  std::vector<int32_t> c(static_cast<size_t>(order));
  for (int k = 0; k < order; ++k) {
    const int p = t - (order - 1) + k;
    c[size_t(k)] = p >= 0 ? tokens[size_t(p)] : EngramHasher::kPad;
  }
  return c;
}

std::vector<double> rmsnorm(const double* x, const float* g, int d, double eps) {
  double ss = 0;
  for (int i = 0; i < d; ++i) ss += x[i] * x[i];
  const double r = 1.0 / std::sqrt(ss / d + eps);
  std::vector<double> out(static_cast<size_t>(d));
  for (int i = 0; i < d; ++i) out[size_t(i)] = x[i] * r * g[i];
  return out;
}

TEST(EngramGate, EqualsDirectTranscriptionOverASequence) {
  const Fixture f(3);
  const int n = f.n, d = f.d, K = f.K, width = f.spec.width();
  const double eps = 1e-6;
  const EngramHasher hasher(f.spec, 1);
  const std::vector<int32_t> tokens = {5, 17, 5, 17, 99, 3, 3, 3, 42, 5};

  EngramGateState state;
  state.init(n, d, K);
  EngramGateScratch scratch;
  // u history of the transcription: u[t][s][c].
  std::vector<std::vector<double>> u_hist;
  for (int t = 0; t < int(tokens.size()); ++t) {
    const std::vector<float> x0 = normal(static_cast<size_t>(n * d), 1.0f, 1000 + uint32_t(t));
    std::vector<float> x = x0;
    const std::vector<int32_t> ctx = context_at(tokens, t, hasher.max_order());
    engram_gate_add(f.w, hasher, ctx, x.data(), n, d, float(eps), false, state, scratch);

    // e: concatenated rows, as the hasher names them.
    std::vector<int64_t> rows(static_cast<size_t>(hasher.tables()));
    hasher.rows(ctx, rows);
    std::vector<double> e;
    for (int64_t r : rows)
      for (int c = 0; c < f.spec.row_dim; ++c) e.push_back(f.tables[size_t(r * f.spec.row_dim + c)]);
    ASSERT_EQ(int(e.size()), width);
    std::vector<double> v(static_cast<size_t>(d), 0.0), u(static_cast<size_t>(n * d));
    for (int c = 0; c < d; ++c)
      for (int i = 0; i < width; ++i) v[size_t(c)] += f.w_value[size_t(c * width + i)] * e[size_t(i)];
    for (int s = 0; s < n; ++s) {
      std::vector<double> k(static_cast<size_t>(d), 0.0), xs(static_cast<size_t>(d));
      for (int c = 0; c < d; ++c) {
        for (int i = 0; i < width; ++i) k[size_t(c)] += f.w_key[size_t((s * d + c) * width + i)] * e[size_t(i)];
        xs[size_t(c)] = x0[size_t(s * d + c)];
      }
      const auto xn = rmsnorm(xs.data(), f.w.stream_norm.data() + s * d, d, eps);
      const auto kn = rmsnorm(k.data(), f.w.key_norm.data() + s * d, d, eps);
      double dot = 0;
      for (int c = 0; c < d; ++c) dot += xn[size_t(c)] * kn[size_t(c)];
      const double alpha = 1.0 / (1.0 + std::exp(-dot / std::sqrt(double(d))));
      EXPECT_NEAR(scratch.alpha[size_t(s)], alpha, 1e-5);
      for (int c = 0; c < d; ++c) u[size_t(s * d + c)] = alpha * v[size_t(c)];
    }
    u_hist.push_back(u);
    // x_s += sum_i conv[c, i] u_{t-(K-1)+i}, zero before the first token.
    for (int s = 0; s < n; ++s)
      for (int c = 0; c < d; ++c) {
        double y = x0[size_t(s * d + c)];
        for (int i = 0; i < K; ++i) {
          const int p = t - (K - 1) + i;
          if (p >= 0) y += f.w.conv[size_t(c * K + i)] * u_hist[size_t(p)][size_t(s * d + c)];
        }
        EXPECT_NEAR(x[size_t(s * d + c)], y, 1e-4) << "token " << t << " stream " << s << " channel " << c;
      }
  }
}

TEST(EngramGate, ZeroValueProjectionAddsNothing) {
  Fixture f(8);
  std::fill(f.w_value.begin(), f.w_value.end(), 0.0f);
  const EngramHasher hasher(f.spec, 14);
  EngramGateState state;
  state.init(f.n, f.d, f.K);
  EngramGateScratch scratch;
  const std::vector<int32_t> tokens = {1, 2, 3, 4, 5, 6};
  for (int t = 0; t < int(tokens.size()); ++t) {
    const std::vector<float> x0 = normal(static_cast<size_t>(f.n * f.d), 1.0f, 50 + uint32_t(t));
    std::vector<float> x = x0;
    engram_gate_add(f.w, hasher, context_at(tokens, t, hasher.max_order()), x.data(), f.n, f.d, 1e-6f, false, state,
                    scratch);
    EXPECT_EQ(x, x0) << "token " << t;
  }
}

// Runs `tokens` through one engram layer with fresh streams per token; returns all outputs.
std::vector<float> run(const Fixture& f, const EngramHasher& hasher, const std::vector<int32_t>& tokens,
                       EngramGateState& state) {
  EngramGateScratch scratch;
  std::vector<float> out;
  for (int t = 0; t < int(tokens.size()); ++t) {
    std::vector<float> x = normal(static_cast<size_t>(f.n * f.d), 1.0f, 300 + uint32_t(t));
    engram_gate_add(f.w, hasher, context_at(tokens, t, hasher.max_order()), x.data(), f.n, f.d, 1e-6f, false, state,
                    scratch);
    out.insert(out.end(), x.begin(), x.end());
  }
  return out;
}

TEST(EngramGate, ResetStateEqualsFreshState) {
  const Fixture f(21, 4);
  const EngramHasher hasher(f.spec, 1);
  const std::vector<int32_t> first = {9, 8, 7, 6, 5}, second = {4, 4, 2, 11, 30, 4};
  EngramGateState used, fresh;
  used.init(f.n, f.d, f.K);
  fresh.init(f.n, f.d, f.K);
  run(f, hasher, first, used);
  // Without a reset the carried conv history changes the output (so the test can fail)...
  EngramGateState carried = used;
  EXPECT_NE(run(f, hasher, second, carried), run(f, hasher, second, fresh));
  // ...and with one it does not.
  fresh.reset();
  used.reset();
  EXPECT_EQ(run(f, hasher, second, used), run(f, hasher, second, fresh));
}

TEST(EngramGate, SinglePlainStream) {
  // n = 1 (a plain residual): one key, same equations; a kernel of 1 keeps no history.
  Fixture f(33, 1);
  f.K = 1;
  f.w.conv.assign(size_t(f.d), 2.0f);
  const EngramHasher hasher(f.spec, 0);
  EngramGateState state;
  state.init(1, f.d, 1);
  EngramGateScratch scratch;
  const std::vector<int32_t> ctx = {EngramHasher::kPad, 4, 9};
  std::vector<float> x(static_cast<size_t>(f.d), 0.0f);
  engram_gate_add(f.w, hasher, ctx, x.data(), 1, f.d, 1e-6f, false, state, scratch);
  // x was zero, so RMSNorm(x) = 0, alpha = 1/2 and x = 2 * v / 2 = v.
  EXPECT_NEAR(scratch.alpha[0], 0.5f, 1e-6f);
  std::vector<float> e(static_cast<size_t>(f.spec.width())), v(static_cast<size_t>(f.d));
  std::vector<int64_t> rows(static_cast<size_t>(hasher.tables()));
  hasher.rows(ctx, rows);
  for (size_t t = 0; t < rows.size(); ++t)
    for (int c = 0; c < f.spec.row_dim; ++c) e[t * size_t(f.spec.row_dim) + size_t(c)] = f.tables[size_t(rows[t] * f.spec.row_dim + c)];
  for (int c = 0; c < f.d; ++c) {
    double vc = 0;
    for (int i = 0; i < f.spec.width(); ++i) vc += double(f.w_value[size_t(c * f.spec.width() + i)]) * e[size_t(i)];
    EXPECT_NEAR(x[size_t(c)], vc, 1e-4);
  }
}

TEST(EngramGate, RejectsMismatchedShapes) {
  const Fixture f(2);
  const EngramHasher hasher(f.spec, 1);
  EngramGateState state;
  state.init(f.n, f.d, f.K);
  EngramGateScratch scratch;
  std::vector<float> x(static_cast<size_t>(f.n * f.d), 1.0f);
  const std::vector<int32_t> ctx = {1, 2, 3}, short_ctx = {1, 2};
  EXPECT_THROW(engram_gate_add(f.w, hasher, short_ctx, x.data(), f.n, f.d, 1e-6f, false, state, scratch),
               std::runtime_error);
  EXPECT_THROW(engram_gate_add(f.w, hasher, ctx, x.data(), f.n + 1, f.d, 1e-6f, false, state, scratch),
               std::runtime_error);
  const EngramHasher other(f.spec, 0);
  EXPECT_NO_THROW(engram_gate_add(f.w, other, ctx, x.data(), f.n, f.d, 1e-6f, false, state, scratch));
  EXPECT_THROW(state.init(f.n, f.d, 0), std::runtime_error);
}

}  // namespace
}  // namespace wren
