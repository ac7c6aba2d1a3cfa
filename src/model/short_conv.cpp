// The gated short convolution (model/short_conv.h). Decode and prefill share every step but the
// projections: one region of three matvecs for a token, batched products for a prompt.
#include "model/short_conv.h"

#include <algorithm>
#include <stdexcept>
#include <string>

#include "model/region.h"

namespace wren {

void ShortConvState::init(const MixerSpec& m, int64_t d_model) {
  taps = m.conv_kernel - 1;
  channels = d_model;
  tail.assign(size_t(int64_t(taps) * d_model), 0.0f);
}

void ShortConvState::reset() { std::fill(tail.begin(), tail.end(), 0.0f); }

void ShortConvScratch::reserve(const MixerSpec& m, int64_t d_model, int64_t tokens) {
  max_tokens = std::max(max_tokens, tokens);
  const size_t n = size_t(max_tokens * d_model), taps = size_t(int64_t(m.conv_kernel - 1) * d_model);
  for (std::vector<float>* v : {&b, &c, &x})
    if (v->size() < n) v->resize(n);
  if (u.size() < taps + n) u.resize(taps + n);
}

namespace {

void check(const MixerSpec& m, int64_t d, const ShortConvState& st, const ShortConvScratch& s, int64_t T) {
  if (m.kind != MixerKind::short_conv || st.taps != m.conv_kernel - 1 || st.channels != d)
    throw std::invalid_argument("short_conv: the state was not initialised for this mixer (ShortConvState::init)");
  if (s.max_tokens < T || s.u.size() < size_t((st.taps + T) * d))
    throw std::invalid_argument("short_conv: the scratch is too small for " + std::to_string(T) +
                                " tokens (ShortConvScratch::reserve)");
}

// u = b * x~ for T tokens after the state's K-1 taps; then, per token t, y = c * conv(u) over
// u rows t .. t + K-1, written over b (no longer needed); the state keeps the last K-1 rows of u.
void gate_and_convolve(const ShortConvWeights& w, int K, int64_t d, int64_t T, ShortConvState& st, ShortConvScratch& s) {
  const int64_t taps = K - 1;
  float* u = s.u.data();
  std::copy(st.tail.begin(), st.tail.end(), u);
  for (int64_t i = 0; i < T * d; ++i) u[taps * d + i] = s.b[size_t(i)] * s.x[size_t(i)];
  for (int64_t t = 0; t < T; ++t) {
    float* y = s.b.data() + t * d;
    const float* c = s.c.data() + t * d;
    for (int64_t ch = 0; ch < d; ++ch) {
      const float* tap = w.conv.data() + ch * K;
      float acc = 0.0f;
      for (int j = 0; j < K; ++j) acc += tap[j] * u[(t + j) * d + ch];
      y[ch] = c[ch] * acc;
    }
  }
  std::copy(u + T * d, u + (T + taps) * d, st.tail.begin());
}

}  // namespace

void short_conv_decode(const ShortConvWeights& w, const MixerSpec& m, const float* x, ShortConvState& state,
                       ShortConvScratch& s, float* out, kernels::ThreadPool* pool) {
  const int64_t d = state.channels;
  check(m, d, state, s, 1);
  const Product in[3] = {{w.w_b, x, s.b.data()}, {w.w_c, x, s.c.data()}, {w.w_x, x, s.x.data()}};
  run_products(std::span(in), pool);
  gate_and_convolve(w, m.conv_kernel, d, 1, state, s);
  const Product output{w.wo, s.b.data(), out};
  run_products(std::span(&output, 1), pool);
}

void short_conv_prefill(const ShortConvWeights& w, const MixerSpec& m, const float* x, int64_t T, ShortConvState& state,
                        ShortConvScratch& s, float* out, kernels::ThreadPool* pool) {
  const int64_t d = state.channels;
  if (T > 0) check(m, d, state, s, std::clamp<int64_t>(s.max_tokens, 1, T));  // an empty scratch throws
  for (int64_t t0 = 0; t0 < T; t0 += s.max_tokens) {
    const int64_t n = std::min(s.max_tokens, T - t0);
    check(m, d, state, s, n);
    const float* xt = x + t0 * d;
    const BatchProduct in[3] = {{w.w_b, xt, d, s.b.data(), d, n}, {w.w_c, xt, d, s.c.data(), d, n},
                                {w.w_x, xt, d, s.x.data(), d, n}};
    run_batch_products(std::span(in), pool);
    gate_and_convolve(w, m.conv_kernel, d, n, state, s);
    const BatchProduct output{w.wo, s.b.data(), d, out + t0 * d, d, n};
    run_batch_products(std::span(&output, 1), pool);
  }
}

}  // namespace wren
