// Feed-forward layers over whole sequences, the batched form of model/ffn.cpp:
//   ReLU^2:  y = relu(W_up x + b_up)^2 W_down + b_down   (W_down neuron-major [hidden, out])
//   SwiGLU:  y = W_down (silu(W_gate x + b_gate) * (W_up x + b_up)) + b_down;  GeGLU: gelu(tanh)
//   MoE:     l = W_r x (+ b_r);  s = sigmoid(l) | softmax(l) | l (softmax_topk gates);
//            chosen = top_k(s + b_balance) (group-limited if n_groups > 1);
//            gate_i = s_chosen_i, then as is / divided by their sum / softmax, times routed_scale;
//            y = sum_i gate_i Expert_chosen_i(x) + sigmoid(w_s . x) Shared(x)
// Experts run on the tokens routed to them, gathered with index_select and added back with
// index_add: clear, not fast.
#include "train/ffn.h"

#include <limits>
#include <stdexcept>

#include "train/common.h"

namespace wren::train {

namespace {

torch::Tensor expert_of(const torch::Tensor& t, int64_t e) { return t.defined() ? t[e] : torch::Tensor(); }

torch::Tensor gelu_tanh(const torch::Tensor& x) {
  return 0.5 * x * (1.0 + torch::tanh(0.7978845608 * (x + 0.044715 * x * x * x)));
}

}  // namespace

torch::Tensor ffn(const FfnSpec& spec, const torch::Tensor& w_gate, const torch::Tensor& w_up,
                  const torch::Tensor& w_down, const torch::Tensor& b_gate, const torch::Tensor& b_up,
                  const torch::Tensor& b_down, const torch::Tensor& x) {
  torch::Tensor u = linear_map(x, w_up, b_up);
  torch::Tensor y;
  switch (spec.activation) {
    case Activation::relu2: y = torch::matmul(torch::relu(u).pow(2), w_down); break;  // neuron-major
    case Activation::swiglu: y = linear_map(torch::silu(linear_map(x, w_gate, b_gate)) * u, w_down); break;
    case Activation::geglu: y = linear_map(gelu_tanh(linear_map(x, w_gate, b_gate)) * u, w_down); break;
    case Activation::swiglu_oai: throw std::runtime_error("train: swiglu_oai experts are not implemented");
  }
  return b_down.defined() ? y + b_down : y;
}

torch::Tensor dense_ffn(const FfnSpec& spec, const FfnParams& w, const torch::Tensor& x) {
  return ffn(spec, w.w_gate, w.w_up, w.w_down, w.b_gate, w.b_up, w.b_down, x);
}

std::pair<torch::Tensor, torch::Tensor> route(const FfnSpec& spec, const MoeParams& w, const torch::Tensor& x,
                                              Routing* routing) {
  const int64_t E = spec.n_experts, k = spec.top_k;
  torch::Tensor logits = linear_map(x, w.router, w.router_bias);  // [N, E]
  torch::Tensor unbiased = logits;
  if (spec.score == RouterScore::sigmoid) unbiased = torch::sigmoid(logits);
  else if (spec.gates != GateNorm::softmax_topk) unbiased = torch::softmax(logits, -1);
  torch::Tensor chosen;
  {
    torch::NoGradGuard no_grad;
    torch::Tensor score = unbiased.detach();
    if (w.balance_bias.defined()) score = score + w.balance_bias;
    if (spec.n_groups > 1) {  // group-limited routing: keep the topk_groups groups with the best score
      const int64_t per = E / spec.n_groups;
      torch::Tensor best = score.view({-1, spec.n_groups, per}).amax(-1);
      torch::Tensor keep = torch::zeros_like(best, torch::kBool).scatter(1, std::get<1>(best.topk(spec.topk_groups, -1)), true);
      score = score.masked_fill(keep.repeat_interleave(per, 1).logical_not(), -std::numeric_limits<double>::infinity());
    }
    chosen = std::get<1>(score.topk(k, -1));
  }
  torch::Tensor gates = unbiased.gather(1, chosen);
  if (spec.gates == GateNorm::softmax_topk) gates = torch::softmax(gates, -1);
  else if (spec.gates == GateNorm::normalize) gates = gates / gates.sum(-1, true);
  if (routing) {
    routing->scores = unbiased.detach();
    routing->chosen = chosen;
  }
  return {chosen, gates * spec.routed_scale};
}

torch::Tensor moe_ffn(const FfnSpec& spec, const MoeParams& w, const torch::Tensor& x, Routing* routing) {
  const torch::Tensor flat = x.reshape({-1, x.size(-1)});  // [N, d]
  auto [chosen, gates] = route(spec, w, flat, routing);
  const bool latent = spec.latent_dim > 0;
  const torch::Tensor z = latent ? linear_map(flat, w.latent_down) : flat;
  torch::Tensor acc = torch::zeros_like(z);
  const FfnParams& st = w.experts;
  for (int64_t e = 0; e < spec.n_experts; ++e) {
    const torch::Tensor hits = (chosen == e).nonzero();  // [M, 2]: (token, slot)
    if (hits.size(0) == 0) continue;
    const torch::Tensor token = hits.select(1, 0), slot = hits.select(1, 1);
    torch::Tensor y = ffn(spec, expert_of(st.w_gate, e), st.w_up[e], st.w_down[e], expert_of(st.b_gate, e), expert_of(st.b_up, e),
                          expert_of(st.b_down, e), z.index_select(0, token));
    acc = acc.index_add(0, token, y * gates.index({token, slot}).unsqueeze(1));
  }
  torch::Tensor out = latent ? linear_map(acc, w.latent_up) : acc;
  if (spec.n_shared) {
    const FfnParams& sh = w.shared;
    torch::Tensor shared = dense_ffn(spec, sh, flat);
    if (w.shared_gate.defined()) shared = shared * torch::sigmoid(linear_map(flat, w.shared_gate));
    out = out + shared;
  }
  return out.view(x.sizes());
}

}  // namespace wren::train
