// train/: Exact Quantile Balancing, quantile balancing and load statistics (equations in balance.h).
#include "train/balance.h"

#include <cmath>
#include <string>

namespace wren::train {

namespace {

void check(const torch::Tensor& s, const torch::Tensor& b, int64_t k, const char* who) {
  auto fail = [&](const std::string& what) { throw BalanceError(std::string(who) + ": " + what); };
  if (!s.defined() || s.dim() != 2 || s.size(0) < 1)
    fail("scores must be [T, E] with T >= 1");
  if (!b.defined() || b.dim() != 1 || b.size(0) != s.size(1))
    fail("bias must be [E] with E = " + std::to_string(s.size(1)));
  if (k < 1 || k >= s.size(1))
    fail("k must be in [1, E - 1] = [1, " + std::to_string(s.size(1) - 1) + "], got " + std::to_string(k));
}

// The n-th largest (1-based) along dim: the (size - n + 1)-th smallest.
torch::Tensor nth_largest(const torch::Tensor& x, int64_t n, int64_t dim) {
  return std::get<0>(torch::kthvalue(x, x.size(dim) - n + 1, dim));
}

}  // namespace

torch::Tensor eqb_update(const torch::Tensor& scores, const torch::Tensor& bias, int64_t k) {
  check(scores, bias, k, "eqb_update");
  torch::NoGradGuard no_grad;
  const torch::Tensor s = scores.detach().to(torch::kFloat32);
  const torch::Tensor biased = s + bias.detach().to(torch::kFloat32);
  const int64_t T = s.size(0), E = s.size(1);
  const int64_t q = T * k / E;  // floor(T k / E) <= T - 1 since k < E
  // The bar expert e must clear for token t: the k-th largest of the other experts' biased
  // scores, which is the (k+1)-th largest overall when e is among the top k, the k-th otherwise.
  torch::Tensor top = std::get<0>(torch::topk(biased, k + 1, 1));  // [T, k + 1], descending
  torch::Tensor kth = top.select(1, k - 1).unsqueeze(1), next = top.select(1, k).unsqueeze(1);
  torch::Tensor bar = torch::where(biased >= kth, next, kth);      // [T, E]
  return -nth_largest(s - bar, q + 1, 0);                           // [E]
}

torch::Tensor quantile_balance(const torch::Tensor& scores, const torch::Tensor& beta, int64_t k) {
  check(scores, beta, k, "quantile_balance");
  torch::NoGradGuard no_grad;
  const torch::Tensor s = scores.detach().to(torch::kFloat32);
  const int64_t T = s.size(0), E = s.size(1);
  const int64_t q = T * k / E;
  torch::Tensor alpha = nth_largest(s - beta.detach().to(torch::kFloat32), k + 1, 1);  // [T]
  return nth_largest(s - alpha.unsqueeze(1), q + 1, 0);                              // [E]
}

torch::Tensor select_experts(const torch::Tensor& scores, const torch::Tensor& bias, int64_t k) {
  check(scores, bias, k, "select_experts");
  torch::NoGradGuard no_grad;
  return std::get<1>(torch::topk(scores.detach() + bias.detach(), k, 1));
}

torch::Tensor expert_counts(const torch::Tensor& chosen, int64_t n_experts) {
  if (!chosen.defined() || chosen.dim() != 2) throw BalanceError("expert_counts: chosen must be [T, k]");
  if (chosen.numel() && (chosen.min().item<int64_t>() < 0 || chosen.max().item<int64_t>() >= n_experts))
    throw BalanceError("expert_counts: expert ids must be in [0, " + std::to_string(n_experts) + ")");
  return torch::bincount(chosen.reshape(-1).to(torch::kInt64), {}, n_experts);
}

LoadStats load_stats(const torch::Tensor& counts) {
  if (!counts.defined() || counts.dim() != 1 || counts.size(0) < 2)
    throw BalanceError("load_stats: counts must be [E] with E >= 2");
  const torch::Tensor c = counts.to(torch::kFloat64);
  const double total = c.sum().item<double>();
  if (total <= 0) throw BalanceError("load_stats: no token slots were counted");
  const int64_t E = c.size(0);
  const double fair = total / double(E);
  const torch::Tensor f = c / total;
  // 0 log 0 = 0: xlogy gives exactly that.
  const double h = -torch::special_xlogy(f, f).sum().item<double>();
  return {c.max().item<double>() / fair, c.min().item<double>() / fair, h / std::log(double(E))};
}

LoadStats mean_load_stats(const std::vector<LoadStats>& layers) {
  LoadStats m;
  if (layers.empty()) return m;
  for (const LoadStats& l : layers) {
    m.busiest += l.busiest;
    m.least_used += l.least_used;
    m.entropy += l.entropy;
  }
  const double n = double(layers.size());
  return {m.busiest / n, m.least_used / n, m.entropy / n};
}

}  // namespace wren::train
