// train/: expert load balancing without an auxiliary loss (NOTES.md 4; seed 000 "EQB"; seed 002
// "quantile balancing"; REFERENCES.md "Load balancing"), and the load statistics of seed 002 A7-A8.
//
// A router scores token t for expert e with s_te (unbiased: sigmoid or softmax scores) and
// chooses the top k of s_t + b, with b [E] a balancing bias that only moves the selection; the
// chosen experts' gate weights come from the unbiased scores. After each step, q = floor(T k / E):
//
// Exact Quantile Balancing (seed 000: "each bias [set] to the exact cutoff that would have given
// its expert its share of the batch's tokens"; bias added):
//   bar_te = the k-th largest of (s_tj + b_j) over the other experts j != e
//            (= the (k+1)-th largest overall when e is in t's top k, the k-th otherwise);
//            e is chosen for t exactly when s_te + b_e > bar_te
//   b'_e   = -[the (q+1)-th largest over tokens of (s_te - bar_te)]
// With the other biases as they were, b'_e puts e in the top k of exactly q tokens (plus the
// (q+1)-th, which sits on the bar: a tie, decided by rounding).
//
// Quantile balancing (REFERENCES.md, Su / Kimi, used by Nenya; bias subtracted, route on s - beta),
// which is NOTES.md 4's "one workable exact form" with beta = -b:
//   alpha_t = the (k+1)-th largest of (s_t - beta);  beta'_e = the (q+1)-th largest of (s_te - alpha_t)
// It differs from EQB only in the bar of experts outside t's top k: alpha_t is the (k+1)-th
// largest instead of the k-th. That is not exact: the expert that is itself t's (k+1)-th gets
// s_te - alpha_t = beta_e on every such token, a block of equal values, and when its (q+1)-th
// largest falls in that block its bias does not move (measured: an expert kept at 5 tokens against a share of 16, E = 8, k = 2).
//
// Across the ranks of a data-parallel run (train/distributed.h) both take their order
// statistics over the union of every rank's tokens (seed 000: EQB "finds that cutoff exactly
// across GPUs, at the cost of two small all-reduces per layer per step"): bar_te and alpha_t
// are per token, so each rank computes them for its own tokens, and only the column's
// (q+1)-th largest needs the others. It is found by a radix select over the 32-bit
// order-preserving key of each f32 value (key = bits ^ 0x80000000 for v >= 0, ~bits for v < 0,
// so keys order as the values do), one byte per pass from the top: a pass histograms the byte
// of the keys that match the bytes already chosen ([E, 256] counts, summed over ranks), and
// the bin where the count from the top reaches the rank sought fixes that byte. The seed's
// scores are bf16 (16 bits: two passes); Wren's are f32, so four passes of [E, 256] counts
// per layer. The result is the exact value single-process EQB finds on the global batch.
//
// Both update every bias at once, each assuming the others stay, so top-k on the new biases is
// near the share, not on it; repeated on one batch both settle within a few percent of it
// (tests/train/test_balance.cpp). No step size, no gradient: they run under NoGradGuard.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <functional>
#include <stdexcept>
#include <vector>

namespace wren::train {

struct BalanceError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// Sums a tensor over every rank in place (Dist::all_reduce_sum); empty for one process.
using AllReduceSum = std::function<void(torch::Tensor&)>;

// The n-th largest (1-based) of each column of v [T, E] (f32) over the rows of every rank, [E]:
// the radix select above when `reduce` is set (n counts over all ranks' rows), torch::kthvalue
// otherwise. Throws BalanceError when n is outside [1, total rows].
torch::Tensor nth_largest_over_ranks(const torch::Tensor& v, int64_t n, const AllReduceSum& reduce);

// New EQB biases b' [E] (float32) from scores [T, E] and the biases b [E] used to route them;
// with `reduce`, scores is this rank's share of the tokens and T, q count every rank's.
torch::Tensor eqb_update(const torch::Tensor& scores, const torch::Tensor& bias, int64_t k,
                         const AllReduceSum& reduce = {});
// Nenya's sign convention: new beta [E] from scores [T, E] and beta [E] (routing on s - beta).
torch::Tensor quantile_balance(const torch::Tensor& scores, const torch::Tensor& beta, int64_t k,
                               const AllReduceSum& reduce = {});

// The experts each token chooses: top k of s + b, [T, k] int64 (best first).
torch::Tensor select_experts(const torch::Tensor& scores, const torch::Tensor& bias, int64_t k);
// Token slots per expert, [E] int64, from chosen experts [T, k].
torch::Tensor expert_counts(const torch::Tensor& chosen, int64_t n_experts);

// One layer's load in one step (seed 002 A7, A8), c_e = slots of expert e, N = sum_e c_e = T k:
//   busiest = max_e c_e / (N / E),  least_used = min_e c_e / (N / E),
//   entropy = -sum_e f_e log f_e / log E  with f_e = c_e / N  (1 when every expert is used equally)
struct LoadStats {
  double busiest = 0, least_used = 0, entropy = 0;
};
LoadStats load_stats(const torch::Tensor& counts);
// The mean over layers, as the seed's figures average over MoE blocks.
LoadStats mean_load_stats(const std::vector<LoadStats>& layers);

}  // namespace wren::train
