#include "config/model_config.h"

#include <stdexcept>

namespace wren {

const MixerSpec* ModelConfig::find_mixer(const std::string& name) const {
  for (auto& m : mixers)
    if (m.name == name) return &m.spec;
  return nullptr;
}

const FfnSpec* ModelConfig::find_ffn(const std::string& name) const {
  for (auto& f : ffns)
    if (f.name == name) return &f.spec;
  return nullptr;
}

const MixerSpec& ModelConfig::mixer(int layer) const {
  const MixerSpec* m = find_mixer(layers.at(layer).mixer);
  if (!m) throw std::logic_error("layer " + std::to_string(layer) + ": unknown mixer " + layers[layer].mixer);
  return *m;
}

const FfnSpec& ModelConfig::ffn(int layer) const {
  const FfnSpec* f = find_ffn(layers.at(layer).ffn);
  if (!f) throw std::logic_error("layer " + std::to_string(layer) + ": unknown ffn " + layers[layer].ffn);
  return *f;
}

int ModelConfig::cache_owner(int layer) const {
  const KvSource& kv = layers.at(layer).kv;
  return kv.kind == KvSourceKind::reuse ? kv.layer : layer;
}

bool ModelConfig::has_cache(int layer) const {
  return layers.at(layer).kv.kind != KvSourceKind::reuse && mixer(layer).kind != MixerKind::sparse_reuse &&
         mixer(layer).kind != MixerKind::short_conv && mixer(layer).kind != MixerKind::mamba2;
}

bool ModelConfig::fills_own_cache(int layer) const {
  return layers.at(layer).kv.kind == KvSourceKind::own && has_cache(layer);
}

static bool layers_with_gated_engram(const ModelConfig& c, int layer) {
  if (!c.engram || c.engram->placement != EngramPlacement::gated_add) return false;
  for (int at : c.engram->layers)
    if (at == layer) return true;
  return false;
}

int ModelConfig::prefill_exit_layer() const {
  for (int e = 0; e < n_layers(); ++e) {
    bool ok = true;
    for (int j = e; j < n_layers() && ok; ++j) {
      const MixerSpec& m = mixer(j);
      const KvSource& kv = layers[j].kv;
      if (is_recurrent(m.kind)) ok = false;  // state needs every token
      else if (j > e && layers_with_gated_engram(*this, j)) ok = false;              // its conv needs every token
      else if (!has_cache(j)) continue;                                               // reads another layer's cache
      else if (kv.kind == KvSourceKind::bridge) ok = kv.layer <= e;                   // mixed from layers < kv.layer
      else ok = j == e;                                                               // own input: only layer e's is ready
    }
    if (ok) return e;
  }
  return n_layers();
}

static bool is_prime(int64_t n) {
  if (n < 2) return false;
  for (int64_t d = 2; d * d <= n; ++d)
    if (n % d == 0) return false;
  return true;
}

std::vector<int64_t> engram_table_rows(const EngramSpec& spec) {
  std::vector<int64_t> rows;
  int64_t candidate = spec.rows - 1;
  for (int t = 0; t < spec.tables(); ++t) {
    do ++candidate; while (!is_prime(candidate));
    rows.push_back(candidate);
  }
  return rows;
}

const char* to_string(MixerKind k) {
  switch (k) {
    case MixerKind::attention: return "attention";
    case MixerKind::relu2_attention: return "relu2_attention";
    case MixerKind::sparse_reuse: return "sparse_reuse";
    case MixerKind::mla: return "mla";
    case MixerKind::gdn: return "gdn";
    case MixerKind::gdn2: return "gdn2";
    case MixerKind::short_conv: return "short_conv";
    case MixerKind::mamba2: return "mamba2";
  }
  return "?";
}

const char* to_string(Activation a) {
  switch (a) {
    case Activation::swiglu: return "swiglu";
    case Activation::geglu: return "geglu";
    case Activation::relu2: return "relu2";
    case Activation::swiglu_oai: return "swiglu_oai";
  }
  return "?";
}

}  // namespace wren
