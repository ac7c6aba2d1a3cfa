// config/: how each tensor is initialised. The engine's `wren init` and the trainer draw
// from the same rules, so a model directory made by either starts from the same
// distribution (and, with the same seed, the same values: see model/init).
#pragma once

#include "config/model_config.h"
#include "config/weight_map.h"

namespace wren {

enum class InitKind {
  normal,        // N(0, std^2)
  constant,      // every value = value
  uniform_log,   // log(U(lo, hi)): GDN A_log, A ~ U(1, 16)
  inv_softplus,  // softplus^-1(dt), dt log-uniform in [lo, hi]: GDN decay bias
  mhc_bias,      // mHC bias: reads one stream per sublayer (cycling with depth), near-identity mixing
};

struct InitRule {
  InitKind kind = InitKind::normal;
  double std = 0.02;
  double value = 0;
  double lo = 0, hi = 0;
};

InitRule init_rule(const ModelConfig& c, const TensorInfo& t);

}  // namespace wren
