// Feed-forward layers over whole sequences, the batched form of model/ffn.cpp:
//   ReLU^2:  y = relu(W_up x + b_up)^2 W_down + b_down   (W_down neuron-major [hidden, out])
//   SwiGLU:  y = W_down (silu(W_gate x + b_gate) * (W_up x + b_up)) + b_down;  GeGLU: gelu(tanh)
//   MoE:     l = W_r x (+ b_r);  s = sigmoid(l) | softmax(l) | l (softmax_topk gates);
//            chosen = top_k(s + b_balance) (group-limited if n_groups > 1);
//            gate_i = s_chosen_i, then as is / divided by their sum / softmax, times routed_scale;
//            y = sum_i gate_i Expert_chosen_i(x) + sigmoid(w_s . x) Shared(x)
// The experts run as one batched matmul over each expert's routed tokens (padded to the
// busiest expert's count), then each token sums its k gated outputs.
#include "train/ffn.h"

#include <algorithm>
#include <limits>
#include <stdexcept>

#include "train/common.h"

namespace wren::train {

namespace {

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
    case Activation::swiglu_oai:  // refused by train::Model (check_supported), as the engine refuses it
      throw std::runtime_error("train: swiglu_oai (gpt-oss clamped SwiGLU) is refused by the reference and the engine");
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
  const int64_t N = z.size(0), k = spec.top_k, E = spec.n_experts, dz = z.size(1);
  // Dispatch: the N k (token, slot) pairs sorted by expert, expert e's tokens in rows
  // [e C, e C + count_e) of an [E C] batch (C = the busiest expert's count; the rest of each
  // expert's rows read a zero row N), so all experts run as one batched matmul.
  torch::Tensor slot_at, dispatch;
  int64_t C = 0;
  {
    torch::NoGradGuard no_grad;
    const torch::Tensor expert = chosen.flatten();  // [N k]
    const torch::Tensor pair = torch::arange(N * k, expert.options());
    const torch::Tensor order = (expert * (N * k) + pair).argsort();  // by expert, then token
    const torch::Tensor count = torch::bincount(expert, {}, E);
    C = std::max<int64_t>(count.max().item<int64_t>(), 1);
    const torch::Tensor first = count.cumsum(0) - count;  // each expert's first sorted pair
    const torch::Tensor sorted_expert = expert.index_select(0, order);
    const torch::Tensor row = sorted_expert * C + pair - first.index_select(0, sorted_expert);
    dispatch = torch::full({E * C}, N, order.options()).index_copy(0, row, order.div(k, "floor"));
    slot_at = torch::empty_like(row).index_copy(0, order, row);  // (token, slot) pair -> its batch row
  }
  const torch::Tensor padded = torch::cat({z, torch::zeros({1, dz}, z.options())});
  const FfnParams& st = w.experts;
  auto per_expert = [](const torch::Tensor& b) { return b.defined() ? b.unsqueeze(1) : b; };  // [E, n] -> [E, 1, n]
  const torch::Tensor y = ffn(spec, st.w_gate, st.w_up, st.w_down, per_expert(st.b_gate), per_expert(st.b_up),
                              per_expert(st.b_down), padded.index_select(0, dispatch).view({E, C, dz}));
  const torch::Tensor acc = (y.view({E * C, dz}).index_select(0, slot_at).view({N, k, dz}) * gates.unsqueeze(-1)).sum(1);
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
