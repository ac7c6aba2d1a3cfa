// model/: feed-forward layers. A dense FFN (also the shared experts, and one expert of a
// stack), and the MoE router that picks top_k experts per token (NOTES.md 1-2).
//   ReLU^2:  y = W_down relu(W_up x)^2, W_down stored one row per neuron: only the rows of
//            neurons that fired are read (dead_neuron_skip)
//   SwiGLU:  y = W_down (silu(W_gate x) * W_up x);  GeGLU with gelu(tanh) instead of silu
#pragma once

#include <cstdint>
#include <vector>

#include "config/model_config.h"
#include "kernels/threads.h"
#include "model/sparsity_probe.h"
#include "model/tensor.h"

namespace wren {

// One FFN (dense, the shared experts, or an expert stack viewed as [E * hidden, in]).
struct FfnWeights {
  MatrixView w_gate, w_up, w_down;
  Vec b_gate, b_up, b_down;
};

struct MoeWeights {
  MatrixView router;
  Vec router_bias, balance_bias;
  MatrixView latent_down, latent_up;
  FfnWeights experts, shared;
  MatrixView shared_gate;
};


struct FfnScratch {
  std::vector<float> gate, up, logits, select, latent_in, latent_out;
  std::vector<int32_t> neurons, chosen, expert_ids;
  std::vector<float> gate_values;
  std::vector<float> coeffs, weights;
  void reserve(const ModelConfig& c);
};

// y += scale * FFN(x) for one FFN of width `hidden` whose W_down is `down` (rows of the
// stack already sliced). Returns the number of neurons that fired (ReLU^2) or `hidden`; for
// ReLU^2 their indices are then s.neurons[0 .. fired).
int64_t ffn_add(const FfnSpec& spec, const MatrixView& w_gate, const MatrixView& w_up, const MatrixView& w_down,
                const float* b_gate, const float* b_up, const float* b_down, const float* x, float scale, float* y,
                FfnScratch& s, kernels::ThreadPool* pool);

// `probe`, when not null, counts the neurons that fired (ReLU^2) and the experts chosen.
void dense_ffn(const FfnSpec& spec, const FfnWeights& w, const float* x, float* y, FfnScratch& s,
               kernels::ThreadPool* pool, FfnProbe* probe = nullptr);

// The router's choice for one token: expert ids (top_k) and their gate weights.
// Selection uses score + balance_bias; gates use the unbiased scores (DeepSeek-V3, EQB).
void route(const FfnSpec& spec, const MoeWeights& w, const float* x, int32_t* experts, float* gates, FfnScratch& s);

// y += MoE(x): routed experts (at latent width if latent_dim) and shared experts.
// `experts_out` (top_k ids) may be null.
void moe_ffn(const FfnSpec& spec, const MoeWeights& w, int d, const float* x, float* y, FfnScratch& s,
             kernels::ThreadPool* pool, int32_t* experts_out, FfnProbe* probe = nullptr);

}  // namespace wren
