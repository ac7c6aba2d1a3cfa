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

constexpr int64_t kSignBit = int64_t(1) << 31, kLow32 = (int64_t(1) << 32) - 1;

// The order-preserving key of each f32 value, in [0, 2^32) as int64: the sign bit flipped for
// v >= 0, every bit flipped for v < 0.
torch::Tensor order_key(const torch::Tensor& v) {
  const torch::Tensor bits = v.contiguous().view(torch::kInt32).to(torch::kInt64).bitwise_and(kLow32);
  return torch::where(bits >= kSignBit, bits.bitwise_xor(kLow32), bits.bitwise_xor(kSignBit));
}

// The f32 values of keys [E] (order_key's inverse).
torch::Tensor value_of_key(const torch::Tensor& key) {
  torch::Tensor bits = torch::where(key >= kSignBit, key.bitwise_xor(kSignBit), key.bitwise_xor(kLow32));
  bits = torch::where(bits >= kSignBit, bits - (kLow32 + 1), bits);  // as signed 32-bit
  return bits.to(torch::kInt32).view(torch::kFloat32);
}

// Tokens over every rank: T, summed when reducing.
int64_t total_rows(const torch::Tensor& v, const AllReduceSum& reduce) {
  if (!reduce) return v.size(0);
  torch::Tensor t = torch::full({1}, v.size(0), torch::kInt64);
  reduce(t);
  return t.item<int64_t>();
}

}  // namespace

torch::Tensor nth_largest_over_ranks(const torch::Tensor& v, int64_t n, const AllReduceSum& reduce) {
  if (!v.defined() || v.dim() != 2) throw BalanceError("nth_largest_over_ranks: values must be [T, E]");
  const int64_t T = total_rows(v, reduce), E = v.size(1);
  if (n < 1 || n > T)
    throw BalanceError("nth_largest_over_ranks: n = " + std::to_string(n) + " outside [1, " + std::to_string(T) + "]");
  torch::NoGradGuard no_grad;
  if (!reduce) return nth_largest(v.to(torch::kFloat32), n, 0);
  const torch::Tensor key = order_key(v.to(torch::kFloat32));                             // [T, E]
  const torch::Tensor column_base = (torch::arange(E, torch::kInt64) * 256).unsqueeze(0);  // [1, E]
  torch::Tensor prefix = torch::zeros({E}, torch::kInt64);     // the bytes chosen so far
  torch::Tensor remaining = torch::full({E}, n, torch::kInt64);  // the rank sought among the matching keys
  for (int shift = 24; shift >= 0; shift -= 8) {
    const torch::Tensor byte = key.__rshift__(shift).bitwise_and(int64_t(255));
    const torch::Tensor match =
        shift == 24 ? torch::ones_like(key) : key.__rshift__(shift + 8).eq(prefix.__rshift__(shift + 8)).to(torch::kInt64);
    torch::Tensor hist = torch::zeros({E * 256}, torch::kInt64);
    hist.scatter_add_(0, (column_base + byte).reshape({-1}), match.reshape({-1}));
    reduce(hist);
    hist = hist.view({E, 256});
    // From the top bin down: from_top[e][j] = keys of bins 255 - j .. 255; the chosen bin is
    // the first where that count reaches the rank sought.
    const torch::Tensor from_top = hist.flip(1).cumsum(1);
    const torch::Tensor j = (from_top < remaining.unsqueeze(1)).sum(1);  // [E], in [0, 255]
    const torch::Tensor bin = 255 - j;
    const torch::Tensor above = from_top.gather(1, j.unsqueeze(1)).squeeze(1) - hist.gather(1, bin.unsqueeze(1)).squeeze(1);
    remaining = remaining - above;
    prefix = prefix.bitwise_or(bin.__lshift__(shift));
  }
  return value_of_key(prefix);
}

torch::Tensor eqb_update(const torch::Tensor& scores, const torch::Tensor& bias, int64_t k, const AllReduceSum& reduce) {
  check(scores, bias, k, "eqb_update");
  torch::NoGradGuard no_grad;
  const torch::Tensor s = scores.detach().to(torch::kFloat32);
  const torch::Tensor biased = s + bias.detach().to(torch::kFloat32);
  const int64_t T = total_rows(s, reduce), E = s.size(1);
  const int64_t q = T * k / E;  // floor(T k / E) <= T - 1 since k < E
  // The bar expert e must clear for token t: the k-th largest of the other experts' biased
  // scores, which is the (k+1)-th largest overall when e is among the top k, the k-th otherwise.
  torch::Tensor top = std::get<0>(torch::topk(biased, k + 1, 1));  // [T, k + 1], descending
  torch::Tensor kth = top.select(1, k - 1).unsqueeze(1), next = top.select(1, k).unsqueeze(1);
  torch::Tensor bar = torch::where(biased >= kth, next, kth);      // [T, E]
  return -nth_largest_over_ranks(s - bar, q + 1, reduce);           // [E]
}

torch::Tensor quantile_balance(const torch::Tensor& scores, const torch::Tensor& beta, int64_t k,
                               const AllReduceSum& reduce) {
  check(scores, beta, k, "quantile_balance");
  torch::NoGradGuard no_grad;
  const torch::Tensor s = scores.detach().to(torch::kFloat32);
  const int64_t T = total_rows(s, reduce), E = s.size(1);
  const int64_t q = T * k / E;
  torch::Tensor alpha = nth_largest(s - beta.detach().to(torch::kFloat32), k + 1, 1);  // [T]
  return nth_largest_over_ranks(s - alpha.unsqueeze(1), q + 1, reduce);             // [E]
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
