// Tests of model/gated_deltanet: decoding against a direct double-precision transcription of
// the equations (seed 002 A13 for gdn2, arXiv 2412.06464 as in REFERENCES.md for plain gdn),
// chunked prefill against token-by-token decoding, state reset, and thread-count independence.
//
// Weights are drawn at random for the tensors the weight map names for one layer, so the test
// also checks that GdnWeights follows the map's names and shapes.
//
// Tolerance: an array a matches its reference b when max_i |a_i - b_i| <= tol * max_i |b_i|,
// tol = 1e-4 (f32 arithmetic in another order than the reference; see each test).
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <random>
#include <string>

#include "config/weight_map.h"
#include "kernels/ops.h"
#include "model/gated_deltanet.h"

namespace wren {
namespace {

constexpr double kTol = 1e-4;

// One GDN layer with random weights: the raw f32 values (for the reference) and the views.
struct Layer {
  ModelConfig config;
  MixerSpec spec;
  std::map<std::string, std::vector<float>> raw;      // by suffix after "attn."
  std::map<std::string, std::vector<int64_t>> shape;
  std::map<std::string, kernels::Matrix> matrices;
  GdnWeights w;

  bool has(const std::string& n) const { return raw.count(n) > 0; }
};

// decay_range: dt = softplus(decay_bias) is drawn log-uniform in it; A ~ U(1, a_max).
Layer make_layer(MixerSpec m, int d, uint64_t seed, double dt_lo = 1e-3, double dt_hi = 0.1, double a_max = 16) {
  Layer L;
  L.spec = m;
  ModelConfig& c = L.config;
  c.name = "gdn-test";
  c.d_model = d;
  c.vocab_size = 16;
  c.context_length = 1024;
  c.mixers = {{"mix", m}};
  FfnSpec f;
  f.hidden = 8;
  c.ffns = {{"ffn", f}};
  c.layers = {{"mix", "ffn", {}}};

  std::mt19937 rng{uint32_t(seed)};
  std::uniform_real_distribution<double> u(-1.0, 1.0), unit(0.0, 1.0);
  const std::string prefix = "layers.0.attn.";
  for (const TensorInfo& t : build_weight_map(c).tensors) {
    if (t.name.rfind(prefix, 0) != 0) continue;
    const std::string n = t.name.substr(prefix.size());
    std::vector<float> v(size_t(t.numel()));
    const int64_t cols = t.shape.back();
    for (float& x : v) {
      if (n == "a_log") {
        x = float(std::log(1.0 + (a_max - 1.0) * unit(rng)));
      } else if (n == "decay_bias") {  // softplus^-1(dt) = dt + log(1 - e^-dt)
        const double dt = std::exp(std::log(dt_lo) + (std::log(dt_hi) - std::log(dt_lo)) * unit(rng));
        x = float(dt + std::log(-std::expm1(-dt)));
      } else if (n == "o_norm") {
        x = float(0.5 + unit(rng));
      } else if (n.rfind("conv_", 0) == 0) {
        x = float(0.6 * u(rng));
      } else if (n.rfind("w_decay", 0) == 0) {
        x = float(0.5 * u(rng) / std::sqrt(double(cols)));
      } else {
        x = float(1.5 * u(rng) / std::sqrt(double(cols)));
      }
    }
    L.raw[n] = v;
    L.shape[n] = t.shape;
    if (t.role == TensorRole::matrix)
      L.matrices[n] = kernels::encode_matrix(v.data(), t.shape[0], t.shape[1], kernels::DType::f32);
  }
  auto mat = [&](const char* n) { return L.matrices.count(n) ? L.matrices.at(n).view() : MatrixView{}; };
  auto vec = [&](const char* n) { return L.raw.count(n) && !L.matrices.count(n) ? L.raw.at(n) : Vec{}; };
  GdnWeights& w = L.w;
  w.wq = mat("wq"), w.wk = mat("wk"), w.wv = mat("wv");
  w.w_decay = mat("w_decay"), w.w_decay_a = mat("w_decay_a"), w.w_decay_b = mat("w_decay_b");
  w.w_erase = mat("w_erase"), w.w_erase_a = mat("w_erase_a"), w.w_erase_b = mat("w_erase_b");
  w.w_write = mat("w_write"), w.w_write_a = mat("w_write_a"), w.w_write_b = mat("w_write_b");
  w.w_beta = mat("w_beta");
  w.wg = mat("wg"), w.wg_a = mat("wg_a"), w.wg_b = mat("wg_b");
  w.wo = mat("wo");
  w.conv_q = vec("conv_q"), w.conv_k = vec("conv_k"), w.conv_v = vec("conv_v");
  w.decay_bias = vec("decay_bias"), w.a_log = vec("a_log"), w.o_norm = vec("o_norm");
  return L;
}

MixerSpec spec(MixerKind kind, int hq, int hv, int dk, int dv, int rank = 0, int out_rank = 0, int K = 4) {
  MixerSpec m;
  m.kind = kind;
  m.n_heads = hq, m.n_v_heads = hv, m.head_dim = dk, m.v_head_dim = dv;
  m.gate_rank = rank, m.out_gate_rank = out_rank, m.conv_kernel = K;
  m.output_gate = true;
  return m;
}

std::vector<float> random_tokens(int64_t T, int d, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0, 1);
  std::vector<float> x(size_t(T * d));
  for (float& v : x) v = nd(rng);
  return x;
}

// ---- The reference: the equations written out in double, one token at a time ----------

using D = std::vector<double>;

struct Naive {
  const Layer& L;
  int hq, hv, dk, dv, K, d;
  std::vector<D> history;  // the K-1 previous [q | k | v] projections before the conv, oldest first
  D S;                     // [h_v][d_k][d_v]

  explicit Naive(const Layer& layer) : L(layer) {
    const MixerSpec& m = L.spec;
    hq = m.n_heads, hv = m.value_heads(), dk = m.head_dim, dv = m.value_dim(), K = m.conv_kernel;
    d = L.config.d_model;
    history.assign(size_t(K - 1), D(size_t(2 * hq * dk + hv * dv), 0.0));
    S.assign(size_t(hv * dk * dv), 0.0);
  }

  D matvec(const std::string& n, const D& x) const {
    const std::vector<float>& W = L.raw.at(n);
    const int64_t rows = L.shape.at(n)[0], cols = L.shape.at(n)[1];
    D y(size_t(rows), 0.0);
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < cols; ++c) y[size_t(r)] += double(W[size_t(r * cols + c)]) * x[size_t(c)];
    return y;
  }
  // W x, or W_b (W_a x) for a low-rank projection.
  D project(const std::string& n, const D& x) const {
    return L.has(n) ? matvec(n, x) : matvec(n + "_b", matvec(n + "_a", x));
  }
  static double sigmoid(double z) { return 1.0 / (1.0 + std::exp(-z)); }
  static double silu(double z) { return z * sigmoid(z); }
  static double softplus(double z) { return std::log1p(std::exp(z)); }

  D step(const float* xf) {
    const bool gdn2 = L.spec.kind == MixerKind::gdn2;
    D x(xf, xf + d);
    // (1) q, k, v = SiLU(Conv1d(W x)): tap K-1 is the current token, tap j is K-1-j tokens back.
    D cur = matvec("wq", x), kk = matvec("wk", x), vv = matvec("wv", x);
    cur.insert(cur.end(), kk.begin(), kk.end());
    cur.insert(cur.end(), vv.begin(), vv.end());
    std::vector<D> window = history;
    window.push_back(cur);
    history.erase(history.begin());
    history.push_back(cur);
    const int cq = hq * dk;
    D q(size_t(cq), 0.0), k(size_t(cq), 0.0), v(size_t(hv * dv), 0.0);
    auto conv = [&](const char* name, int offset, int channels, D& out) {
      const std::vector<float>& W = L.raw.at(name);
      for (int c = 0; c < channels; ++c) {
        double acc = 0;
        for (int j = 0; j < K; ++j) acc += double(W[size_t(c * K + j)]) * window[size_t(j)][size_t(offset + c)];
        out[size_t(c)] = silu(acc);
      }
    };
    conv("conv_q", 0, cq, q);
    conv("conv_k", cq, cq, k);
    conv("conv_v", 2 * cq, hv * dv, v);
    for (int h = 0; h < hq; ++h)  // q, k <- x / sqrt(|x|^2 + 1e-6)
      for (D* t : {&q, &k}) {
        double ss = 0;
        for (int i = 0; i < dk; ++i) ss += (*t)[size_t(h * dk + i)] * (*t)[size_t(h * dk + i)];
        for (int i = 0; i < dk; ++i) (*t)[size_t(h * dk + i)] /= std::sqrt(ss + 1e-6);
      }
    const D f = project("w_decay", x);
    const D gate_in = project("wg", x);
    D o(size_t(hv * dv), 0.0);
    for (int h = 0; h < hv; ++h) {
      const double* qh = &q[size_t(h / (hv / hq) * dk)];
      const double* kh = &k[size_t(h / (hv / hq) * dk)];
      const double* vh = &v[size_t(h * dv)];
      double* Sh = &S[size_t(h * dk * dv)];
      const double A = L.raw.at("a_log")[size_t(h)];
      if (gdn2) {
        // (2) g = -e^A softplus(W_f x + b_f); (3) b = sigmoid(W_b x); (4) w = sigmoid(W_w x).
        const D e = project("w_erase", x), wr = project("w_write", x);
        D g(size_t(dk), 0.0), b(size_t(dk), 0.0), w(size_t(dv), 0.0);
        for (int i = 0; i < dk; ++i) {
          g[size_t(i)] = -std::exp(A) * softplus(f[size_t(h * dk + i)] + L.raw.at("decay_bias")[size_t(h * dk + i)]);
          b[size_t(i)] = sigmoid(e[size_t(h * dk + i)]);
        }
        for (int j = 0; j < dv; ++j) w[size_t(j)] = sigmoid(wr[size_t(h * dv + j)]);
        // (5) S' = Diag(e^g) S
        D Sp(size_t(dk * dv), 0.0);
        for (int i = 0; i < dk; ++i)
          for (int j = 0; j < dv; ++j) Sp[size_t(i * dv + j)] = std::exp(g[size_t(i)]) * Sh[i * dv + j];
        // (6) S = S' + k (w * v - S'^T (b * k))^T
        D corr(size_t(dv), 0.0);
        for (int j = 0; j < dv; ++j) {
          double read = 0;
          for (int i = 0; i < dk; ++i) read += Sp[size_t(i * dv + j)] * b[size_t(i)] * kh[i];
          corr[size_t(j)] = w[size_t(j)] * vh[j] - read;
        }
        for (int i = 0; i < dk; ++i)
          for (int j = 0; j < dv; ++j) Sh[i * dv + j] = Sp[size_t(i * dv + j)] + kh[i] * corr[size_t(j)];
      } else {
        // g = -e^A softplus(w_a . x + dt_bias), a = e^g, beta = sigmoid(w_b . x):
        // S = a (I - beta k k^T) S + beta k v^T
        const double a = std::exp(-std::exp(A) * softplus(f[size_t(h)] + L.raw.at("decay_bias")[size_t(h)]));
        const double beta = sigmoid(project("w_beta", x)[size_t(h)]);
        D M(size_t(dk * dv), 0.0);
        for (int i = 0; i < dk; ++i)
          for (int j = 0; j < dv; ++j) {
            double kkS = 0;  // (k k^T S)[i][j]
            for (int l = 0; l < dk; ++l) kkS += kh[i] * kh[l] * Sh[l * dv + j];
            M[size_t(i * dv + j)] = a * (Sh[i * dv + j] - beta * kkS) + beta * kh[i] * vh[j];
          }
        std::copy(M.begin(), M.end(), Sh);
      }
      // (7) o = S^T q / sqrt(d_k)
      for (int j = 0; j < dv; ++j) {
        double acc = 0;
        for (int i = 0; i < dk; ++i) acc += Sh[i * dv + j] * qh[i];
        o[size_t(h * dv + j)] = acc / std::sqrt(double(dk));
      }
    }
    // (8) y = W_o [RMSNorm(o) * sigma(W_g x)], sigma = sigmoid (gdn2) or SiLU (gdn).
    const double eps = L.config.norm.eps;
    for (int h = 0; h < hv; ++h) {
      double ms = 0;
      for (int j = 0; j < dv; ++j) ms += o[size_t(h * dv + j)] * o[size_t(h * dv + j)] / dv;
      for (int j = 0; j < dv; ++j) {
        const double z = gate_in[size_t(h * dv + j)];
        o[size_t(h * dv + j)] *= L.raw.at("o_norm")[size_t(j)] / std::sqrt(ms + eps) * (gdn2 ? sigmoid(z) : silu(z));
      }
    }
    return matvec("wo", o);
  }
};

template <class A, class B>
double rel_error(const A& a, const B& b, size_t n) {
  double err = 0, scale = 0;
  for (size_t i = 0; i < n; ++i) {
    err = std::max(err, std::fabs(double(a[i]) - double(b[i])));
    scale = std::max(scale, std::fabs(double(b[i])));
  }
  return scale > 0 ? err / scale : err;
}

// T decodes from a fresh state; outputs [T][d].
std::vector<float> decode_all(const Layer& L, const float* x, int64_t T, GdnState& st, GdnScratch& s,
                              kernels::ThreadPool* pool = nullptr) {
  const int d = L.config.d_model;
  std::vector<float> out(size_t(T * d));
  for (int64_t t = 0; t < T; ++t) gdn_decode(L.w, L.spec, L.config, x + t * d, st, s, out.data() + t * d, pool);
  return out;
}

struct DecodeCase {
  const char* name;
  MixerSpec m;
};

// 1. gdn_decode is the recurrence: against the double transcription, outputs and state, over
// enough tokens that the convs' tails and the state's history matter.
TEST(GdnDecode, MatchesNaiveEquations) {
  const std::vector<DecodeCase> cases = {
      {"gdn2", spec(MixerKind::gdn2, 2, 2, 16, 8)},
      {"gdn2 h_v = 2 h, low-rank gates", spec(MixerKind::gdn2, 2, 4, 16, 12, 6, 5)},
      {"gdn2 conv_kernel 2", spec(MixerKind::gdn2, 1, 1, 8, 8, 3, 0, 2)},
      {"gdn2 d_k = 80: the decode reads S in lists of 64 rows", spec(MixerKind::gdn2, 1, 1, 80, 8)},
      {"gdn", spec(MixerKind::gdn, 2, 2, 16, 8)},
      {"gdn h_v = 2 h, low-rank output gate", spec(MixerKind::gdn, 2, 4, 8, 16, 0, 7)},
  };
  const int d = 24, T = 30;
  for (const DecodeCase& c : cases) {
    SCOPED_TRACE(c.name);
    const Layer L = make_layer(c.m, d, 7);
    const std::vector<float> x = random_tokens(T, d, 11);
    GdnState st;
    st.init(c.m);
    GdnScratch s;
    s.reserve(c.m, d, 1);
    Naive ref(L);
    std::vector<float> out(size_t(d), 0.0f);
    for (int t = 0; t < T; ++t) {
      gdn_decode(L.w, c.m, L.config, x.data() + t * d, st, s, out.data(), nullptr);
      const D want = ref.step(x.data() + t * d);
      ASSERT_LE(rel_error(out, want, size_t(d)), kTol) << "token " << t;
    }
    EXPECT_LE(rel_error(st.S, ref.S, st.S.size()), kTol);
  }
}

// 2. Chunked prefill equals T decodes: outputs, recurrent state and conv tails.
void expect_prefill_matches_decode(const Layer& L, int64_t T, int64_t scratch_tokens, kernels::ThreadPool* pool) {
  const int d = L.config.d_model;
  const std::vector<float> x = random_tokens(T, d, uint32_t(100 + T));
  GdnState a, b;
  a.init(L.spec), b.init(L.spec);
  GdnScratch s;
  s.reserve(L.spec, d, scratch_tokens);
  std::vector<float> out(size_t(T * d));
  gdn_prefill(L.w, L.spec, L.config, x.data(), T, a, s, out.data(), pool);
  const std::vector<float> want = decode_all(L, x.data(), T, b, s);
  EXPECT_LE(rel_error(out, want, out.size()), kTol);
  EXPECT_LE(rel_error(a.S, b.S, a.S.size()), kTol);
  // The tails hold projections: matmul and matvec round differently, so these are close, not equal.
  EXPECT_LE(rel_error(a.conv_q, b.conv_q, a.conv_q.size()), kTol);
  EXPECT_LE(rel_error(a.conv_k, b.conv_k, a.conv_k.size()), kTol);
  EXPECT_LE(rel_error(a.conv_v, b.conv_v, a.conv_v.size()), kTol);
}

TEST(GdnPrefill, ChunkedEqualsDecode) {
  const int d = 32;
  for (const DecodeCase& c : {DecodeCase{"gdn2", spec(MixerKind::gdn2, 2, 4, 16, 12, 6, 5)},
                              DecodeCase{"gdn", spec(MixerKind::gdn, 2, 4, 16, 8)}}) {
    const Layer L = make_layer(c.m, d, 3);
    for (int64_t T : {1, 5, 64, 65, 200}) {
      SCOPED_TRACE(std::string(c.name) + " T=" + std::to_string(T));
      expect_prefill_matches_decode(L, T, 256, nullptr);
    }
  }
}

// A scratch smaller than the prompt: prefill walks it in pieces (here 64, 64, 64, 8 tokens,
// and pieces of 30 that cut chunks short), with the same result.
TEST(GdnPrefill, SmallScratchWalksPieces) {
  const Layer L = make_layer(spec(MixerKind::gdn2, 2, 2, 16, 16), 32, 5);
  for (int64_t tokens : {100, 30}) {
    SCOPED_TRACE(tokens);
    expect_prefill_matches_decode(L, 200, tokens, nullptr);
  }
}

// Fast decays (g down to about -50 per token, far beyond e^{-88} over a chunk): the chunked
// form only ever exponentiates gamma_r - gamma_s <= 0, so nothing overflows.
TEST(GdnPrefill, StrongDecayStaysFinite) {
  const Layer L = make_layer(spec(MixerKind::gdn2, 2, 2, 16, 8), 32, 9, 0.5, 3.0, 16);
  expect_prefill_matches_decode(L, 130, 256, nullptr);
  const Layer P = make_layer(spec(MixerKind::gdn, 2, 2, 16, 8), 32, 9, 0.5, 3.0, 16);
  expect_prefill_matches_decode(P, 130, 256, nullptr);
}

// prefill(70) then prefill(61) == prefill(131) == 131 decodes.
TEST(GdnPrefill, SplitPromptContinuesState) {
  for (MixerKind kind : {MixerKind::gdn2, MixerKind::gdn}) {
    SCOPED_TRACE(to_string(kind));
    const MixerSpec m = spec(kind, 2, 4, 16, 8, kind == MixerKind::gdn2 ? 4 : 0);
    const int d = 32, T1 = 70, T2 = 61, T = T1 + T2;
    const Layer L = make_layer(m, d, 21);
    const std::vector<float> x = random_tokens(T, d, 77);
    GdnScratch s;
    s.reserve(m, d, 256);
    GdnState split, whole, dec;
    split.init(m), whole.init(m), dec.init(m);
    std::vector<float> out_split(size_t(T * d)), out_whole(size_t(T * d));
    gdn_prefill(L.w, m, L.config, x.data(), T1, split, s, out_split.data(), nullptr);
    gdn_prefill(L.w, m, L.config, x.data() + T1 * d, T2, split, s, out_split.data() + T1 * d, nullptr);
    gdn_prefill(L.w, m, L.config, x.data(), T, whole, s, out_whole.data(), nullptr);
    const std::vector<float> want = decode_all(L, x.data(), T, dec, s);
    EXPECT_LE(rel_error(out_split, want, want.size()), kTol);
    EXPECT_LE(rel_error(out_whole, want, want.size()), kTol);
    EXPECT_LE(rel_error(split.S, dec.S, dec.S.size()), kTol);
    EXPECT_LE(rel_error(whole.S, dec.S, dec.S.size()), kTol);
    EXPECT_LE(rel_error(split.conv_v, dec.conv_v, dec.conv_v.size()), kTol);
  }
}

// 3. A reset state (document boundary) behaves exactly as a fresh one, for decode and prefill.
TEST(GdnState, ResetEqualsFresh) {
  const MixerSpec m = spec(MixerKind::gdn2, 2, 2, 16, 8);
  const int d = 32;
  const Layer L = make_layer(m, d, 13);
  const std::vector<float> before = random_tokens(40, d, 1), after = random_tokens(20, d, 2);
  GdnScratch s;
  s.reserve(m, d, 64);
  GdnState used, fresh;
  used.init(m), fresh.init(m);
  std::vector<float> sink(size_t(40 * d));
  gdn_prefill(L.w, m, L.config, before.data(), 40, used, s, sink.data(), nullptr);
  used.reset();
  EXPECT_EQ(decode_all(L, after.data(), 20, used, s), decode_all(L, after.data(), 20, fresh, s));
  EXPECT_EQ(used.S, fresh.S);

  gdn_prefill(L.w, m, L.config, before.data(), 40, used, s, sink.data(), nullptr);
  used.reset(), fresh.reset();
  std::vector<float> a(size_t(20 * d)), b(size_t(20 * d));
  gdn_prefill(L.w, m, L.config, after.data(), 20, used, s, a.data(), nullptr);
  gdn_prefill(L.w, m, L.config, after.data(), 20, fresh, s, b.data(), nullptr);
  EXPECT_EQ(a, b);
}

// Heads split across threads: the same bits as one thread.
TEST(GdnPrefill, ThreadCountIndependent) {
  const MixerSpec m = spec(MixerKind::gdn2, 2, 4, 16, 8);
  const int d = 32, T = 100;
  const Layer L = make_layer(m, d, 17);
  const std::vector<float> x = random_tokens(T, d, 5);
  kernels::ThreadPool pool(2);
  GdnScratch s;
  s.reserve(m, d, 128);
  GdnState a, b;
  a.init(m), b.init(m);
  std::vector<float> out_a(size_t(T * d)), out_b(size_t(T * d));
  gdn_prefill(L.w, m, L.config, x.data(), T, a, s, out_a.data(), nullptr);
  gdn_prefill(L.w, m, L.config, x.data(), T, b, s, out_b.data(), &pool);
  EXPECT_EQ(out_a, out_b);
  EXPECT_EQ(a.S, b.S);
  EXPECT_EQ(decode_all(L, x.data(), 3, a, s), decode_all(L, x.data(), 3, b, s, &pool));
}

// An uninitialised state or a scratch too small is an error naming what to call, not a crash.
TEST(GdnState, MisuseThrows) {
  const MixerSpec m = spec(MixerKind::gdn2, 2, 2, 16, 8);
  const Layer L = make_layer(m, 32, 1);
  const std::vector<float> x = random_tokens(1, 32, 1);
  std::vector<float> out(32);
  GdnScratch s;
  s.reserve(m, 32, 1);
  GdnState st;
  EXPECT_THROW(gdn_decode(L.w, m, L.config, x.data(), st, s, out.data(), nullptr), std::invalid_argument);
  st.init(m);
  GdnScratch empty;
  EXPECT_THROW(gdn_decode(L.w, m, L.config, x.data(), st, empty, out.data(), nullptr), std::invalid_argument);
  MixerSpec wider = m;
  wider.n_v_heads = 4;
  EXPECT_THROW(gdn_decode(L.w, wider, L.config, x.data(), st, s, out.data(), nullptr), std::invalid_argument);
}

}  // namespace
}  // namespace wren
