// model/: the two kinds of parameter a mechanism reads. Large tensors are kernel views into
// mapped files or owned memory (any storage type); small ones (norm gains, biases, pseudo-
// queries, conv taps) are f32 vectors converted once at load. Absent tensors are empty.
#pragma once

#include <vector>

#include "kernels/types.h"

namespace wren {

using kernels::MatrixView;
using Vec = std::vector<float>;

inline bool present(const MatrixView& m) { return m.rows > 0; }

}  // namespace wren
