#include "runtime/stats.h"

#include "explore/cost_model.h"

namespace wren {

TokenBytes bytes_per_token(const Model& m, int64_t context_tokens, double firing_fraction, double cache_value_bytes) {
  TokenBytes b;
  for (const TensorInfo& t : m.map.tensors) {
    if (t.activity == Activity::never) continue;
    const kernels::MatrixView v = m.storage->matrix(t);
    double bytes = double(v.bytes());
    if (t.activity == Activity::routed) bytes *= t.active_fraction;
    if (t.activity == Activity::lookup) bytes = bytes / double(v.rows) * double(t.lookup_rows);
    if (t.neuron_rows) bytes *= firing_fraction;
    if (t.component == Component::lm_head) b.lm_head += bytes;
    else if (t.component == Component::engram_tables) b.engram += bytes;
    else b.weights += bytes;
  }
  if (m.config.tie_embeddings) b.lm_head += double(m.lm_head.bytes());
  b.kv = cache_bytes_per_token(m, context_tokens, cache_value_bytes);
  return b;
}

double cache_bytes_per_token(const Model& m, int64_t n, double cache_value_bytes) {
  const explore::State s = explore::state(m.config, double(n));
  const double recurrent = s.recurrent_stored;  // read whole every step
  return (s.read_total() - recurrent) * cache_value_bytes + recurrent * sizeof(float);
}

}  // namespace wren
