// model/: counters of the sparsity the engine can exploit, filled while a Session runs when
// one is attached (SessionOptions::probe; null by default, then the layers only test a
// pointer). Plain counts per layer, per head and per neuron; `wren sparsity` reports them.
//
//   zero weights   ReLU^2 attention: (query, head, key) triples with w_j = max(s_j, 0)^2 = 0
//   V-skip         at queries at `skip_position`: key positions lying in a group of
//                  `skip_group` consecutive keys (grouped from position 0; the last partial
//                  group too) whose weights are all zero, so the group's V rows are never read.
//                  Per query head, and per KV head (a row is needed if any query head of its
//                  group weights it)
//   dead neurons   ReLU^2 FFN neurons with relu(u) = 0 on every token seen; fired per token is
//                  what dead_neuron_skip saves (rows of W_down read)
//   expert load    tokens routed to each expert of an MoE layer
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "config/model_config.h"

namespace wren {

// One full ReLU^2 attention layer.
struct Relu2Probe {
  int n_heads = 0, n_kv_heads = 0, skip_group = 8;
  int64_t skip_position = -1;  // queries at this position are counted for V-skip (-1: none)
  int64_t weights = 0, zeros = 0;                 // over all queries, heads and keys
  std::vector<int64_t> head_weights, head_zeros;  // per query head
  int64_t skip_queries = 0;                       // queries seen at skip_position
  int64_t skip_keys = 0;                          // keys those queries saw (per head)
  std::vector<int64_t> head_skipped, kv_skipped;  // keys in all-zero groups, summed over those queries
  std::vector<uint8_t> needed;                    // scratch: [kv_heads][keys] V row read by some head

  void init(const MixerSpec& m, int group);
  bool active() const { return n_heads > 0; }
  // Head `head` (of KV head `kv_head`) at position `pos` weighted keys 0 .. n-1 with w.
  void record_head(int head, int kv_head, const float* w, int64_t n, int64_t pos);
  // All heads of the query at `pos` are recorded.
  void finish_query(int64_t pos, int64_t n);
};

// One ReLU^2 FFN block: a dense FFN, one routed expert, or the shared experts together.
struct NeuronProbe {
  int64_t tokens = 0, fired = 0;  // tokens run through it; neurons fired, summed over them
  std::vector<int64_t> fires;     // per neuron: tokens it fired on
  void init(int64_t hidden) { fires.assign(size_t(hidden), 0); }
  int64_t width() const { return int64_t(fires.size()); }
  void record(const int32_t* neurons, int64_t n_fired);
  int64_t dead() const;  // neurons that never fired
};

// One FFN layer.
struct FfnProbe {
  FfnKind kind = FfnKind::dense;
  bool relu2 = false;  // neuron counts are kept only for ReLU^2 FFNs
  int top_k = 0;
  int64_t tokens = 0;
  NeuronProbe dense, shared;
  std::vector<NeuronProbe> experts;
  std::vector<int64_t> expert_tokens;  // tokens routed to each expert

  void init(const FfnSpec& f);
  void record_route(const int32_t* experts, int k);
};

struct LayerProbe {
  Relu2Probe attention;  // active only for relu2_attention layers
  FfnProbe ffn;
};

class SparsityProbe {
 public:
  explicit SparsityProbe(const ModelConfig& c, int skip_group = 8);
  // Counts V-skip at queries at this position (a window's last: context = position + 1).
  void set_skip_position(int64_t pos);
  // Made for a config of this shape (layers, heads, experts, widths)?
  bool fits(const ModelConfig& c) const;
  int skip_group() const { return skip_group_; }
  std::vector<LayerProbe> layers;

 private:
  int skip_group_;
};

// Keys among 0 .. n-1 that lie in a group of `group` consecutive keys (from 0; the last
// partial group included) none of which is needed (needed[j] != 0).
template <class T>
int64_t keys_in_unneeded_groups(const T* needed, int64_t n, int group) {
  int64_t skipped = 0;
  for (int64_t start = 0; start < n; start += group) {
    const int64_t end = std::min<int64_t>(n, start + group);
    bool any = false;
    for (int64_t j = start; j < end && !any; ++j) any = needed[j] != T(0);
    if (!any) skipped += end - start;
  }
  return skipped;
}

}  // namespace wren
