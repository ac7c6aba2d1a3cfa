// Gated DeltaNet (gdn) and Gated DeltaNet-2 (gdn2): the token-side projections shared by
// decode and prefill, the recurrence one token at a time, and the chunked WY/UT form.
//
// Per token (seed 002 A13, equations 1-8; plain gdn as arXiv 2412.06464):
//   (1) q, k, v = SiLU(Conv1d(W x)) over the current and K-1 previous tokens; q, k <- q/|q|, k/|k|
//   (2) g = -e^{A_h} softplus(W_f x + b_f)        gdn2: per key channel; gdn: one per head
//   (3) b = sigmoid(W_b x)                          gdn2: per key channel; gdn: beta per head
//   (4) w = sigmoid(W_w x)                          gdn2: per value channel; gdn: beta again
//   (5) S' = Diag(e^g) S
//   (6) S  = S' + k (w * v - S'^T (b * k))^T
//   (7) o  = S^T q / sqrt(d_k)
//   (8) y  = W_o [RMSNorm(o) * sigma(W_g x)]       sigma = sigmoid (gdn2) or SiLU (gdn)
// Value head h reads query/key head h / (h_v / h), as FLA repeats q, k ('h d -> (h g) d').
#include "model/gated_deltanet.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>

#include "kernels/ops.h"
#include "model/region.h"

namespace wren {

namespace {

constexpr int kChunk = 64;        // prefill chunk length C
constexpr float kL2Eps = 1e-6f;   // q, k <- x / sqrt(sum x^2 + eps), as FLA's l2norm

// The widths of one mixer.
struct Dims {
  int hq, hv, dk, dv, K, group;  // group: value heads per query/key head
  int64_t cqk, cv;               // channels of q (= k) and of v
  bool per_channel;              // gdn2: g, b, w per channel; gdn: one g and beta per head
};

Dims dims_of(const MixerSpec& m) {
  Dims d{};
  d.hq = m.n_heads, d.hv = m.value_heads(), d.dk = m.head_dim, d.dv = m.value_dim(), d.K = m.conv_kernel;
  if (m.kind != MixerKind::gdn && m.kind != MixerKind::gdn2)
    throw std::invalid_argument(std::string("gated_deltanet: mixer kind ") + to_string(m.kind) + " is not gdn / gdn2");
  if (d.hq <= 0 || d.dk <= 0 || d.dv <= 0 || d.K <= 0 || d.hv % d.hq != 0)
    throw std::invalid_argument("gated_deltanet: n_heads " + std::to_string(d.hq) + ", n_v_heads " +
                                std::to_string(d.hv) + ", head_dim " + std::to_string(d.dk) + ", v_head_dim " +
                                std::to_string(d.dv) + ", conv_kernel " + std::to_string(d.K) +
                                ": expected positive widths and n_v_heads a multiple of n_heads");
  d.group = d.hv / d.hq;
  d.cqk = int64_t(d.hq) * d.dk;
  d.cv = int64_t(d.hv) * d.dv;
  d.per_channel = m.kind == MixerKind::gdn2;
  return d;
}

// One value head's buffers inside GdnScratch::chunk.
struct HeadBuffers {
  float* E;      // [C][d_k]: e^{gamma_r - gamma_s} * k_s for the current r
  float* A;      // [C]: row r of StrictLower(diag(b) K K^T * Gamma), erase-weighted
  float* P;      // [C]: row r of (Q K^T * Gamma), lower including the diagonal
  float* delta;  // [C][d_v]: the corrections w * v - S'^T (b * k) (V' of the WY form);
                 // decode: rows 0-2 hold S'^T (b * k), S'^T q and delta
  float* ek;     // [d_k]: e^{gamma} (decode: e^g)
  float* bk;     // [d_k]: b * k (times e^{gamma_r} in prefill, e^g in decode)
  float* qe;     // [d_k]: e^{gamma_r} * q_r (decode: e^g * q)
};

int64_t head_floats(const Dims& d) { return int64_t(kChunk) * d.dk + 2 * kChunk + int64_t(kChunk) * d.dv + 3 * d.dk; }

HeadBuffers head_buffers(GdnScratch& s, const Dims& d, int h) {
  float* p = s.chunk.data() + h * head_floats(d);
  HeadBuffers b{};
  b.E = p, p += int64_t(kChunk) * d.dk;
  b.A = p, p += kChunk;
  b.P = p, p += kChunk;
  b.delta = p, p += int64_t(kChunk) * d.dv;
  b.ek = p, p += d.dk;
  b.bk = p, p += d.dk;
  b.qe = p;
  return b;
}

// The gate projections: gdn2's decay, erase, write and output gate; plain gdn's per-head decay
// and beta and the output gate. Each low-rank one has its own slice of the low_rank buffer.
constexpr int kGateProjections = 4;

// Buffer sizes for T tokens at a time.
struct Sizes {
  size_t qk_in, v_in, qk, v, key_gates, value_gates, low_rank, per_head, gamma, chunk;
};

Sizes sizes_of(const MixerSpec& m, const Dims& d, int64_t T) {
  const int64_t taps = d.K - 1, rank = std::max(m.gate_rank, m.out_gate_rank);
  return {size_t((taps + T) * d.cqk), size_t((taps + T) * d.cv), size_t(T * d.cqk), size_t(T * d.cv),
          size_t(T * d.hv * d.dk), size_t(T * d.cv), size_t(kGateProjections * T * rank), size_t(2 * T * d.hv),
          size_t(int64_t(d.hv) * kChunk * d.dk), size_t(d.hv * head_floats(d))};
}

void grow(std::vector<float>& v, size_t n) { if (v.size() < n) v.resize(n); }

void check(const MixerSpec& m, const Dims& d, const GdnState& st, const GdnScratch& s, int64_t T) {
  if (st.taps != d.K - 1 || st.v_heads != d.hv || st.d_k != d.dk || st.d_v != d.dv || st.qk_channels != d.cqk)
    throw std::invalid_argument("gated_deltanet: the state was not initialised for this mixer (GdnState::init)");
  const Sizes z = sizes_of(m, d, T);
  if (s.max_tokens < T || s.q_in.size() < z.qk_in || s.v_in.size() < z.v_in || s.o.size() < z.v ||
      s.log_decay.size() < z.key_gates || s.low_rank.size() < z.low_rank || s.per_head.size() < z.per_head ||
      s.gamma.size() < z.gamma || s.chunk.size() < z.chunk)
    throw std::invalid_argument("gated_deltanet: the scratch is too small for this mixer and " + std::to_string(T) +
                                " tokens (GdnScratch::reserve)");
}

// y = W x for T tokens: the decode kernel for one token, the batched product (integer GEMM
// tiles on q8 / q4, each row's values its matvec's) for more.
void project(const MatrixView& w, const float* x, int64_t T, float* y, kernels::ThreadPool* pool) {
  if (T == 1) return kernels::matvec(w, x, y, pool);
  const BatchProduct p{w, x, w.cols, y, w.rows, T};
  run_batch_products(std::span(&p, 1), pool);
}

// (1) SiLU(causal depthwise conv). `in` holds [K-1 + T][C]: the K-1 previous inputs, then the
// T current ones, so input row t + j is token t - (K-1) + j, which tap j of channel c weights:
//   out[t][c] = SiLU(sum_j conv[c][j] in[t + j][c]), for the channels c of [c0, c1).
void short_conv(const float* in, const Vec& conv, int64_t C, int K, int64_t T, int64_t c0, int64_t c1, float* out) {
  for (int64_t t = 0; t < T; ++t) {
    float* y = out + t * C;
    std::fill(y + c0, y + c1, 0.0f);
    for (int j = 0; j < K; ++j) {
      const float* xj = in + (t + j) * C;
      for (int64_t c = c0; c < c1; ++c) y[c] += conv[size_t(c * K + j)] * xj[c];
    }
    kernels::silu(y + c0, c1 - c0, y + c0);
  }
}

// One input's conv over channels [c0, c1): the tail's K-1 rows go before the projections
// (which project_inputs wrote after them); afterwards the window's last K-1 rows are the new
// tail. Channels are independent, so disjoint ranges may run on different threads.
void convolve_channels(std::vector<float>& tail, float* in, const Vec& conv, int64_t C, int K, int64_t T, int64_t c0,
                       int64_t c1, float* out) {
  for (int64_t j = 0; j + 1 < K; ++j) std::copy(tail.data() + j * C + c0, tail.data() + j * C + c1, in + j * C + c0);
  short_conv(in, conv, C, K, T, c0, c1, out);
  for (int64_t j = 0; j + 1 < K; ++j) std::copy(in + (T + j) * C + c0, in + (T + j) * C + c1, tail.data() + j * C + c0);
}

// A projection of x: y = W x, or W_b (W_a x) when it is low-rank (then `low_rank` holds W_a x).
struct Projection {
  const MatrixView *full, *a, *b;
  float* y;
  float* low_rank;
  bool two_step() const { return !present(*full); }
};

// The gate projections of the mixer (see kGateProjections); returns how many.
int gate_projections(const GdnWeights& w, const Dims& d, int64_t T, GdnScratch& s, int64_t rank, Projection* p) {
  static const MatrixView none;
  float* lr = s.low_rank.data();
  const auto at = [&](int j) { return lr + j * T * rank; };
  int n = 0;
  if (d.per_channel) {
    p[n++] = {&w.w_decay, &w.w_decay_a, &w.w_decay_b, s.log_decay.data(), at(0)};
    p[n++] = {&w.w_erase, &w.w_erase_a, &w.w_erase_b, s.erase.data(), at(1)};
    p[n++] = {&w.w_write, &w.w_write_a, &w.w_write_b, s.write.data(), at(2)};
  } else {
    p[n++] = {&w.w_decay, &none, &none, s.per_head.data(), nullptr};
    p[n++] = {&w.w_beta, &none, &none, s.per_head.data() + T * d.hv, nullptr};
  }
  p[n++] = {&w.wg, &w.wg_a, &w.wg_b, s.gate.data(), at(3)};
  return n;
}

// The first step of every projection of x: W_q x, W_k x, W_v x (after the conv tails) and each
// gate's full product or W_a x. One token: a single region; a prompt: one tiled product each.
void project_inputs(const GdnWeights& w, const Dims& d, const float* x, int64_t T, GdnScratch& s, int64_t rank,
                    kernels::ThreadPool* pool) {
  const int64_t taps = d.K - 1;
  Projection gates[kGateProjections];
  const int n = gate_projections(w, d, T, s, rank, gates);
  Product p[3 + kGateProjections] = {{w.wq, x, s.q_in.data() + taps * d.cqk},
                                     {w.wk, x, s.k_in.data() + taps * d.cqk},
                                     {w.wv, x, s.v_in.data() + taps * d.cv}};
  for (int j = 0; j < n; ++j)
    p[3 + j] = gates[j].two_step() ? Product{*gates[j].a, x, gates[j].low_rank} : Product{*gates[j].full, x, gates[j].y};
  if (T == 1) return run_products(std::span(p, size_t(3 + n)), pool);
  BatchProduct batch[3 + kGateProjections];  // one region; x quantised once for all of them
  for (int j = 0; j < 3 + n; ++j) batch[j] = {p[j].w, x, p[j].w.cols, p[j].y, p[j].w.rows, T};
  run_batch_products(std::span(batch, size_t(3 + n)), pool);
}

// (1) q, k, v = SiLU(Conv1d(W x)), then q, k scaled to unit length per head, for query/key
// heads [g0, g1) and their value heads; advances those channels' tails.
void convolve_heads(const GdnWeights& w, const Dims& d, int64_t T, int64_t g0, int64_t g1, GdnState& st,
                    GdnScratch& s) {
  const int64_t value_channels = int64_t(d.group) * d.dv;  // of one query/key head
  convolve_channels(st.conv_q, s.q_in.data(), w.conv_q, d.cqk, d.K, T, g0 * d.dk, g1 * d.dk, s.q.data());
  convolve_channels(st.conv_k, s.k_in.data(), w.conv_k, d.cqk, d.K, T, g0 * d.dk, g1 * d.dk, s.k.data());
  convolve_channels(st.conv_v, s.v_in.data(), w.conv_v, d.cv, d.K, T, g0 * value_channels, g1 * value_channels,
                    s.v.data());
  for (int64_t t = 0; t < T; ++t)
    for (int64_t g = g0; g < g1; ++g) {
      float* q = s.q.data() + (t * d.hq + g) * d.dk;
      float* k = s.k.data() + (t * d.hq + g) * d.dk;
      kernels::l2_normalize(q, d.dk, kL2Eps, q);
      kernels::l2_normalize(k, d.dk, kL2Eps, k);
    }
}

// (2)-(4) and the output gate of (8) for value head h of token t, in place over their
// pre-activations:
//   gdn2: g = -e^{A_h} softplus(W_f x + b_f) and b = sigmoid(W_b x) per key channel,
//         w = sigmoid(W_w x) per value channel, gate = sigmoid(W_g x) (seed 002);
//   gdn:  one value per head broadcast over the channels, so one recurrence serves both:
//         g = -e^{A_h} softplus(w_a . x + dt_bias), b = w = beta = sigmoid(w_b . x),
//         gate = SiLU(W_g x) (FLA).
void head_gates(const GdnWeights& w, const Dims& d, int64_t T, int64_t t, int h, GdnScratch& s) {
  const int64_t key = (t * d.hv + h) * d.dk, val = (t * d.hv + h) * d.dv;
  float* g = s.log_decay.data() + key;
  const float decay_scale = -std::exp(w.a_log[size_t(h)]);
  if (d.per_channel) {
    const float* bias = w.decay_bias.data() + int64_t(h) * d.dk;
    for (int i = 0; i < d.dk; ++i) g[i] += bias[i];
    kernels::softplus(g, d.dk, g);
    for (int i = 0; i < d.dk; ++i) g[i] *= decay_scale;
    kernels::sigmoid(s.erase.data() + key, d.dk, s.erase.data() + key);
    kernels::sigmoid(s.write.data() + val, d.dv, s.write.data() + val);
    kernels::sigmoid(s.gate.data() + val, d.dv, s.gate.data() + val);
    return;
  }
  float* a = s.per_head.data() + t * d.hv + h;
  float* beta = s.per_head.data() + T * d.hv + t * d.hv + h;
  *a += w.decay_bias[size_t(h)];
  kernels::softplus(a, 1, a);
  kernels::sigmoid(beta, 1, beta);
  std::fill_n(g, d.dk, decay_scale * *a);
  std::fill_n(s.erase.data() + key, d.dk, *beta);
  std::fill_n(s.write.data() + val, d.dv, *beta);
  kernels::silu(s.gate.data() + val, d.dv, s.gate.data() + val);
}

// The second step of the low-rank gate projections for value head h: its rows of W_b (W_a x).
void head_low_rank(const GdnWeights& w, const Dims& d, GdnScratch& s, int64_t rank, int h) {
  Projection gates[kGateProjections];
  const int n = gate_projections(w, d, 1, s, rank, gates);
  for (int j = 0; j < n; ++j) {
    if (!gates[j].two_step()) continue;
    const int64_t rows = gates[j].b->rows / d.hv;
    kernels::matvec(gates[j].b->slice_rows(h * rows, rows), gates[j].low_rank, gates[j].y + h * rows, nullptr);
  }
}

// A prompt's gate inputs: the low-rank second steps, then (2)-(4) and the gate per token and head.
void prepare_gates(const GdnWeights& w, const Dims& d, int64_t T, GdnScratch& s, int64_t rank,
                   kernels::ThreadPool* pool) {
  Projection gates[kGateProjections];
  const int n = gate_projections(w, d, T, s, rank, gates);
  for (int j = 0; j < n; ++j)
    if (gates[j].two_step()) project(*gates[j].b, gates[j].low_rank, T, gates[j].y, pool);
  for (int64_t t = 0; t < T; ++t)
    for (int h = 0; h < d.hv; ++h) head_gates(w, d, T, t, h, s);
}

// (8), before W_o: o <- RMSNorm(o) * gate for value head h of token t (the heads share the gain).
void gate_head_output(const GdnWeights& w, const ModelConfig& c, const Dims& d, int64_t t, int h, GdnScratch& s) {
  float* o = s.o.data() + (t * d.hv + h) * d.dv;
  const float* gate = s.gate.data() + (t * d.hv + h) * d.dv;
  kernels::rmsnorm(o, w.o_norm.data(), d.dv, float(c.norm.eps), c.norm.unit_offset, o);
  for (int j = 0; j < d.dv; ++j) o[j] *= gate[j];
}

// Pointers to value head h's inputs of token t.
struct TokenInputs {
  const float *q, *k, *v, *g, *b, *w;
};
TokenInputs inputs(const GdnScratch& s, const Dims& d, int64_t t, int h) {
  const int64_t qk = (t * d.hq + h / d.group) * d.dk, key = (t * d.hv + h) * d.dk, val = (t * d.hv + h) * d.dv;
  return {s.q.data() + qk, s.k.data() + qk, s.v.data() + val, s.log_decay.data() + key, s.erase.data() + key,
          s.write.data() + val};
}

// One token of value head h: equations (5)-(7) on S [d_k][d_v], o [d_v], in two passes over S.
// With e = e^g, S'^T (b * k) = S^T (e * b * k), and S^T q after the update is
// S'^T q + (q . k) delta, so both products come from the old state: S is streamed once
// (kernels::state_products) weighted by e * b * k and by e * q, and a second pass (from L2)
// writes S = Diag(e) S + k delta^T.
void recur(const Dims& d, const TokenInputs& in, float* S, HeadBuffers& buf, float* o) {
  const int64_t dk = d.dk, dv = d.dv;
  kernels::exp(in.g, dk, buf.ek);
  for (int64_t i = 0; i < dk; ++i) buf.bk[i] = buf.ek[i] * in.b[i] * in.k[i], buf.qe[i] = buf.ek[i] * in.q[i];
  // erased = S'^T (b * k), read = S'^T q.
  float* erased = buf.delta;
  float* read = buf.delta + dv;
  float* delta = buf.delta + 2 * dv;
  kernels::state_products(S, dk, dv, buf.bk, buf.qe, erased, read);
  // (6) delta = w * v - S'^T (b * k); (7) o = (S'^T q + (q . k) delta) / sqrt(d_k).
  const float qk = kernels::dot(in.q, in.k, dk);
  const float scale = 1.0f / std::sqrt(float(dk));
  for (int64_t j = 0; j < dv; ++j) {
    delta[j] = in.w[j] * in.v[j] - erased[j];
    o[j] = scale * (read[j] + qk * delta[j]);
  }
  // (5)-(6) S = Diag(e^g) S + k delta^T.
  kernels::state_decay_add(S, dk, dv, buf.ek, in.k, delta);
}

// Tokens [t0, t0 + L) of value head h (L <= C) in the WY/UT form. With S0 the chunk-start state
// and gamma_r = sum_{s <= r} g_s the within-chunk cumulative log-decay (per key channel),
// unrolling (5)-(6) gives, for the corrections delta_r = w_r * v_r - S'_r^T (b_r * k_r):
//   S_r = Diag(e^{gamma_r}) S0 + sum_{s <= r} (e^{gamma_r - gamma_s} * k_s) delta_s^T
//   (I + A) Delta = (w * V) - (b * K * e^gamma) S0,  A_rs = sum_i b_ri k_ri k_si e^{gamma_ri - gamma_si} (s < r)
// which is REFERENCES.md's V' = U - W S0 with T = (I + A)^-1, U = T (w * V) and
// W = T (b * K * e^gamma); we solve it by forward substitution rather than forming T. Then
//   o_r = [S0^T (e^{gamma_r} * q_r) + sum_{s <= r} P_rs delta_s] / sqrt(d_k),  P_rs = sum_i q_ri k_si e^{gamma_ri - gamma_si}
//   S  <- Diag(e^{gamma_L}) S0 + sum_s (e^{gamma_L - gamma_s} * k_s) delta_s^T.
// Every exponent is gamma_r - gamma_s with r >= s, or gamma_r alone: never positive, so nothing
// overflows however fast a channel decays. gamma is summed in double so that differences of
// large cumulative sums keep their precision. (In the code the earlier token s is called p.)
void chunk_wy(const Dims& d, GdnScratch& s, int64_t t0, int64_t L, int h, float* S, double* gamma,
              HeadBuffers& buf) {
  const int64_t dk = d.dk, dv = d.dv;
  for (int64_t r = 0; r < L; ++r) {
    const float* g = inputs(s, d, t0 + r, h).g;
    for (int64_t i = 0; i < dk; ++i) gamma[r * dk + i] = (r ? gamma[(r - 1) * dk + i] : 0.0) + g[i];
  }
  const float scale = 1.0f / std::sqrt(float(dk));
  for (int64_t r = 0; r < L; ++r) {
    const TokenInputs in = inputs(s, d, t0 + r, h);
    float* delta_r = buf.delta + r * dv;
    float* o_r = s.o.data() + ((t0 + r) * d.hv + h) * dv;
    // The chunk-start state's part: delta_r = w_r * v_r - S0^T (e^{gamma_r} * b_r * k_r),
    // o_r = S0^T (e^{gamma_r} * q_r).
    for (int64_t i = 0; i < dk; ++i) buf.ek[i] = float(gamma[r * dk + i]);
    kernels::exp(buf.ek, dk, buf.ek);
    for (int64_t i = 0; i < dk; ++i) buf.bk[i] = buf.ek[i] * in.b[i] * in.k[i], buf.qe[i] = buf.ek[i] * in.q[i];
    for (int64_t j = 0; j < dv; ++j) delta_r[j] = in.w[j] * in.v[j];
    std::fill_n(o_r, dv, 0.0f);
    for (int64_t i = 0; i < dk; ++i) {
      kernels::axpy(-buf.bk[i], S + i * dv, dv, delta_r);
      kernels::axpy(buf.qe[i], S + i * dv, dv, o_r);
    }
    // Row r of A and P from E_p = e^{gamma_r - gamma_p} * k_p, p <= r.
    for (int64_t i = 0; i < dk; ++i) buf.bk[i] = in.b[i] * in.k[i];
    for (int64_t p = 0; p <= r; ++p)
      for (int64_t i = 0; i < dk; ++i) buf.E[p * dk + i] = float(gamma[r * dk + i] - gamma[p * dk + i]);
    kernels::exp(buf.E, (r + 1) * dk, buf.E);
    for (int64_t p = 0; p <= r; ++p) {
      const float* k_p = inputs(s, d, t0 + p, h).k;
      float* e = buf.E + p * dk;
      for (int64_t i = 0; i < dk; ++i) e[i] *= k_p[i];
      buf.A[p] = kernels::dot(buf.bk, e, dk);
      buf.P[p] = kernels::dot(in.q, e, dk);
    }
    // Forward substitution: delta_r -= sum_{p < r} A_rp delta_p; then o_r += sum_{p <= r} P_rp delta_p.
    for (int64_t p = 0; p < r; ++p) kernels::axpy(-buf.A[p], buf.delta + p * dv, dv, delta_r);
    for (int64_t p = 0; p <= r; ++p) kernels::axpy(buf.P[p], buf.delta + p * dv, dv, o_r);
    for (int64_t j = 0; j < dv; ++j) o_r[j] *= scale;
  }
  // The chunk-end state: S <- Diag(e^{gamma_L}) S0 + sum_s (e^{gamma_L - gamma_s} * k_s) delta_s^T.
  const double* last = gamma + (L - 1) * dk;
  for (int64_t i = 0; i < dk; ++i) buf.ek[i] = float(last[i]);
  kernels::exp(buf.ek, dk, buf.ek);
  for (int64_t i = 0; i < dk; ++i)
    for (int64_t j = 0; j < dv; ++j) S[i * dv + j] *= buf.ek[i];
  for (int64_t p = 0; p < L; ++p) {
    const float* k_p = inputs(s, d, t0 + p, h).k;
    for (int64_t i = 0; i < dk; ++i) buf.ek[i] = float(last[i] - gamma[p * dk + i]);
    kernels::exp(buf.ek, dk, buf.ek);
    for (int64_t i = 0; i < dk; ++i) kernels::axpy(buf.ek[i] * k_p[i], buf.delta + p * dv, dv, S + i * dv);
  }
}

}  // namespace

void GdnState::init(const MixerSpec& m) {
  const Dims d = dims_of(m);
  taps = d.K - 1, qk_channels = int(d.cqk), v_channels = int(d.cv);
  v_heads = d.hv, d_k = d.dk, d_v = d.dv;
  conv_q.assign(size_t(taps * d.cqk), 0.0f);
  conv_k.assign(size_t(taps * d.cqk), 0.0f);
  conv_v.assign(size_t(taps * d.cv), 0.0f);
  S.assign(size_t(d.hv) * d.dk * d.dv, 0.0f);
}

void GdnState::reset() {
  std::fill(conv_q.begin(), conv_q.end(), 0.0f);
  std::fill(conv_k.begin(), conv_k.end(), 0.0f);
  std::fill(conv_v.begin(), conv_v.end(), 0.0f);
  std::fill(S.begin(), S.end(), 0.0f);
}

void GdnScratch::reserve(const MixerSpec& m, int /*d_model*/, int64_t tokens) {
  const Dims d = dims_of(m);
  max_tokens = std::max({max_tokens, tokens, int64_t(1)});
  const Sizes z = sizes_of(m, d, max_tokens);
  grow(q_in, z.qk_in), grow(k_in, z.qk_in), grow(v_in, z.v_in);
  grow(q, z.qk), grow(k, z.qk), grow(v, z.v);
  grow(log_decay, z.key_gates), grow(erase, z.key_gates), grow(write, z.value_gates);
  grow(gate, z.v), grow(o, z.v);
  grow(low_rank, z.low_rank), grow(per_head, z.per_head), grow(chunk, z.chunk);
  if (gamma.size() < z.gamma) gamma.resize(z.gamma);
}

// Three regions: every projection of x (model/region.h); an item per query/key head, with its
// channels' convs and L2 norms, then each of its value heads' rows of the low-rank gates, gates,
// recurrence step and output gate; W_o.
void gdn_decode(const GdnWeights& w, const MixerSpec& m, const ModelConfig& c, const float* x, GdnState& state,
                GdnScratch& s, float* out, kernels::ThreadPool* pool) {
  const Dims d = dims_of(m);
  check(m, d, state, s, 1);
  const int64_t rank = std::max(m.gate_rank, m.out_gate_rank);
  project_inputs(w, d, x, 1, s, rank, pool);
  // An item per query/key head: its channels' conv, then each of its value heads' step.
  kernels::run_items(pool, d.hq, [&](int64_t g) {
    convolve_heads(w, d, 1, g, g + 1, state, s);
    for (int h = int(g) * d.group; h < int(g + 1) * d.group; ++h) {
      head_low_rank(w, d, s, rank, h);
      head_gates(w, d, 1, 0, h, s);
      HeadBuffers buf = head_buffers(s, d, h);
      recur(d, inputs(s, d, 0, h), state.S.data() + int64_t(h) * d.dk * d.dv, buf, s.o.data() + int64_t(h) * d.dv);
      gate_head_output(w, c, d, 0, h, s);
    }
  });
  const Product output{w.wo, s.o.data(), out};
  run_products(std::span(&output, 1), pool);
}

void gdn_prefill(const GdnWeights& w, const MixerSpec& m, const ModelConfig& c, const float* x, int64_t T,
                 GdnState& state, GdnScratch& s, float* out, kernels::ThreadPool* pool) {
  const Dims d = dims_of(m);
  const int64_t rank = std::max(m.gate_rank, m.out_gate_rank);
  // Pieces of the prompt that fit the scratch, whole chunks where possible; the state carries over.
  const int64_t piece = s.max_tokens >= kChunk ? s.max_tokens - s.max_tokens % kChunk : s.max_tokens;
  if (T > 0) check(m, d, state, s, std::max<int64_t>(1, std::min(T, piece)));  // an empty scratch throws
  for (int64_t t0 = 0; t0 < T; t0 += piece) {
    const int64_t n = std::min(piece, T - t0);
    project_inputs(w, d, x + t0 * c.d_model, n, s, rank, pool);
    convolve_heads(w, d, n, 0, d.hq, state, s);
    prepare_gates(w, d, n, s, rank, pool);
    kernels::parallel_rows(pool, d.hv, 1, [&](int64_t h0, int64_t h1) {
      for (int64_t h = h0; h < h1; ++h) {
        HeadBuffers buf = head_buffers(s, d, int(h));
        double* gamma = s.gamma.data() + h * kChunk * d.dk;
        for (int64_t c0 = 0; c0 < n; c0 += kChunk)
          chunk_wy(d, s, c0, std::min<int64_t>(kChunk, n - c0), int(h), state.S.data() + h * d.dk * d.dv, gamma, buf);
      }
    });
    for (int64_t t = 0; t < n; ++t)
      for (int h = 0; h < d.hv; ++h) gate_head_output(w, c, d, t, h, s);
    project(w.wo, s.o.data(), n, out + t0 * c.d_model, pool);
  }
}

}  // namespace wren
