// The initialisation rules, by tensor role and name:
// - matrices: N(0, 1/fan_in) (fan_in = last dimension); projections that write into the
//   residual stream (attn.wo, ffn w_down, latent_up) are further scaled by 1/sqrt(2 L) so
//   the stream's variance does not grow with depth (GPT-2); embedding N(0, 1); engram rows
//   N(0, 0.02^2) per value;
// - norms: 1 (0 with unit_offset gains); biases, sinks and balancing biases: 0;
// - attention-residual pseudo-queries: 0, so the first mix is uniform (Kimi);
// - GDN: A = U(1, 16) stored as log; decay bias = softplus^-1(dt), dt log-uniform in
//   [1e-3, 0.1] (Gated DeltaNet's reference init, and Mamba-2's for its A and dt); Mamba-2's
//   skip D: 1; short convs N(0, 1/K).
#include "config/init_rule.h"

#include <cmath>

namespace wren {

namespace {
bool ends_with(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}
}  // namespace

InitRule init_rule(const ModelConfig& c, const TensorInfo& t) {
  const std::string& n = t.name;
  InitRule r;
  switch (t.role) {
    case TensorRole::norm:
      r.kind = InitKind::constant;
      r.value = c.norm.unit_offset ? 0.0 : 1.0;
      return r;
    case TensorRole::buffer:
      r.kind = InitKind::constant;
      return r;
    case TensorRole::lookup:
      r.std = t.component == Component::embedding ? 1.0 : 0.02;
      return r;
    case TensorRole::conv:
      r.std = 1.0 / std::sqrt(double(t.shape.back()));
      return r;
    case TensorRole::vector:
      if (ends_with(n, "a_log")) return {InitKind::uniform_log, 0, 0, 1.0, 16.0};
      if (ends_with(n, "decay_bias")) return {InitKind::inv_softplus, 0, 0, 1e-3, 0.1};
      if (ends_with(n, "d_skip")) return {InitKind::constant, 0, 1.0};  // Mamba-2's D: the input passes through
      if (n.find("_mhc.bias") != std::string::npos) return {InitKind::mhc_bias};
      if (n.find("_mhc.alpha") != std::string::npos) return {InitKind::constant, 0, 0.01};
      r.kind = InitKind::constant;  // biases, sinks, pseudo-queries
      return r;
    case TensorRole::matrix:
      break;
  }
  const double fan_in = double(t.shape.back());
  r.std = 1.0 / std::sqrt(fan_in);
  if (n.find("_mhc.phi") != std::string::npos) r.std = 0.01 / std::sqrt(fan_in);
  const bool writes_stream = ends_with(n, "attn.wo") || ends_with(n, "w_down") || ends_with(n, "latent_up") ||
                             ends_with(n, "engram.w_value");
  if (writes_stream) r.std /= std::sqrt(2.0 * c.n_layers());
  // A neuron-major down projection [hidden, out] is applied as its transpose: fan-in is hidden.
  if (t.neuron_rows) r.std = 1.0 / std::sqrt(double(t.shape[t.shape.size() - 2])) / std::sqrt(2.0 * c.n_layers());
  return r;
}

}  // namespace wren
