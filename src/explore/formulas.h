// explore/: seeds 003/004's closed forms with one model's values substituted, beside the cost
// model's own figure for the same quantity. The seed's forms describe SwiGLU MoE decoders with
// GQA and sliding-window attention; where a model uses a mechanism they do not cover (ReLU^2
// FFNs, MLA, GDN, reuse, engram, mHC) the two figures differ and the page shows both.
#pragma once

#include <string>
#include <vector>

#include "explore/report.h"

namespace wren::explore {

struct Formula {
  std::string id;           // P_routed, P_shared, ..., F_train, M_state (labels live with the page)
  std::string closed_form;  // the seed's equation in its symbols
  std::string substituted;  // the same with this model's values
  double closed_value = 0;  // what the substituted form evaluates to
  double model_value = 0;   // the cost model's figure for the same quantity
};

// The forms at context n (`point` must be the report's point at n).
std::vector<Formula> seed_formulas(const ModelReport& r, const ContextPoint& point, const DecodeKnobs& k);

}  // namespace wren::explore
