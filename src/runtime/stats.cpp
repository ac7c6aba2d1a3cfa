#include "runtime/stats.h"

#include "explore/cost_model.h"

namespace wren {

double weight_bytes_per_token(const Model& m, double firing_fraction) {
  double total = 0;
  for (const TensorInfo& t : m.map.tensors) {
    if (t.activity == Activity::never) continue;
    const kernels::MatrixView v = m.storage->matrix(t);
    double bytes = double(v.bytes());
    if (t.activity == Activity::routed) bytes *= t.active_fraction;
    if (t.activity == Activity::lookup) bytes = bytes / double(v.rows) * double(t.lookup_rows);
    if (t.neuron_rows) bytes *= firing_fraction;
    total += bytes;
  }
  if (m.config.tie_embeddings) total += double(m.lm_head.bytes());
  return total;
}

double cache_bytes_per_token(const Model& m, int64_t n) {
  return explore::state(m.config, double(n)).read_total() * sizeof(float);
}

}  // namespace wren
