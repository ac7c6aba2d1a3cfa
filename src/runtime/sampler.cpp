#include "runtime/sampler.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <unordered_set>

namespace wren {

Sampler::Sampler(const SamplerParams& p) : p_(p), rng_(p.seed) {}

int32_t Sampler::sample(std::span<float> logits, std::span<const int32_t> recent) {
  const int n = int(logits.size());
  // A NaN would break the orderings below; a token with an undefined logit is never chosen.
  for (float& l : logits)
    if (std::isnan(l)) l = -INFINITY;
  if (p_.repeat_penalty != 1.0f && p_.repeat_last_n > 0) {
    // Each distinct recent token is penalised once (CTRL-style): l / r if positive, l * r otherwise.
    std::unordered_set<int32_t> seen;
    size_t from = recent.size() > size_t(p_.repeat_last_n) ? recent.size() - p_.repeat_last_n : 0;
    for (size_t i = from; i < recent.size(); ++i) {
      int32_t t = recent[i];
      if (t < 0 || t >= n || !seen.insert(t).second) continue;
      logits[t] = logits[t] > 0 ? logits[t] / p_.repeat_penalty : logits[t] * p_.repeat_penalty;
    }
  }
  if (p_.temperature <= 0.0f) {  // greedy; ties go to the lower id
    return int32_t(std::max_element(logits.begin(), logits.end()) - logits.begin());
  }

  candidates_.resize(n);
  for (int i = 0; i < n; ++i) candidates_[i] = {i, logits[i]};
  auto by_logit = [](const Candidate& a, const Candidate& b) {
    return a.logit > b.logit || (a.logit == b.logit && a.id < b.id);
  };
  size_t keep = candidates_.size();
  if (p_.top_k > 0 && size_t(p_.top_k) < keep) {
    keep = size_t(p_.top_k);
    std::partial_sort(candidates_.begin(), candidates_.begin() + long(keep), candidates_.end(), by_logit);
  } else {
    std::sort(candidates_.begin(), candidates_.end(), by_logit);
  }
  candidates_.resize(keep);

  // Probabilities at temperature 1 decide top-p and min-p (as llama.cpp); temperature then
  // reshapes what is left.
  auto softmax = [&](float temperature) {
    probs_.resize(candidates_.size());
    const float top = candidates_[0].logit;
    double sum = 0;
    for (size_t i = 0; i < candidates_.size(); ++i) sum += probs_[i] = std::exp((candidates_[i].logit - top) / temperature);
    for (float& q : probs_) q = float(q / sum);
  };
  softmax(1.0f);
  if (p_.top_p < 1.0f) {
    double cum = 0;
    size_t k = 0;
    while (k < probs_.size()) {
      cum += probs_[k++];
      if (cum >= p_.top_p) break;
    }
    candidates_.resize(std::max<size_t>(k, 1));
    probs_.resize(candidates_.size());
  }
  if (p_.min_p > 0.0f) {
    const float floor = p_.min_p * probs_[0];
    size_t k = 1;
    while (k < probs_.size() && probs_[k] >= floor) ++k;
    candidates_.resize(k);
  }
  softmax(p_.temperature);
  std::discrete_distribution<size_t> draw(probs_.begin(), probs_.end());
  return candidates_[draw(rng_)].id;
}

std::string StopMatcher::push(const std::string& piece) {
  if (stopped_) return "";
  pending_ += piece;
  for (const std::string& s : stops_) {
    if (s.empty()) continue;
    size_t at = pending_.find(s);
    if (at != std::string::npos) {
      stopped_ = true;
      std::string out = pending_.substr(0, at);
      pending_.clear();
      return out;
    }
  }
  // Hold back the longest suffix that is a proper prefix of some stop string.
  size_t hold = 0;
  for (const std::string& s : stops_)
    for (size_t len = std::min(s.size() - (s.empty() ? 0 : 1), pending_.size()); len > hold; --len)
      if (pending_.compare(pending_.size() - len, len, s, 0, len) == 0) {
        hold = len;
        break;
      }
  std::string out = pending_.substr(0, pending_.size() - hold);
  pending_.erase(0, pending_.size() - hold);
  return out;
}

std::string StopMatcher::flush() {
  std::string out = stopped_ ? "" : pending_;
  pending_.clear();
  return out;
}

}  // namespace wren
