// mHC residual streams (model/mhc): Sinkhorn gives doubly stochastic matrices, the initial
// biases read one stream per sublayer and barely mix, and the functions equal a direct
// double-precision transcription of NOTES.md 2 on random inputs.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "config/parse.h"
#include "config/weight_map.h"
#include "model/mhc.h"
#include "model/weights.h"

#include "test_util.h"

namespace wren {
namespace {

using testing_util::normal;

// Largest |row sum - 1| and |column sum - 1| of an n x n matrix.
void sums_error(const std::vector<float>& C, int n, double& rows, double& cols) {
  rows = cols = 0;
  for (int i = 0; i < n; ++i) {
    double r = 0, c = 0;
    for (int k = 0; k < n; ++k) {
      r += C[size_t(i * n + k)];
      c += C[size_t(k * n + i)];
    }
    rows = std::max(rows, std::fabs(r - 1));
    cols = std::max(cols, std::fabs(c - 1));
  }
}

// Rows converge geometrically at a rate set by the logits' spread (NOTES.md's 20 rounds reach
// 1e-5 only for nearby logits; see sinkhorn() in mhc.h); columns are exact after every round.
TEST(MhcSinkhorn, DoublyStochasticFromRandomLogits) {
  struct Case {
    float spread;
    int rounds;
  };
  for (int n : {2, 4, 8}) {
    for (Case cs : {Case{0.5f, 20}, Case{2.0f, 2000}}) {
      for (uint32_t seed = 0; seed < 30; ++seed) {
        std::vector<float> C = normal(static_cast<size_t>(n * n), cs.spread, seed);
        sinkhorn(C.data(), n, cs.rounds);
        double rows = 0, cols = 0;
        sums_error(C, n, rows, cols);
        EXPECT_LE(rows, 1e-5) << "n " << n << " spread " << cs.spread << " seed " << seed;
        EXPECT_LE(cols, 1e-5) << "n " << n << " spread " << cs.spread << " seed " << seed;
        for (float c : C) EXPECT_TRUE(c >= 0.0f && c <= 1.0f);
      }
    }
  }
}

TEST(MhcSinkhorn, LargeLogitsStayFiniteAndShiftInvariant) {
  // exp(+-200) overflows / underflows f32: the log-domain steps must not notice the offset.
  const int n = 4;
  for (uint32_t seed = 0; seed < 20; ++seed) {
    const std::vector<float> R = normal(static_cast<size_t>(n * n), 2.0f, seed + 100);
    std::vector<float> ref = R;
    sinkhorn(ref.data(), n, 20);
    for (float offset : {200.0f, -200.0f, 5000.0f}) {
      std::vector<float> C = R;
      for (float& x : C) x += offset;
      sinkhorn(C.data(), n, 20);
      for (size_t i = 0; i < C.size(); ++i) EXPECT_NEAR(C[i], ref[i], 1e-4f) << "offset " << offset;
    }
    // A per-row offset changes nothing either (the first step is a row softmax).
    std::vector<float> C = R;
    for (int j = 0; j < n; ++j)
      for (int k = 0; k < n; ++k) C[size_t(j * n + k)] += 300.0f * float(j) - 400.0f;
    sinkhorn(C.data(), n, 20);
    for (size_t i = 0; i < C.size(); ++i) EXPECT_NEAR(C[i], ref[i], 1e-4f);
  }
  // Entries e^100 apart: rows may converge slowly, but nothing is NaN and the last step's
  // column sums hold.
  for (uint32_t seed = 0; seed < 20; ++seed) {
    std::vector<float> C = normal(static_cast<size_t>(n * n), 50.0f, seed + 200);
    sinkhorn(C.data(), n, 20);
    double rows = 0, cols = 0;
    sums_error(C, n, rows, cols);
    for (float c : C) EXPECT_TRUE(std::isfinite(c) && c >= 0.0f);
    EXPECT_LE(cols, 1e-5);
  }
}

// Sinkhorn-Knopp as its definition reads, in double and in logs: each round subtracts the
// log of every row's sum of exponentials, then every column's.
std::vector<double> sinkhorn_by_definition(const std::vector<float>& R, int n, int rounds) {
  std::vector<double> M(R.begin(), R.end());
  const auto log_sum_exp = [&](int first, int stride) {
    double mx = -INFINITY;
    for (int i = 0; i < n; ++i) mx = std::max(mx, M[size_t(first + i * stride)]);
    double sum = 0;
    for (int i = 0; i < n; ++i) sum += std::exp(M[size_t(first + i * stride)] - mx);
    return mx + std::log(sum);
  };
  for (int it = 0; it < rounds; ++it) {
    for (int j = 0; j < n; ++j) {
      const double l = log_sum_exp(j * n, 1);
      for (int k = 0; k < n; ++k) M[size_t(j * n + k)] -= l;
    }
    for (int k = 0; k < n; ++k) {
      const double l = log_sum_exp(k, n);
      for (int j = 0; j < n; ++j) M[size_t(j * n + k)] -= l;
    }
  }
  for (double& m : M) m = std::exp(m);
  return M;
}

// Both ways the engine scales (exp(M) in double while a row's logits are within 200 of its
// max; the log domain past that, here with one logit 250 below its row's max) agree with the
// definition: to float rounding on the first, to the log domain's float steps on the second.
TEST(MhcSinkhorn, EqualsTheDefinitionNearAndFarLogits) {
  for (int n : {2, 4, 8}) {
    for (uint32_t seed = 0; seed < 20; ++seed) {
      for (float spread : {0.5f, 3.0f, 30.0f}) {
        const std::vector<float> R = normal(static_cast<size_t>(n * n), spread, seed + 300);
        std::vector<float> C = R;
        sinkhorn(C.data(), n, 20);
        const std::vector<double> want = sinkhorn_by_definition(R, n, 20);
        for (size_t i = 0; i < C.size(); ++i)
          EXPECT_NEAR(C[i], want[i], 1e-6) << "n " << n << " spread " << spread << " seed " << seed << " entry " << i;
      }
      std::vector<float> R = normal(static_cast<size_t>(n * n), 1.0f, seed + 400);
      R[size_t(seed) % R.size()] -= 250.0f;
      std::vector<float> C = R;
      sinkhorn(C.data(), n, 20);
      const std::vector<double> want = sinkhorn_by_definition(R, n, 20);
      for (size_t i = 0; i < C.size(); ++i) EXPECT_NEAR(C[i], want[i], 1e-5) << "n " << n << " seed " << seed;
    }
  }
}

// The check above can fail: after a single round only the columns (normalised last) sum to 1.
TEST(MhcSinkhorn, OneRoundIsNotEnough) {
  std::vector<float> C = {3.0f, 0.0f, -1.0f, 0.0f, 1.0f, 2.0f, -2.0f, 0.5f, 0.0f};
  sinkhorn(C.data(), 3, 1);
  double rows = 0, cols = 0;
  sums_error(C, 3, rows, cols);
  EXPECT_LE(cols, 1e-6);
  EXPECT_GT(rows, 1e-3);
}

// A boundary's weights as the engine would load them: biases from model/weights (init_rows),
// alpha from the init rule, phi = 0 (`zeros` holds n d (n^2 + 2n) zeros).
MhcWeights init_boundary(const ModelConfig& c, const WeightMap& map, const std::string& prefix,
                         const std::vector<float>& zeros) {
  const int n = c.residual.streams, d = c.d_model;
  MhcWeights w;
  w.phi = kernels::MatrixView::f32(zeros.data(), int64_t(n) * d, n * n + 2 * n);
  const TensorInfo* bias = map.find(prefix + "bias");
  const TensorInfo* alpha = map.find(prefix + "alpha");
  EXPECT_TRUE(bias && alpha) << prefix;
  w.bias.resize(size_t(bias->numel()));
  w.alpha.resize(size_t(alpha->numel()));
  init_rows(c, *bias, 1, 0, 1, w.bias.data());
  init_rows(c, *alpha, 1, 0, 1, w.alpha.data());
  return w;
}

TEST(MhcBoundary, InitialBiasesReadOneStreamAndKeepStreamsApart) {
  const ModelConfig c = load_preset("nenya-mini");
  ASSERT_EQ(c.residual.kind, ResidualKind::mhc);
  const WeightMap map = build_weight_map(c);
  const int n = c.residual.streams, d = c.d_model;
  const std::vector<float> x = normal(static_cast<size_t>(n * d), 1.0f, 7);
  const std::vector<float> zeros(static_cast<size_t>(n * d * (n * n + 2 * n)), 0.0f);
  MhcScratch s;
  for (int layer = 0; layer < c.n_layers(); ++layer) {
    for (int ffn = 0; ffn < 2; ++ffn) {
      const std::string prefix = "layers." + std::to_string(layer) + (ffn ? ".ffn_mhc." : ".attn_mhc.");
      const MhcWeights w = init_boundary(c, map, prefix, zeros);
      MhcBoundary b;
      mhc_coefficients(w, n, d, float(c.norm.eps), c.residual.sinkhorn_iters, x.data(), b, s);
      const int read = (2 * layer + ffn) % n;
      for (int j = 0; j < n; ++j) {
        EXPECT_NEAR(b.pre[size_t(j)], j == read ? 0.9526f : 0.0474f, 1e-3f) << prefix << " stream " << j;
        EXPECT_NEAR(b.post[size_t(j)], 1.0f, 1e-6f) << prefix;
        for (int k = 0; k < n; ++k)
          EXPECT_NEAR(b.C[size_t(j * n + k)], j == k ? 0.95f : 0.05f / float(n - 1), 1e-5f) << prefix;
      }
    }
  }
}

// NOTES.md 2 written out in doubles, straight from the equations.
struct Direct {
  std::vector<double> pre, post, C;
};
Direct direct_coefficients(const std::vector<float>& phi, const std::vector<float>& alpha,
                           const std::vector<float>& bias, int n, int d, double eps, int iters,
                           const std::vector<float>& x) {
  const int outputs = n * n + 2 * n;
  double ss = 0;
  for (float v : x) ss += double(v) * v;
  const double r = 1.0 / std::sqrt(ss / (n * d) + eps);
  std::vector<double> m(static_cast<size_t>(outputs), 0.0);
  for (int o = 0; o < outputs; ++o) {
    for (int i = 0; i < n * d; ++i) m[size_t(o)] += double(x[size_t(i)]) * phi[size_t(i * outputs + o)];
    m[size_t(o)] *= r;
  }
  const auto sig = [](double v) { return 1.0 / (1.0 + std::exp(-v)); };
  Direct out;
  for (int j = 0; j < n; ++j) {
    out.pre.push_back(sig(alpha[0] * m[size_t(j)] + bias[size_t(j)]));
    out.post.push_back(2.0 * sig(alpha[1] * m[size_t(n + j)] + bias[size_t(n + j)]));
  }
  for (int i = 0; i < n * n; ++i) out.C.push_back(std::exp(alpha[2] * m[size_t(2 * n + i)] + bias[size_t(2 * n + i)]));
  for (int it = 0; it < iters; ++it) {  // Sinkhorn-Knopp: rows, then columns
    for (int j = 0; j < n; ++j) {
      double sum = 0;
      for (int k = 0; k < n; ++k) sum += out.C[size_t(j * n + k)];
      for (int k = 0; k < n; ++k) out.C[size_t(j * n + k)] /= sum;
    }
    for (int k = 0; k < n; ++k) {
      double sum = 0;
      for (int j = 0; j < n; ++j) sum += out.C[size_t(j * n + k)];
      for (int j = 0; j < n; ++j) out.C[size_t(j * n + k)] /= sum;
    }
  }
  return out;
}

// With phi's transposed copy (PackedWeights::transposed, as the load makes it), phi itself is
// poisoned with NaN: the copy is what the projection reads.
MhcWeights with_transposed_copy(MhcWeights w, PackedWeights& store, std::vector<float>& poisoned) {
  w.phi_t = store.transposed(w.phi);
  poisoned.assign(size_t(w.phi.rows * w.phi.cols), NAN);
  w.phi = kernels::MatrixView::f32(poisoned.data(), w.phi.rows, w.phi.cols);
  return w;
}

TEST(MhcBoundary, EqualsDirectTranscription) {
  for (int n : {1, 2, 4})
    for (bool transposed : {false, true}) {
      const int d = 24, outputs = n * n + 2 * n, iters = 20;
      const float eps = 1e-6f;
      for (uint32_t seed = 0; seed < 5; ++seed) {
        const std::vector<float> phi = normal(static_cast<size_t>(n * d * outputs), 0.3f, seed * 10 + 1);
        const std::vector<float> alpha = normal(3, 1.0f, seed * 10 + 2);
        const std::vector<float> bias = normal(static_cast<size_t>(outputs), 1.0f, seed * 10 + 3);
        const std::vector<float> x = normal(static_cast<size_t>(n * d), 2.0f, seed * 10 + 4);
        const std::vector<float> f = normal(static_cast<size_t>(d), 1.0f, seed * 10 + 5);
        MhcWeights w{kernels::MatrixView::f32(phi.data(), int64_t(n) * d, outputs), alpha, bias};
        PackedWeights store;
        std::vector<float> poisoned;
        if (transposed) w = with_transposed_copy(w, store, poisoned);

        MhcBoundary b;
        MhcScratch s;
        mhc_coefficients(w, n, d, eps, iters, x.data(), b, s);
        std::vector<float> h(static_cast<size_t>(d)), streams = x;
        mhc_read(b, n, d, streams.data(), h.data(), s);
        mhc_write(b, n, d, f.data(), streams.data(), s);

        const Direct ref = direct_coefficients(phi, alpha, bias, n, d, eps, iters, x);
        for (int j = 0; j < n; ++j) {
          EXPECT_NEAR(b.pre[size_t(j)], ref.pre[size_t(j)], 1e-5);
          EXPECT_NEAR(b.post[size_t(j)], ref.post[size_t(j)], 1e-5);
        }
        for (int i = 0; i < n * n; ++i) EXPECT_NEAR(b.C[size_t(i)], ref.C[size_t(i)], 1e-5);
        for (int c = 0; c < d; ++c) {
          double hc = 0;
          for (int j = 0; j < n; ++j) hc += ref.pre[size_t(j)] * x[size_t(j * d + c)];
          EXPECT_NEAR(h[size_t(c)], hc, 1e-4) << "n " << n << " seed " << seed;
        }
        for (int k = 0; k < n; ++k)
          for (int c = 0; c < d; ++c) {
            double xk = ref.post[size_t(k)] * f[size_t(c)];
            for (int j = 0; j < n; ++j) xk += ref.C[size_t(j * n + k)] * x[size_t(j * d + c)];
            EXPECT_NEAR(streams[size_t(k * d + c)], xk, 1e-4) << "n " << n << " seed " << seed;
          }
      }
    }
}

TEST(MhcReadout, GateAndSumEqualDirectTranscription) {
  const int n = 4, d = 16;
  const float eps = 1e-6f;
  const std::vector<float> phi = normal(static_cast<size_t>(n * d * n), 0.3f, 11);
  const std::vector<float> alpha = {0.7f};
  const std::vector<float> bias = normal(static_cast<size_t>(n), 1.0f, 12);
  const std::vector<float> x = normal(static_cast<size_t>(n * d), 1.5f, 13);
  MhcWeights stored{kernels::MatrixView::f32(phi.data(), int64_t(n) * d, n), alpha, bias};
  PackedWeights store;
  std::vector<float> poisoned;
  for (const MhcWeights& w : {stored, with_transposed_copy(stored, store, poisoned)}) {
    MhcScratch s;
    std::vector<float> y(static_cast<size_t>(d)), g(static_cast<size_t>(n));
    mhc_readout(StreamReadout::gate, w, n, d, eps, x.data(), y.data(), s, g.data());

    double ss = 0;
    for (float v : x) ss += double(v) * v;
    const double r = 1.0 / std::sqrt(ss / (n * d) + eps);
    std::vector<double> gate(static_cast<size_t>(n));
    for (int j = 0; j < n; ++j) {
      double m = 0;
      for (int i = 0; i < n * d; ++i) m += double(x[size_t(i)]) * phi[size_t(i * n + j)];
      gate[size_t(j)] = 1.0 / (1.0 + std::exp(-(alpha[0] * r * m + bias[size_t(j)]))) + kMhcReadoutEps;
      EXPECT_NEAR(g[size_t(j)], gate[size_t(j)], 1e-5);
    }
    for (int c = 0; c < d; ++c) {
      double yc = 0, sum = 0;
      for (int j = 0; j < n; ++j) {
        yc += gate[size_t(j)] * x[size_t(j * d + c)];
        sum += x[size_t(j * d + c)];
      }
      EXPECT_NEAR(y[size_t(c)], yc, 1e-4);
      std::vector<float> ysum(static_cast<size_t>(d));
      mhc_readout(StreamReadout::sum, MhcWeights{}, n, d, eps, x.data(), ysum.data(), s);
      EXPECT_NEAR(ysum[size_t(c)], sum, 1e-5);
    }
  }
}

TEST(MhcStreams, StartAsCopiesOfTheEmbedding) {
  const int n = 4, d = 10;
  const std::vector<float> e = normal(static_cast<size_t>(d), 1.0f, 3);
  std::vector<float> streams(static_cast<size_t>(n * d), -1.0f);
  mhc_init_streams(e.data(), n, d, streams.data());
  for (int j = 0; j < n; ++j)
    for (int c = 0; c < d; ++c) EXPECT_EQ(streams[size_t(j * d + c)], e[size_t(c)]);
}

TEST(MhcBoundary, RejectsMismatchedShapes) {
  const int n = 4, d = 8;
  std::vector<float> phi(static_cast<size_t>(n * d * 24), 0.0f);
  MhcWeights w{kernels::MatrixView::f32(phi.data(), int64_t(n) * d, 24), std::vector<float>(3), std::vector<float>(24)};
  MhcBoundary b;
  MhcScratch s;
  std::vector<float> x(static_cast<size_t>(n * d), 1.0f);
  EXPECT_NO_THROW(mhc_coefficients(w, n, d, 1e-6f, 20, x.data(), b, s));
  EXPECT_THROW(mhc_coefficients(w, n, d + 1, 1e-6f, 20, x.data(), b, s), std::runtime_error);
  w.alpha.resize(1);
  EXPECT_THROW(mhc_coefficients(w, n, d, 1e-6f, 20, x.data(), b, s), std::runtime_error);
}

}  // namespace
}  // namespace wren
