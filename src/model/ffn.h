// model/: feed-forward layers. A dense FFN (also the shared experts, and one expert of a
// stack), and the MoE router that picks top_k experts per token (NOTES.md 1-2).
//   ReLU^2:  y = W_down relu(W_up x)^2, W_down stored one row per neuron: only the rows of
//            neurons that fired are read (dead_neuron_skip)
//   SwiGLU:  y = W_down (silu(W_gate x) * W_up x);  GeGLU with gelu(tanh) instead of silu
//
// Decode runs a layer's FFNs together (model/region.h): one parallel region for the gate and
// up rows of every FFN it uses (a MoE layer: all chosen experts; the router and the shared
// experts, which need only x, join the region before routing), one for all their down
// projections, balanced by the bytes each item reads.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "config/model_config.h"
#include "kernels/threads.h"
#include "model/region.h"
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

// One FFN applied in a layer: y += scale FFN(x) with W_down `down` (an expert's rows already
// sliced from the stack). The engine fills the weights, x, y and scale; ffn_add fills the rest.
struct FfnTerm {
  MatrixView gate, up, down;                                       // gate absent for ReLU^2
  const float *b_gate = nullptr, *b_up = nullptr, *b_down = nullptr;  // null: no bias
  const float* x = nullptr;
  float* y = nullptr;
  float scale = 1.0f;
  // Working state: the hidden activations (SwiGLU / GeGLU: silu(g) * u in `gate`), and for
  // ReLU^2 the neurons that fired, neurons[0 .. fired), with coefficients scale relu(u)^2.
  float *h_gate = nullptr, *h_up = nullptr, *coeffs = nullptr;
  int32_t* neurons = nullptr;
  int64_t fired = 0;
};

struct FfnScratch {
  std::vector<float> gate, up, coeffs, logits, select, latent_in, latent_out;
  std::vector<int32_t> neurons, chosen, expert_ids;
  std::vector<float> gate_values, weights;
  std::vector<FfnTerm> terms;       // the current layer's FFNs
  std::vector<Product> products;    // the current region's products
  std::vector<float> partials;      // ReLU^2 down items' partial sums, [item][out]
  bool neuron_skip = true;  // false (--no-neuron-skip): ReLU^2 down reads every row, fired or not
  void reserve(const ModelConfig& c);
};

// What every FFN entry point reads and writes for one token.
struct FfnCall {
  const FfnSpec& spec;
  const float* x;               // [d]
  float* y;                     // [d]: y += FFN(x)
  FfnScratch& scratch;
  kernels::ThreadPool* pool = nullptr;
  FfnProbe* probe = nullptr;    // when not null: counts the neurons that fired (ReLU^2), the experts chosen
};

// y_t += scale_t FFN_t(x_t) for every term of s.terms (their hidden widths summing to at most
// what s.reserve made room for), in two regions: the gate / up rows of all terms, then all
// their down projections. Terms with the same y add into it in list order.
void ffn_add(const FfnSpec& spec, FfnScratch& s, kernels::ThreadPool* pool);

void dense_ffn(const FfnWeights& w, const FfnCall& call);

// The router's choice for one token from its logits (W_router x): expert ids (top_k) and
// their gate weights. Selection uses score + balance_bias; gates use the unbiased scores
// (DeepSeek-V3, EQB). Overwrites `logits`' copy in s.weights.
void route(const FfnSpec& spec, const MoeWeights& w, const float* logits, int32_t* experts, float* gates,
           FfnScratch& s);

// y += MoE(x): routed experts (at latent width if latent_dim) and shared experts.
// `experts_out` (top_k ids) may be null.
void moe_ffn(const MoeWeights& w, int d, const FfnCall& call, int32_t* experts_out = nullptr);

// ---- Batches: the FFN of n rows at once (prefill's chunk, batched decode) --------------
//
// Every product runs over the whole batch (run_batch_products); a MoE layer groups the
// rows by the experts they chose, so each chosen expert's weights are read once for all
// the rows that chose it. The per-row steps (routing, activations, ReLU^2's fired-row down
// projection) are the single-row ones, so a batch row gets what the row alone gets, up to
// f32 rounding of the order in which terms are added.
struct FfnBatchScratch {
  std::vector<float> gate, up, down, logits, latent_in, latent_out, shared_logit, inputs;
  std::vector<int32_t> experts, slot, offset;
  std::vector<float> gates;
  std::vector<BatchProduct> products;
};

struct FfnBatchCall {
  const FfnSpec& spec;
  const float* x;            // [n][d] the normed inputs
  float* y;                  // [n][d]: y_t += FFN(x_t)
  int64_t n;
  FfnScratch& scratch;       // the single-row scratch, for the per-row steps
  FfnBatchScratch& batch;
  kernels::ThreadPool* pool = nullptr;
  FfnProbe* probe = nullptr;
};

void dense_ffn_batch(const FfnWeights& w, int d, const FfnBatchCall& call);
// `experts_out`, when not null: [n][top_k] the ids each row chose.
void moe_ffn_batch(const MoeWeights& w, int d, const FfnBatchCall& call, int32_t* experts_out = nullptr);

}  // namespace wren
