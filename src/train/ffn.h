// train/: feed-forward layers over whole sequences, mirroring model/ffn.h: a dense FFN (also
// the shared experts and each expert of a stack) and the MoE router. Tensors keep the weight
// map's layouts, so export is a copy: a ReLU^2 W_down is neuron-major [hidden, out].
#pragma once

#include <torch/torch.h>

#include "config/model_config.h"

namespace wren::train {

// One FFN, or an expert stack with a leading [E] on every tensor; undefined = absent.
struct FfnParams {
  torch::Tensor w_gate, w_up, w_down, b_gate, b_up, b_down;
};

struct MoeParams {
  torch::Tensor router, router_bias;
  torch::Tensor balance_bias;  // a buffer: added to the scores for selection only
  torch::Tensor latent_down, latent_up;
  FfnParams experts, shared;
  torch::Tensor shared_gate;
};

// One MoE layer's routing of the tokens of a forward (B * T rows, batch-major), for load
// balancing (Exact Quantile Balancing: NOTES.md 4). Detached.
struct Routing {
  int layer = -1;
  torch::Tensor scores;  // [N, E] f32: the unbiased scores (selection ranks scores + balance_bias)
  torch::Tensor chosen;  // [N, top_k] int64: the chosen experts, best first
};

// y = FFN(x) for one FFN whose tensors have no leading [E]. x: [..., in].
torch::Tensor ffn(const FfnSpec& spec, const torch::Tensor& w_gate, const torch::Tensor& w_up,
                  const torch::Tensor& w_down, const torch::Tensor& b_gate, const torch::Tensor& b_up,
                  const torch::Tensor& b_down, const torch::Tensor& x);

torch::Tensor dense_ffn(const FfnSpec& spec, const FfnParams& w, const torch::Tensor& x);

// The router's choice for tokens x [N, d]: chosen [N, top_k] (selection on score +
// balance_bias, not differentiable) and gate weights [N, top_k] (from the unbiased scores,
// differentiable). `routing`, when not null, receives the record above.
std::pair<torch::Tensor, torch::Tensor> route(const FfnSpec& spec, const MoeParams& w, const torch::Tensor& x,
                                              Routing* routing);

// MoE(x): routed experts (at latent width with latent_dim) plus the shared experts. x: [B, T, d].
torch::Tensor moe_ffn(const FfnSpec& spec, const MoeParams& w, const torch::Tensor& x, Routing* routing);

}  // namespace wren::train
