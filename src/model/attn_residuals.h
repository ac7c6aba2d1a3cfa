// model/: block attention residuals (Kimi, arXiv 2603.15031; NOTES.md 1). A sublayer's input
// is a softmax-weighted mix of the residual sources that exist at its point:
//   h = sum_s softmax_s(w . RMSNorm(x_s)) x_s
// with the sublayer's own pseudo-query w (zero at init: a uniform mix) and scoring gain;
// the values themselves are not normalised. Sources: the embedding e, the engram g (layers
// >= 1), the finished block sums B_0..B_{b-1}, and the current block's partial sum P when it
// is not empty. The KV bridge and the final read-out are mixes of the same form.
#pragma once

#include <cstdint>
#include <vector>

#include "model/tensor.h"

namespace wren {

// Pseudo-query and scoring gain of one attention-residual mix (or KV bridge).
struct MixWeights {
  Vec query, norm;
};


// The sources one mix reads, as pointers to d-wide vectors (at most 2 + blocks + 1).
struct ResidualSources {
  std::vector<const float*> x;
};

// Writes the mix weights (they sum to one) to `weights` and the mix to `h`. `tmp` holds d
// floats of scratch.
void attn_res_mix(const MixWeights& w, const ResidualSources& sources, int d, float eps, bool unit_offset, float* weights,
                  float* h, float* tmp);

}  // namespace wren
