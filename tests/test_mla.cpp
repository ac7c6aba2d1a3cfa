// Tests of model/mla.h on random weights and inputs: the absorbed form equals the reference
// form; the reference form equals a plain double transcription of the MLA equations written
// here; the cache holds normalised latents and the shared key, kv_lora_rank + qk_rope_dim
// values per token; YaRN is refused with a clear error.
//
// Tolerances. Outputs are O(1) (weights ~ N(0, 1/cols), inputs ~ N(0, 1)).
//   absorbed vs reference (same f32 weights, different summation order): 1e-5 (1 + |y|)
//   reference vs the double transcription (f32 rounding of every product): 2e-5 (1 + |y|)
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <string>

#include "kernels/ops.h"
#include "kernels/threads.h"
#include "model/mla.h"

namespace wren {
namespace {

using kernels::DType;

std::vector<float> randn(int64_t n, std::mt19937& rng, float scale = 1.0f) {
  std::normal_distribution<float> nd(0, scale);
  std::vector<float> v(size_t(n), 0.0f);
  for (auto& x : v) x = nd(rng);
  return v;
}

// A random MLA layer: the f32 values (for the double transcription) and the encoded matrices
// the views point into.
struct Layer {
  MixerSpec m;
  int d = 0;
  std::vector<kernels::Matrix> storage;
  MlaWeights w;
  std::vector<float> wq, wq_a, wq_b, wkv_a, wk_b, wv_b, wg, wo;

  Layer(const MixerSpec& spec, int d_model, DType type, int group, uint32_t seed) : m(spec), d(d_model) {
    std::mt19937 rng(seed);
    storage.reserve(8);
    auto make = [&](std::vector<float>& f, MatrixView& view, int64_t rows, int64_t cols) {
      f = randn(rows * cols, rng, 1.0f / std::sqrt(float(cols)));
      storage.push_back(kernels::encode_matrix(f.data(), rows, cols, type, type == DType::f32 ? 0 : group));
      view = storage.back().view();
      // The transcription reads the values the kernels see (decoded), not the f32 originals.
      for (int64_t r = 0; r < rows; ++r) kernels::decode_row(view, r, f.data() + r * cols);
    };
    const int H = m.n_heads, dqk = m.qk_nope_dim + m.qk_rope_dim;
    if (m.q_lora_rank) {
      make(wq_a, w.wq_a, m.q_lora_rank, d);
      make(wq_b, w.wq_b, int64_t(H) * dqk, m.q_lora_rank);
      w.q_a_norm = randn(m.q_lora_rank, rng, 0.2f);
      for (auto& g : w.q_a_norm) g += 1.0f;
    } else {
      make(wq, w.wq, int64_t(H) * dqk, d);
    }
    make(wkv_a, w.wkv_a, m.kv_lora_rank + m.qk_rope_dim, d);
    w.kv_a_norm = randn(m.kv_lora_rank, rng, 0.2f);
    for (auto& g : w.kv_a_norm) g += 1.0f;
    if (m.qk_nope_dim) make(wk_b, w.wk_b, int64_t(H) * m.qk_nope_dim, m.kv_lora_rank);
    make(wv_b, w.wv_b, int64_t(H) * m.v_head_dim, m.kv_lora_rank);
    if (m.output_gate) make(wg, w.wg, int64_t(H) * m.v_head_dim, d);
    make(wo, w.wo, d, int64_t(H) * m.v_head_dim);
    w.rope = mla_rope(m);
  }
};

MixerSpec mla_spec(int heads, int q_lora, int kv_lora, int nope, int rope_dim, int v, bool gate, bool rope) {
  MixerSpec m;
  m.kind = MixerKind::mla;
  m.n_heads = heads;
  m.q_lora_rank = q_lora;
  m.kv_lora_rank = kv_lora;
  m.qk_nope_dim = nope;
  m.qk_rope_dim = rope_dim;
  m.v_head_dim = v;
  m.output_gate = gate;
  if (rope) m.rope = Rope{};
  return m;
}

// Nenya-like (small): no q LoRA, no RoPE, output gate.
MixerSpec nenya_like() { return mla_spec(4, 0, 24, 16, 8, 16, true, false); }
// DeepSeek-like (small): q LoRA, RoPE on the shared key, no gate; v width differs from nope.
MixerSpec deepseek_like() { return mla_spec(4, 32, 32, 16, 8, 12, false, true); }

ModelConfig config_for(int d) {
  ModelConfig c;
  c.d_model = d;
  c.norm.eps = 1e-6;
  return c;
}

// ---- The double transcription --------------------------------------------------------------

using Dvec = std::vector<double>;

Dvec matvec_d(const std::vector<float>& w, int64_t rows, int64_t cols, const double* x) {
  Dvec y(size_t(rows), 0.0);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t j = 0; j < cols; ++j) y[size_t(r)] += double(w[size_t(r * cols + j)]) * x[j];
  return y;
}

void rmsnorm_d(double* x, int64_t n, const Vec& gain, double eps) {
  double ss = 0;
  for (int64_t i = 0; i < n; ++i) ss += x[i] * x[i];
  const double r = 1.0 / std::sqrt(ss / double(n) + eps);
  for (int64_t i = 0; i < n; ++i) x[i] = x[i] * r * gain[size_t(i)];
}

// Rotate-half RoPE of x[0, rd) at pos, frequencies theta^(-2i/rd) (no scaling).
void rope_d(double* x, int rd, double theta, int64_t pos) {
  const int h = rd / 2;
  for (int i = 0; i < h; ++i) {
    const double a = double(pos) * std::pow(theta, -2.0 * i / rd);
    const double x0 = x[i], x1 = x[i + h];
    x[i] = x0 * std::cos(a) - x1 * std::sin(a);
    x[i + h] = x1 * std::cos(a) + x0 * std::sin(a);
  }
}

// The MLA output of token `pos` given the inputs xs[0..pos], straight from the equations.
Dvec naive_mla(const Layer& L, const std::vector<std::vector<float>>& xs, int64_t pos, double eps) {
  const MixerSpec& m = L.m;
  const int H = m.n_heads, nope = m.qk_nope_dim, R = m.qk_rope_dim, dqk = nope + R, dv = m.v_head_dim;
  const int lat = m.kv_lora_rank, d = L.d;
  const int rd = m.rope ? (m.rope->rotary_dim ? m.rope->rotary_dim : R) : 0;
  auto to_d = [](const std::vector<float>& v) { return Dvec(v.begin(), v.end()); };
  std::vector<Dvec> c(size_t(pos + 1)), kpe(size_t(pos + 1));
  for (int64_t t = 0; t <= pos; ++t) {
    const Dvec x = to_d(xs[size_t(t)]);
    Dvec kv = matvec_d(L.wkv_a, lat + R, d, x.data());
    rmsnorm_d(kv.data(), lat, L.w.kv_a_norm, eps);
    c[size_t(t)] = Dvec(kv.begin(), kv.begin() + lat);
    kpe[size_t(t)] = Dvec(kv.begin() + lat, kv.end());
    if (m.rope) rope_d(kpe[size_t(t)].data(), rd, m.rope->theta, t);
  }
  const Dvec x = to_d(xs[size_t(pos)]);
  Dvec q;
  if (m.q_lora_rank) {
    Dvec a = matvec_d(L.wq_a, m.q_lora_rank, d, x.data());
    rmsnorm_d(a.data(), m.q_lora_rank, L.w.q_a_norm, eps);
    q = matvec_d(L.wq_b, int64_t(H) * dqk, m.q_lora_rank, a.data());
  } else {
    q = matvec_d(L.wq, int64_t(H) * dqk, d, x.data());
  }
  const double scale = m.scale > 0 ? m.scale : 1.0 / std::sqrt(double(dqk));
  Dvec o(size_t(H * dv), 0.0);
  for (int h = 0; h < H; ++h) {
    double* qh = q.data() + h * dqk;
    if (m.rope) rope_d(qh + nope, rd, m.rope->theta, pos);
    Dvec s(size_t(pos + 1));
    double top = -INFINITY;
    for (int64_t t = 0; t <= pos; ++t) {
      double score = 0;
      for (int j = 0; j < nope; ++j) {  // k_nope = W_UK_h c_t
        double k = 0;
        for (int l = 0; l < lat; ++l) k += double(L.wk_b[size_t((h * nope + j) * lat + l)]) * c[size_t(t)][size_t(l)];
        score += qh[j] * k;
      }
      for (int j = 0; j < R; ++j) score += qh[nope + j] * kpe[size_t(t)][size_t(j)];
      s[size_t(t)] = score * scale;
      top = std::max(top, s[size_t(t)]);
    }
    double sum = 0;
    for (auto& e : s) sum += e = std::exp(e - top);
    for (int64_t t = 0; t <= pos; ++t)
      for (int j = 0; j < dv; ++j) {  // v = W_UV_h c_t
        double v = 0;
        for (int l = 0; l < lat; ++l) v += double(L.wv_b[size_t((h * dv + j) * lat + l)]) * c[size_t(t)][size_t(l)];
        o[size_t(h * dv + j)] += s[size_t(t)] / sum * v;
      }
  }
  if (m.output_gate) {
    const Dvec g = matvec_d(L.wg, int64_t(H) * dv, d, x.data());
    for (size_t i = 0; i < o.size(); ++i) o[i] *= 1.0 / (1.0 + std::exp(-g[i]));
  }
  return matvec_d(L.wo, d, int64_t(H) * dv, o.data());
}

// max_i |a_i - b_i| / (1 + |b_i|)
template <class A, class B>
double max_rel_diff(const A& a, const B& b) {
  double worst = 0;
  for (size_t i = 0; i < b.size(); ++i) worst = std::max(worst, std::abs(double(a[i]) - double(b[i])) / (1 + std::abs(double(b[i]))));
  return worst;
}

// A q8 matvec quantises its input vector to 8 bits per group (kernels/ops.h: |x - s q| <=
// s / 2 with s = max|x| / 127), which the absorbed path's f32 add_rows and the f32
// transcription do not: about 0.4% of each group's largest value per projection, ~1% after
// the chain of projections here (measured 0.9%). f32 / bf16 keep the tight bound.
double activation_tolerance(DType type, double f32_tolerance) {
  return type == DType::q8 ? 2e-2 : f32_tolerance;
}

// ---- Absorbed == reference ------------------------------------------------------------------

struct Case {
  std::string name;
  MixerSpec m;
  DType type;
};

std::vector<Case> cases() {
  MixerSpec partial = deepseek_like();  // rotates half the shared key, explicit softmax scale
  partial.rope->rotary_dim = 4;
  partial.scale = 0.3;
  MixerSpec no_nope = mla_spec(3, 0, 16, 0, 8, 8, true, true);  // no wk_b: the score is the shared key's
  return {{"nenya_f32", nenya_like(), DType::f32},
          {"deepseek_f32", deepseek_like(), DType::f32},
          {"nenya_q8", nenya_like(), DType::q8},
          {"deepseek_bf16", deepseek_like(), DType::bf16},
          {"partial_rotary_f32", partial, DType::f32},
          {"no_nope_f32", no_nope, DType::f32}};
}

TEST(MlaAbsorbed, EqualsReferenceOver1To50Tokens) {
  const int d = 64;
  uint32_t seed = 1;
  for (const Case& k : cases()) {
    SCOPED_TRACE(k.name);
    Layer L(k.m, d, k.type, 8, seed++);
    const ModelConfig c = config_for(d);
    MlaCache cache;
    cache.init(k.m, 50);
    MlaScratch s;
    s.reserve(k.m, 50);
    std::mt19937 rng(seed * 7919);
    std::vector<float> ref(d), abs(d);
    double worst = 0;
    for (int64_t pos = 0; pos < 50; ++pos) {
      const std::vector<float> x = randn(d, rng);
      mla_append(L.w, k.m, c, x.data(), pos, cache, s, nullptr);
      mla_attention(L.w, k.m, c, x.data(), pos, cache, s, ref.data(), nullptr);
      mla_attention_absorbed(L.w, k.m, c, x.data(), pos, cache, s, abs.data(), nullptr);
      worst = std::max(worst, max_rel_diff(abs, ref));
    }
    EXPECT_LE(worst, activation_tolerance(k.type, 1e-5));
    EXPECT_EQ(cache.count, 50);
  }
}

// ---- A batch (prefill's chunk) == mla_decode row by row ----------------------------------

// The batched projections (one GEMM per matrix), each row's cache entry and absorbed
// attention in order, then one W_o GEMM, against mla_decode / mla_append per row: 37 rows
// (odd, past one 16-row tile), every fifth only filling its cache entry (early exit), on
// q_lora (deepseek-like), gated (nenya-like) and quantised weights, with 2 threads.
TEST(MlaBatch, EqualsDecodeRowByRow) {
  const int d = 64;
  const int64_t n = 37;
  kernels::ThreadPool pool(2);
  uint32_t seed = 50;
  for (const Case& k : cases()) {
    SCOPED_TRACE(k.name);
    Layer L(k.m, d, k.type, 8, seed++);
    const ModelConfig c = config_for(d);
    std::mt19937 rng(seed * 31);
    const std::vector<float> x = randn(n * d, rng);
    std::vector<float> query_x;
    std::vector<int64_t> attends;
    for (int64_t t = 0; t < n; ++t)
      if (t % 5 != 3) attends.push_back(t), query_x.insert(query_x.end(), x.begin() + t * d, x.begin() + (t + 1) * d);
    const int64_t nq = int64_t(attends.size());
    // Row by row: the decode path.
    MlaCache one_cache, batch_cache;
    one_cache.init(k.m, n), batch_cache.init(k.m, n);
    MlaScratch s;
    s.reserve(k.m, n);
    std::vector<float> ref(size_t(nq * d));
    for (int64_t t = 0, q = 0; t < n; ++t) {
      if (t % 5 == 3) mla_append(L.w, k.m, c, x.data() + t * d, t, one_cache, s, &pool);
      else mla_decode(L.w, k.m, c, x.data() + t * d, t, one_cache, s, ref.data() + q++ * d, &pool);
    }
    // The batch.
    MlaBatch b;
    mla_batch_inputs({L.w, k.m, c, x.data(), d, n, true, query_x.data(), nq}, b, &pool);
    for (int64_t t = 0, q = 0; t < n; ++t) {
      mla_append_projected(L.w, k.m, c, b.kv_row(t), t, batch_cache);
      if (t % 5 != 3) mla_attend_projected(L.w, k.m, b.q_row(q), t, batch_cache, s, b.o_row(q), &pool), ++q;
    }
    std::vector<float> got(size_t(nq * d), NAN);
    mla_batch_output(L.w, nq, b, got.data(), d, &pool);
    // Both paths quantise each row's activations alike on q8 / q4: the same tight bound.
    EXPECT_LE(max_rel_diff(got, ref), 1e-5);
    ASSERT_EQ(batch_cache.count, n);
    std::vector<float> buf_a(size_t(one_cache.width())), buf_b(buf_a.size());
    double worst = 0;
    for (int64_t t = 0; t < n; ++t) {
      const float* a = one_cache.row(t, buf_a.data());
      const float* bb = batch_cache.row(t, buf_b.data());
      worst = std::max(worst, max_rel_diff(std::vector<float>(a, a + one_cache.width()),
                                           std::vector<float>(bb, bb + one_cache.width())));
    }
    EXPECT_LE(worst, 1e-5) << "the cache entries";
  }
}

// The absorbed form splits the cache into up to 4 parts of whole 64-row tiles and each part's
// heads into groups (absorbed_values), by the length and the head count alone. The head counts
// reach every grouping: 4 heads (one group of four), 6 (no group of a multiple of four: groups
// of one or two heads, which the tile kernels take one at a time), 16 (groups of four at one
// part, of eight at four); the lengths one to five tiles, across the 64-row tile bounds.
const std::vector<int> kHeadCounts = {4, 6, 16};

// The split changes nothing: same bits with 1 or 2 threads, on caches long enough to take the
// parallel path, and the reference form's values.
TEST(MlaAbsorbed, ThreadCountIndependent) {
  const int d = 96;
  for (int heads : kHeadCounts) {
    SCOPED_TRACE("heads " + std::to_string(heads));
    const MixerSpec m = mla_spec(heads, 0, 64, 16, 8, 16, true, true);
    Layer L(m, d, DType::f32, 0, 11);
    const ModelConfig c = config_for(d);
    MlaCache cache;
    cache.init(m, 300);
    MlaScratch s;
    s.reserve(m, 300);
    kernels::ThreadPool pool(2);
    std::mt19937 rng(12);
    std::vector<float> one(d), two(d), ref(d);
    const std::vector<int64_t> checked = {40, 100, 150, 199, 299};
    for (int64_t pos = 0; pos < 300; ++pos) {
      const std::vector<float> x = randn(d, rng);
      mla_append(L.w, m, c, x.data(), pos, cache, s, &pool);
      if (std::find(checked.begin(), checked.end(), pos) == checked.end()) continue;
      mla_attention_absorbed(L.w, m, c, x.data(), pos, cache, s, one.data(), nullptr);
      mla_attention_absorbed(L.w, m, c, x.data(), pos, cache, s, two.data(), &pool);
      mla_attention(L.w, m, c, x.data(), pos, cache, s, ref.data(), &pool);
      for (int i = 0; i < d; ++i) ASSERT_EQ(one[size_t(i)], two[size_t(i)]) << "pos " << pos << " i " << i;
      EXPECT_LE(max_rel_diff(two, ref), 1e-5) << "pos " << pos;
    }
  }
}

// The tiled absorbed form on bf16, f16 and q8 caches equals the reference form reading the same
// cache, over lengths that cross the 64-row tiles and the split into parts, with 2 threads.
TEST(MlaAbsorbed, EqualsReferenceOnEachCacheType) {
  const int d = 64;
  for (int heads : kHeadCounts) {
    const MixerSpec m = mla_spec(heads, 0, 64, 16, 32, 16, true, true);
    Layer L(m, d, DType::f32, 0, 31);
    const ModelConfig c = config_for(d);
    kernels::ThreadPool pool(2);
    for (KvType t : {KvType::f32, KvType::bf16, KvType::f16, KvType::q8}) {
      SCOPED_TRACE(std::string(to_string(t)) + ", heads " + std::to_string(heads));
      MlaCache cache;
      cache.init(m, 300, t);
      EXPECT_EQ(cache.type(), t);
      MlaScratch s;
      s.reserve(m, 300);
      std::mt19937 rng(32);
      std::vector<float> ref(d), abs(d);
      double worst = 0;
      for (int64_t pos = 0; pos < 300; ++pos) {
        const std::vector<float> x = randn(d, rng);
        mla_append(L.w, m, c, x.data(), pos, cache, s, &pool);
        if (pos % 7 != 0 && pos != 63 && pos != 64 && pos != 299) continue;
        mla_attention(L.w, m, c, x.data(), pos, cache, s, ref.data(), nullptr);
        mla_attention_absorbed(L.w, m, c, x.data(), pos, cache, s, abs.data(), &pool);
        worst = std::max(worst, max_rel_diff(abs, ref));
      }
      EXPECT_LE(worst, 1e-5);
    }
  }
}

// ---- Reference == the equations ---------------------------------------------------------------

TEST(MlaReference, EqualsDoubleTranscription) {
  const int d = 64;
  uint32_t seed = 100;
  for (const Case& k : cases()) {
    SCOPED_TRACE(k.name);
    Layer L(k.m, d, k.type, 8, seed++);
    const ModelConfig c = config_for(d);
    MlaCache cache;
    cache.init(k.m, 20);
    MlaScratch s;
    s.reserve(k.m, 20);
    std::mt19937 rng(seed * 31);
    std::vector<std::vector<float>> xs;
    std::vector<float> ref(d), abs(d);
    for (int64_t pos = 0; pos < 20; ++pos) {
      xs.push_back(randn(d, rng));
      mla_append(L.w, k.m, c, xs.back().data(), pos, cache, s, nullptr);
      if (pos % 6 != 0 && pos != 19) continue;  // the transcription is O(n^2): check a few positions
      SCOPED_TRACE("pos " + std::to_string(pos));
      const Dvec want = naive_mla(L, xs, pos, c.norm.eps);
      mla_attention(L.w, k.m, c, xs.back().data(), pos, cache, s, ref.data(), nullptr);
      mla_attention_absorbed(L.w, k.m, c, xs.back().data(), pos, cache, s, abs.data(), nullptr);
      EXPECT_LE(max_rel_diff(ref, want), activation_tolerance(k.type, 2e-5));
      EXPECT_LE(max_rel_diff(abs, want), activation_tolerance(k.type, 2e-5));
    }
  }
}

// The output may overwrite the input (the session's residual buffers).
TEST(MlaReference, OutputMayAliasInput) {
  const int d = 64;
  const MixerSpec m = nenya_like();
  Layer L(m, d, DType::f32, 0, 5);
  const ModelConfig c = config_for(d);
  MlaCache cache;
  cache.init(m, 4);
  MlaScratch s;
  s.reserve(m, 4);
  std::mt19937 rng(6);
  std::vector<float> x = randn(d, rng), y(d);
  mla_append(L.w, m, c, x.data(), 0, cache, s, nullptr);
  mla_attention_absorbed(L.w, m, c, x.data(), 0, cache, s, y.data(), nullptr);
  std::vector<float> inplace = x;
  mla_attention_absorbed(L.w, m, c, inplace.data(), 0, cache, s, inplace.data(), nullptr);
  EXPECT_EQ(inplace, y);
}

// One scratch reserved for two layers of different widths and contexts (the session's use)
// gives each layer the result of a scratch of its own.
TEST(MlaScratch, ServesLayersOfDifferentWidths) {
  const int d = 64;
  const MixerSpec a = nenya_like(), b = deepseek_like();
  Layer la(a, d, DType::f32, 0, 51), lb(b, d, DType::f32, 0, 52);
  const ModelConfig c = config_for(d);
  MlaScratch shared, own_a, own_b;
  shared.reserve(a, 10);
  shared.reserve(b, 30);
  own_a.reserve(a, 30);
  own_b.reserve(b, 30);
  MlaCache ca, cb;
  ca.init(a, 30);
  cb.init(b, 30);
  std::mt19937 rng(53);
  std::vector<float> y1(d), y2(d);
  for (int64_t pos = 0; pos < 30; ++pos) {
    const std::vector<float> x = randn(d, rng);
    mla_append(la.w, a, c, x.data(), pos, ca, shared, nullptr);
    mla_append(lb.w, b, c, x.data(), pos, cb, shared, nullptr);
    mla_attention_absorbed(la.w, a, c, x.data(), pos, ca, shared, y1.data(), nullptr);
    mla_attention_absorbed(la.w, a, c, x.data(), pos, ca, own_a, y2.data(), nullptr);
    ASSERT_EQ(y1, y2) << pos;
    mla_attention_absorbed(lb.w, b, c, x.data(), pos, cb, shared, y1.data(), nullptr);
    mla_attention_absorbed(lb.w, b, c, x.data(), pos, cb, own_b, y2.data(), nullptr);
    ASSERT_EQ(y1, y2) << pos;
  }
}

// ---- The cache ----------------------------------------------------------------------------------

// Nenya's widths: 320-d latent + 32-d shared key = 352 values per token. Each c is the RMS-
// normalised W_kva x times the gain (so RMS(c / gain) = 1); k_pe is W_kva x's tail as is
// (Nenya: no RoPE) or rotated at its position (DeepSeek).
TEST(MlaCache, HoldsNormalisedLatentAndSharedKey) {
  const int d = 48;
  for (bool rope : {false, true}) {
    SCOPED_TRACE(rope ? "rope" : "no rope");
    const MixerSpec m = mla_spec(12, 0, 320, 8, 32, 8, !rope, rope);
    Layer L(m, d, DType::f32, 0, rope ? 21 : 22);
    const ModelConfig c = config_for(d);
    MlaCache cache;
    cache.init(m, 6);
    EXPECT_EQ(cache.width(), 352);
    EXPECT_EQ(cache.bytes(), size_t(6 * 352) * sizeof(float));
    std::vector<float> buf(352);
    MlaScratch s;
    s.reserve(m, 6);
    std::mt19937 rng(23);
    for (int64_t pos = 0; pos < 6; ++pos) {
      const std::vector<float> x = randn(d, rng, 3.0f);
      mla_append(L.w, m, c, x.data(), pos, cache, s, nullptr);
      ASSERT_EQ(cache.count, pos + 1);
      Dvec kv = matvec_d(L.wkv_a, 352, d, Dvec(x.begin(), x.end()).data());
      const float* lat = cache.row(pos, buf.data());
      double ss = 0;
      for (int i = 0; i < 320; ++i) ss += std::pow(double(lat[i]) / L.w.kv_a_norm[size_t(i)], 2);
      EXPECT_NEAR(std::sqrt(ss / 320), 1.0, 1e-5);
      rmsnorm_d(kv.data(), 320, L.w.kv_a_norm, c.norm.eps);
      if (rope) rope_d(kv.data() + 320, 32, m.rope->theta, pos);
      for (int i = 0; i < 352; ++i) ASSERT_NEAR(lat[i], kv[size_t(i)], 1e-5 * (1 + std::abs(kv[size_t(i)]))) << i;
    }
    const std::vector<float> x = randn(d, rng);
    EXPECT_THROW(mla_append(L.w, m, c, x.data(), 6, cache, s, nullptr), std::runtime_error);  // full
  }
}

TEST(MlaCache, RejectsOutOfOrderAndMissingTokens) {
  const int d = 32;
  const MixerSpec m = nenya_like();
  Layer L(m, d, DType::f32, 0, 31);
  const ModelConfig c = config_for(d);
  MlaCache cache;
  cache.init(m, 8);
  MlaScratch s;
  s.reserve(m, 8);
  std::vector<float> x(d, 0.5f), y(d);
  EXPECT_THROW(mla_append(L.w, m, c, x.data(), 1, cache, s, nullptr), std::runtime_error);
  mla_append(L.w, m, c, x.data(), 0, cache, s, nullptr);
  EXPECT_THROW(mla_attention(L.w, m, c, x.data(), 1, cache, s, y.data(), nullptr), std::runtime_error);
  EXPECT_THROW(mla_attention_absorbed(L.w, m, c, x.data(), 1, cache, s, y.data(), nullptr), std::runtime_error);
  MlaScratch small;
  EXPECT_THROW(mla_attention_absorbed(L.w, m, c, x.data(), 0, cache, small, y.data(), nullptr), std::runtime_error);
  MixerSpec not_mla = m;
  not_mla.kind = MixerKind::attention;
  EXPECT_THROW(cache.init(not_mla, 8), std::runtime_error);
}

// ---- RoPE configuration ----------------------------------------------------------------------

TEST(MlaRope, FrequenciesAndScaling) {
  EXPECT_TRUE(mla_rope(nenya_like()).inv_freq.empty());
  MixerSpec m = deepseek_like();
  const std::vector<float> f = mla_rope(m).inv_freq;
  ASSERT_EQ(f.size(), 4u);
  EXPECT_FLOAT_EQ(f[0], 1.0f);
  EXPECT_NEAR(f[1], std::pow(10000.0, -2.0 / 8), 1e-7);
  // Linear interpolation divides every frequency.
  m.rope->linear_factor = 8;
  EXPECT_NEAR(mla_rope(m).inv_freq[1], std::pow(10000.0, -2.0 / 8) / 8, 1e-8);
  // Weights wired without the frequencies are refused rather than read out of bounds.
  m.rope->linear_factor = 1;
  Layer L(m, 32, DType::f32, 0, 41);
  L.w.rope.inv_freq.clear();
  MlaCache cache;
  cache.init(m, 2);
  MlaScratch s;
  s.reserve(m, 2);
  std::vector<float> x(32, 1.0f);
  EXPECT_THROW(mla_append(L.w, m, config_for(32), x.data(), 0, cache, s, nullptr), std::runtime_error);
}

}  // namespace
}  // namespace wren
