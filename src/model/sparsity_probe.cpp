// The sparsity counters (model/sparsity_probe.h): what each layer hands over, tallied.
#include "model/sparsity_probe.h"

#include <stdexcept>
#include <string>

namespace wren {

void Relu2Probe::init(const MixerSpec& m, int group) {
  n_heads = m.n_heads, n_kv_heads = m.n_kv_heads, skip_group = group;
  head_weights.assign(size_t(n_heads), 0), head_zeros.assign(size_t(n_heads), 0);
  head_skipped.assign(size_t(n_heads), 0), kv_skipped.assign(size_t(n_kv_heads), 0);
}

void Relu2Probe::record_head(int head, int kv_head, const float* w, int64_t n, int64_t pos) {
  int64_t z = 0;
  for (int64_t j = 0; j < n; ++j) z += w[j] == 0.0f;
  weights += n, zeros += z;
  head_weights[size_t(head)] += n, head_zeros[size_t(head)] += z;
  if (pos != skip_position) return;
  head_skipped[size_t(head)] += keys_in_unneeded_groups(w, n, skip_group);
  if (needed.size() < size_t(n_kv_heads) * size_t(n)) needed.resize(size_t(n_kv_heads) * size_t(n));
  uint8_t* need = needed.data() + size_t(kv_head) * size_t(n);
  if (head % (n_heads / n_kv_heads) == 0) std::fill(need, need + n, uint8_t(0));  // the group's first head
  for (int64_t j = 0; j < n; ++j) need[j] |= w[j] != 0.0f;
}

void Relu2Probe::finish_query(int64_t pos, int64_t n) {
  if (pos != skip_position) return;
  ++skip_queries;
  skip_keys += n;
  for (int g = 0; g < n_kv_heads; ++g)
    kv_skipped[size_t(g)] += keys_in_unneeded_groups(needed.data() + size_t(g) * size_t(n), n, skip_group);
}

void NeuronProbe::record(const int32_t* neurons, int64_t n_fired) {
  ++tokens;
  fired += n_fired;
  for (int64_t i = 0; i < n_fired; ++i) ++fires[size_t(neurons[i])];
}

int64_t NeuronProbe::dead() const {
  int64_t d = 0;
  for (int64_t f : fires) d += f == 0;
  return d;
}

void FfnProbe::init(const FfnSpec& f) {
  kind = f.kind;
  relu2 = f.activation == Activation::relu2;
  top_k = f.top_k;
  if (f.kind == FfnKind::dense) {
    if (relu2) dense.init(f.hidden);
    return;
  }
  expert_tokens.assign(size_t(f.n_experts), 0);
  if (!relu2) return;
  experts.resize(size_t(f.n_experts));
  for (NeuronProbe& e : experts) e.init(f.expert_hidden);
  if (f.n_shared) shared.init(int64_t(f.n_shared) * f.shared_hidden);
}

void FfnProbe::record_route(const int32_t* chosen, int k) {
  ++tokens;
  for (int i = 0; i < k; ++i) ++expert_tokens[size_t(chosen[i])];
}

SparsityProbe::SparsityProbe(const ModelConfig& c, int skip_group) : skip_group_(skip_group) {
  if (skip_group < 1) throw std::invalid_argument("skip group: " + std::to_string(skip_group) + ", expected >= 1");
  layers.resize(size_t(c.n_layers()));
  for (int i = 0; i < c.n_layers(); ++i) {
    if (c.mixer(i).kind == MixerKind::relu2_attention) layers[size_t(i)].attention.init(c.mixer(i), skip_group);
    layers[size_t(i)].ffn.init(c.ffn(i));
  }
}

bool SparsityProbe::fits(const ModelConfig& c) const {
  const SparsityProbe fresh(c, skip_group_);
  if (fresh.layers.size() != layers.size()) return false;
  for (size_t i = 0; i < layers.size(); ++i) {
    const LayerProbe &a = layers[i], &b = fresh.layers[i];
    if (a.attention.n_heads != b.attention.n_heads || a.attention.n_kv_heads != b.attention.n_kv_heads ||
        a.ffn.kind != b.ffn.kind || a.ffn.relu2 != b.ffn.relu2 || a.ffn.top_k != b.ffn.top_k ||
        a.ffn.expert_tokens.size() != b.ffn.expert_tokens.size() || a.ffn.experts.size() != b.ffn.experts.size() ||
        a.ffn.dense.width() != b.ffn.dense.width() || a.ffn.shared.width() != b.ffn.shared.width() ||
        (!a.ffn.experts.empty() && a.ffn.experts[0].width() != b.ffn.experts[0].width()))
      return false;
  }
  return true;
}

void SparsityProbe::set_skip_position(int64_t pos) {
  for (LayerProbe& l : layers) l.attention.skip_position = pos;
}

}  // namespace wren
