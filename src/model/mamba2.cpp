// The Mamba-2 mixer (model/mamba2.h). Decode and prefill share every step but the projections:
// one region of five matvecs for a token, batched products for a prompt. The scan runs per
// head (the heads are independent), each head walking its tokens in order.
#include "model/mamba2.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>

#include "kernels/ops.h"
#include "model/region.h"

namespace wren {

Mamba2Dims Mamba2Dims::of(const MixerSpec& m) {
  return {.heads = m.n_heads, .head_dim = m.head_dim, .groups = m.ssm_groups(), .state = m.state_dim,
          .taps = m.conv_kernel - 1};
}

void Mamba2State::init(const MixerSpec& m) {
  dims = Mamba2Dims::of(m);
  tail.assign(size_t(dims.taps * dims.channels()), 0.0f);
  S.assign(size_t(dims.heads * dims.head_dim * dims.state), 0.0f);
}

void Mamba2State::reset() {
  std::fill(tail.begin(), tail.end(), 0.0f);
  std::fill(S.begin(), S.end(), 0.0f);
}

void Mamba2Scratch::reserve(const MixerSpec& m, int64_t tokens) {
  max_tokens = std::max(max_tokens, tokens);
  const Mamba2Dims d = Mamba2Dims::of(m);
  auto grow = [](std::vector<float>& v, int64_t n) {
    if (v.size() < size_t(n)) v.resize(size_t(n));
  };
  grow(z, max_tokens * d.inner());
  grow(xbc, (d.taps + max_tokens) * d.channels());
  grow(conv, max_tokens * d.channels());
  grow(dt, max_tokens * d.heads);
}

namespace {

void check(const MixerSpec& m, const Mamba2State& st, const Mamba2Scratch& s, int64_t T) {
  const Mamba2Dims d = Mamba2Dims::of(m);
  if (m.kind != MixerKind::mamba2 || st.S.size() != size_t(d.heads * d.head_dim * d.state) ||
      st.tail.size() != size_t(d.taps * d.channels()))
    throw std::invalid_argument("mamba2: the state was not initialised for this mixer (Mamba2State::init)");
  if (s.max_tokens < T || s.xbc.size() < size_t((d.taps + T) * d.channels()))
    throw std::invalid_argument("mamba2: the scratch is too small for " + std::to_string(T) +
                                " tokens (Mamba2Scratch::reserve)");
}

// The conv's taps and bias for channel ch of [x~, B, C].
struct ChannelConv {
  const float* taps;
  float bias;
};
ChannelConv channel_conv(const Mamba2Weights& w, const Mamba2Dims& d, int64_t ch, int64_t K) {
  const int64_t inner = d.inner(), bc = d.bc();
  const Vec *conv = &w.conv_x, *bias = &w.conv_x_bias;
  int64_t at = ch;
  if (ch >= inner + bc) conv = &w.conv_c, bias = &w.conv_c_bias, at = ch - inner - bc;
  else if (ch >= inner) conv = &w.conv_b, bias = &w.conv_b_bias, at = ch - inner;
  return {conv->data() + at * K, bias->empty() ? 0.0f : (*bias)[size_t(at)]};
}

// xbc holds the state's K-1 rows then T rows of projections: conv row t = SiLU(bias + sum_j
// tap_j xbc[t + j]); the state keeps the last K-1 rows.
void convolve(const Mamba2Weights& w, const Mamba2Dims& d, int64_t T, Mamba2State& st, Mamba2Scratch& s) {
  const int64_t C = d.channels(), K = d.taps + 1;
  float* xbc = s.xbc.data();
  for (int64_t ch = 0; ch < C; ++ch) {
    const ChannelConv f = channel_conv(w, d, ch, K);
    for (int64_t t = 0; t < T; ++t) {
      float acc = f.bias;
      for (int64_t j = 0; j < K; ++j) acc += f.taps[j] * xbc[(t + j) * C + ch];
      s.conv[size_t(t * C + ch)] = acc;
    }
  }
  kernels::silu(s.conv.data(), T * C, s.conv.data());
  std::copy(xbc + T * C, xbc + (T + d.taps) * C, st.tail.begin());
}

// Head h over T tokens: the recurrence, then y * SiLU(z) into z (which holds SiLU(z) already).
void scan_head(const Mamba2Weights& w, const Mamba2Dims& d, int64_t T, int64_t h, Mamba2State& st, Mamba2Scratch& s) {
  const int64_t P = d.head_dim, N = d.state, C = d.channels();
  const int64_t g = h / (d.heads / d.groups);
  const float A = -std::exp(w.a_log[size_t(h)]), D = w.d_skip[size_t(h)];
  float* S = st.S.data() + h * P * N;
  for (int64_t t = 0; t < T; ++t) {
    float dt = s.dt[size_t(t * d.heads + h)] + w.decay_bias[size_t(h)];
    kernels::softplus(&dt, 1, &dt);
    const float decay = std::exp(dt * A);
    const float* row = s.conv.data() + t * C;
    const float *x = row + h * P, *B = row + d.inner() + g * N, *Cg = row + d.inner() + d.bc() + g * N;
    float* z = s.z.data() + t * d.inner() + h * P;
    for (int64_t p = 0; p < P; ++p) {
      float* Sp = S + p * N;
      const float in = dt * x[p];
      for (int64_t n = 0; n < N; ++n) Sp[n] = decay * Sp[n] + in * B[n];
      const float y = kernels::dot(Sp, Cg, N) + D * x[p];
      z[p] *= y;  // z holds SiLU(z) (mix)
    }
  }
}

// Projections done (z, the conv inputs after the state's taps, dt): the conv, the scan and the
// gated norm, leaving the normalised y in s.z.
void mix(const Mamba2Weights& w, const ModelConfig& c, const Mamba2Dims& d, int64_t T, Mamba2State& st, Mamba2Scratch& s,
         kernels::ThreadPool* pool) {
  convolve(w, d, T, st, s);
  kernels::silu(s.z.data(), T * d.inner(), s.z.data());
  kernels::run_items(pool, d.heads, [&](int64_t h) { scan_head(w, d, T, h, st, s); });
  const int64_t width = d.inner() / d.groups;
  for (int64_t t = 0; t < T; ++t)
    for (int64_t g = 0; g < d.groups; ++g) {
      float* y = s.z.data() + t * d.inner() + g * width;
      kernels::rmsnorm(y, w.o_norm.data() + g * width, width, float(c.norm.eps), c.norm.unit_offset, y);
    }
}

}  // namespace

void mamba2_decode(const Mamba2Weights& w, const MixerSpec& m, const ModelConfig& c, const float* x, Mamba2State& state,
                   Mamba2Scratch& s, float* out, kernels::ThreadPool* pool) {
  check(m, state, s, 1);
  const Mamba2Dims& d = state.dims;
  float* row = s.xbc.data() + d.taps * d.channels();
  std::copy(state.tail.begin(), state.tail.end(), s.xbc.begin());
  const Product in[5] = {{w.wg, x, s.z.data()}, {w.w_x, x, row}, {w.w_b, x, row + d.inner()},
                         {w.w_c, x, row + d.inner() + d.bc()}, {w.w_decay, x, s.dt.data()}};
  run_products(std::span(in), pool);
  mix(w, c, d, 1, state, s, pool);
  const Product output{w.wo, s.z.data(), out};
  run_products(std::span(&output, 1), pool);
}

void mamba2_prefill(const Mamba2Weights& w, const MixerSpec& m, const ModelConfig& c, const float* x, int64_t T,
                    Mamba2State& state, Mamba2Scratch& s, float* out, kernels::ThreadPool* pool) {
  if (T > 0) check(m, state, s, std::clamp<int64_t>(s.max_tokens, 1, T));  // an empty scratch throws
  const Mamba2Dims& d = state.dims;
  const int64_t dm = c.d_model, C = d.channels();
  for (int64_t t0 = 0; t0 < T; t0 += s.max_tokens) {
    const int64_t n = std::min(s.max_tokens, T - t0);
    check(m, state, s, n);
    const float* xt = x + t0 * dm;
    float* rows = s.xbc.data() + d.taps * C;
    std::copy(state.tail.begin(), state.tail.end(), s.xbc.begin());
    const BatchProduct in[5] = {{w.wg, xt, dm, s.z.data(), d.inner(), n},
                                {w.w_x, xt, dm, rows, C, n},
                                {w.w_b, xt, dm, rows + d.inner(), C, n},
                                {w.w_c, xt, dm, rows + d.inner() + d.bc(), C, n},
                                {w.w_decay, xt, dm, s.dt.data(), d.heads, n}};
    run_batch_products(std::span(in), pool);
    mix(w, c, d, n, state, s, pool);
    const BatchProduct output{w.wo, s.z.data(), d.inner(), out + t0 * dm, dm, n};
    run_batch_products(std::span(&output, 1), pool);
  }
}

}  // namespace wren
