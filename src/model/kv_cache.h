// model/: one layer's key/value cache. A window layer keeps a ring of `capacity` slots (the
// most recent tokens); a full layer keeps every token up to `capacity` (the session's
// context). Keys are stored as the mechanisms use them: rotated (RoPE layers) or
// normalised (ReLU^2 layers), so reading never recomputes them.
#pragma once

#include <algorithm>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

namespace wren {

struct KvCache {
  int kv_dim = 0;  // n_kv_heads * head_dim
  int64_t capacity = 0;
  bool ring = false;
  int64_t count = 0;  // tokens appended so far (positions 0 .. count-1)
  std::vector<float> k, v;

  void init(int dim, int64_t cap, bool is_ring) {
    kv_dim = dim;
    capacity = cap;
    ring = is_ring;
    count = 0;
    k.assign(size_t(dim * cap), 0.0f);
    v.assign(size_t(dim * cap), 0.0f);
  }
  bool empty() const { return kv_dim == 0; }
  // The oldest position still held.
  int64_t first() const { return ring ? std::max<int64_t>(0, count - capacity) : 0; }
  int64_t slot(int64_t pos) const { return ring ? pos % capacity : pos; }
  const float* key(int64_t pos) const { return k.data() + slot(pos) * kv_dim; }
  const float* value(int64_t pos) const { return v.data() + slot(pos) * kv_dim; }
  // Room for the next token's key and value; the caller fills both.
  std::pair<float*, float*> append() {
    if (!ring && count >= capacity)
      throw std::runtime_error("context full: the session holds " + std::to_string(capacity) + " tokens");
    const int64_t s = slot(count++);
    return {k.data() + s * kv_dim, v.data() + s * kv_dim};
  }
};

}  // namespace wren
