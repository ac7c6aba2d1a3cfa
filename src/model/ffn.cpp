#include "model/ffn.h"

#include <algorithm>
#include <cmath>

#include "kernels/ops.h"

namespace wren {

void FfnScratch::reserve(const ModelConfig& c) {
  size_t hidden = 0, experts = 0, width = size_t(c.d_model);
  for (auto& [name, f] : c.ffns) {
    hidden = std::max({hidden, size_t(f.hidden), size_t(f.expert_hidden), size_t(f.n_shared) * size_t(f.shared_hidden)});
    experts = std::max(experts, size_t(f.n_experts));
    width = std::max(width, size_t(f.latent_dim));
  }
  gate.resize(hidden), up.resize(hidden), coeffs.resize(hidden), neurons.resize(hidden);
  logits.resize(experts), select.resize(experts), chosen.resize(experts), weights.resize(experts);
  expert_ids.resize(experts), gate_values.resize(experts);
  latent_in.resize(width), latent_out.resize(width);
}

namespace {

float gelu_tanh(float x) { return 0.5f * x * (1.0f + std::tanh(0.7978845608f * (x + 0.044715f * x * x * x))); }

void add_bias(const float* b, int64_t n, float* y) {
  if (b)
    for (int64_t i = 0; i < n; ++i) y[i] += b[i];
}

const float* data_or_null(const Vec& v) { return v.empty() ? nullptr : v.data(); }

}  // namespace

int64_t ffn_add(const FfnSpec& spec, const MatrixView& w_gate, const MatrixView& w_up, const MatrixView& w_down,
                const float* b_gate, const float* b_up, const float* b_down, const float* x, float scale, float* y,
                FfnScratch& s, kernels::ThreadPool* pool) {
  const int64_t hidden = w_up.rows;
  float* u = s.up.data();
  kernels::matvec(w_up, x, u, pool);
  add_bias(b_up, hidden, u);
  int64_t fired = hidden;
  if (spec.activation == Activation::relu2) {
    // dead_neuron_skip: y += sum over fired neurons r of (scale relu(u_r)^2) W_down[r, :]
    fired = 0;
    for (int64_t r = 0; r < hidden; ++r)
      if (u[r] > 0.0f) {
        s.neurons[size_t(fired)] = int32_t(r);
        s.coeffs[size_t(fired++)] = scale * u[r] * u[r];
      }
    kernels::add_rows(w_down, s.neurons.data(), s.coeffs.data(), fired, y, pool);
  } else {
    float* g = s.gate.data();
    kernels::matvec(w_gate, x, g, pool);
    add_bias(b_gate, hidden, g);
    if (spec.activation == Activation::geglu)
      for (int64_t r = 0; r < hidden; ++r) g[r] = gelu_tanh(g[r]) * u[r];
    else {
      kernels::silu(g, hidden, g);
      for (int64_t r = 0; r < hidden; ++r) g[r] *= u[r];
    }
    kernels::matvec_add(w_down, g, scale, y, pool);
  }
  if (b_down) {
    const int64_t out = spec.activation == Activation::relu2 ? w_down.cols : w_down.rows;
    for (int64_t i = 0; i < out; ++i) y[i] += scale * b_down[i];
  }
  return fired;
}

void dense_ffn(const FfnSpec& spec, const FfnWeights& w, const float* x, float* y, FfnScratch& s,
               kernels::ThreadPool* pool, FfnProbe* probe) {
  const int64_t fired = ffn_add(spec, w.w_gate, w.w_up, w.w_down, data_or_null(w.b_gate), data_or_null(w.b_up),
                                data_or_null(w.b_down), x, 1.0f, y, s, pool);
  if (probe && probe->relu2) probe->dense.record(s.neurons.data(), fired);
}

void route(const FfnSpec& spec, const MoeWeights& w, const float* x, int32_t* experts, float* gates, FfnScratch& s) {
  const int E = spec.n_experts, k = spec.top_k;
  float* logits = s.logits.data();
  float* score = s.select.data();
  kernels::matvec(w.router, x, logits);
  add_bias(data_or_null(w.router_bias), E, logits);
  // Scores: sigmoid per expert, or softmax over all experts; softmax_topk gates work on logits.
  std::copy(logits, logits + E, s.weights.data());
  float* unbiased = s.weights.data();
  if (spec.score == RouterScore::sigmoid) kernels::sigmoid(unbiased, E, unbiased);
  else if (spec.gates != GateNorm::softmax_topk) kernels::softmax(unbiased, E);
  for (int e = 0; e < E; ++e) score[e] = unbiased[e] + (w.balance_bias.empty() ? 0.0f : w.balance_bias[size_t(e)]);
  if (spec.n_groups > 1) {
    // Group-limited routing: keep the topk_groups groups with the highest best score.
    const int per = E / spec.n_groups;
    std::vector<float>& best = s.latent_out;  // scratch of >= n_groups floats
    for (int g = 0; g < spec.n_groups; ++g) best[size_t(g)] = *std::max_element(score + g * per, score + (g + 1) * per);
    kernels::top_k(best.data(), spec.n_groups, spec.topk_groups, s.chosen.data());
    for (int g = 0; g < spec.n_groups; ++g)
      if (std::find(s.chosen.data(), s.chosen.data() + spec.topk_groups, g) == s.chosen.data() + spec.topk_groups)
        std::fill(score + g * per, score + (g + 1) * per, -INFINITY);
  }
  kernels::top_k(score, E, k, experts);
  for (int i = 0; i < k; ++i) gates[i] = unbiased[experts[i]];
  if (spec.gates == GateNorm::softmax_topk) {
    kernels::softmax(gates, k);
  } else if (spec.gates == GateNorm::normalize) {
    float sum = 0;
    for (int i = 0; i < k; ++i) sum += gates[i];
    sum = std::max(sum, 1e-20f);  // sigmoid scores can underflow to 0 together
    for (int i = 0; i < k; ++i) gates[i] /= sum;
  }
  for (int i = 0; i < k; ++i) gates[i] *= float(spec.routed_scale);
}

void moe_ffn(const FfnSpec& spec, const MoeWeights& w, int d, const float* x, float* y, FfnScratch& s,
             kernels::ThreadPool* pool, int32_t* experts_out, FfnProbe* probe) {
  const int k = spec.top_k, h = spec.expert_hidden;
  int32_t* experts = s.expert_ids.data();
  float* gates = s.gate_values.data();
  route(spec, w, x, experts, gates, s);
  if (experts_out) std::copy(experts, experts + k, experts_out);
  if (probe) probe->record_route(experts, k);
  const bool latent = spec.latent_dim > 0;
  const int64_t in = latent ? spec.latent_dim : d;
  const float* z = x;
  float* acc = y;
  if (latent) {
    kernels::matvec(w.latent_down, x, s.latent_in.data(), pool);
    std::fill(s.latent_out.begin(), s.latent_out.begin() + in, 0.0f);
    z = s.latent_in.data();
    acc = s.latent_out.data();
  }
  const bool relu2 = spec.activation == Activation::relu2;
  for (int i = 0; i < k; ++i) {
    const int64_t e = experts[i];
    const FfnWeights& st = w.experts;
    const MatrixView up = st.w_up.slice_rows(e * h, h);
    const MatrixView gate = relu2 ? MatrixView{} : st.w_gate.slice_rows(e * h, h);
    const MatrixView down = relu2 ? st.w_down.slice_rows(e * h, h) : st.w_down.slice_rows(e * in, in);
    auto bias = [](const Vec& b, int64_t off) { return b.empty() ? nullptr : b.data() + off; };
    const int64_t fired = ffn_add(spec, gate, up, down, bias(st.b_gate, e * h), bias(st.b_up, e * h),
                                  bias(st.b_down, e * in), z, gates[i], acc, s, pool);
    if (probe && relu2) probe->experts[size_t(e)].record(s.neurons.data(), fired);
  }
  if (latent) kernels::matvec_add(w.latent_up, s.latent_out.data(), 1.0f, y, pool);
  if (spec.n_shared) {
    float scale = 1.0f;
    if (present(w.shared_gate)) {
      kernels::matvec(w.shared_gate, x, &scale);
      scale = kernels::sigmoid(scale);
    }
    const FfnWeights& sh = w.shared;
    const int64_t fired = ffn_add(spec, sh.w_gate, sh.w_up, sh.w_down, data_or_null(sh.b_gate), data_or_null(sh.b_up),
                                  data_or_null(sh.b_down), x, scale, y, s, pool);
    if (probe && relu2) probe->shared.record(s.neurons.data(), fired);
  }
}

}  // namespace wren
