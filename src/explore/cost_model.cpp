// The cost model. Closed forms of seeds 003/004 for GQA / sliding-window attention,
// extended per mechanism as NOTES.md section 3 asks. Every figure is a sum over the
// weight map (parameters, parameter FLOPs, weight bytes) or over the layer schedule
// (attention FLOPs, state).
#include "explore/cost_model.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>

namespace wren::explore {

namespace {

bool is_lookup(const TensorInfo& t) { return t.activity == Activity::lookup; }

// Keys one query attends in layer `i` at context n: `avg` for training / prefill (the mean
// over causal positions), otherwise the last position's count (decode).
double keys_attended(const ModelConfig& c, int i, double n, bool average) {
  const MixerSpec& m = c.mixer(i);
  const double full = average ? n / 2 : n;
  switch (m.kind) {
    case MixerKind::attention:
      // Seeds 003/004 count min(n, w) for a window layer in training as well.
      return m.window ? std::min(n, double(m.window)) : full;
    case MixerKind::relu2_attention:
    case MixerKind::mla:
      return full;
    case MixerKind::sparse_reuse:
      return std::min(full, double(m.top_k + m.recent));
    default:
      return 0;
  }
}

// Per-token forward FLOPs of the products with the cache (QK^T and AV) or the recurrence.
double mixer_flops(const ModelConfig& c, int i, double n, Phase phase) {
  const MixerSpec& m = c.mixer(i);
  const bool average = phase != Phase::decode;
  const double keys = keys_attended(c, i, n, average);
  switch (m.kind) {
    case MixerKind::attention:
    case MixerKind::relu2_attention:
    case MixerKind::sparse_reuse:
      // 2 FLOPs per multiply-add, q.k over head_dim and w v over head_dim: 4 dq per key.
      return 2.0 * m.n_heads * (m.head_dim + m.head_dim) * keys;
    case MixerKind::mla:
      if (phase == Phase::decode)  // absorbed: scores over latent + shared key, values in the latent
        return 2.0 * m.n_heads * (2.0 * m.kv_lora_rank + m.qk_rope_dim) * keys;
      return 2.0 * m.n_heads * (m.qk_nope_dim + m.qk_rope_dim + m.v_head_dim) * keys;
    case MixerKind::gdn:
    case MixerKind::gdn2:
      // Per value head: decay d_k d_v, erase read S^T(b k) 2 d_k d_v, rank-1 write 2 d_k d_v,
      // output S^T q 2 d_k d_v: 7 d_k d_v, constant in n.
      return 7.0 * m.value_heads() * m.head_dim * m.value_dim();
    case MixerKind::short_conv:
      // Per channel: the input gate b x~, K conv taps, the output gate c y: 2 + 2K, constant in n.
      return (2.0 + 2.0 * m.conv_kernel) * c.d_model;
    case MixerKind::mamba2: {
      // The conv, 2K per channel of [x~, B, C]; per head, the decay and the rank-1 write 3 P N
      // and the readout S C 2 P N; the skip, gate and norm ~6 per channel of x~.
      const double inner = double(m.n_heads) * m.head_dim, bc = double(m.ssm_groups()) * m.state_dim;
      return 2.0 * m.conv_kernel * (inner + 2 * bc) + 5.0 * inner * m.state_dim + 6.0 * inner;
    }
  }
  return 0;
}

// The non-matrix part of the residual mixes of one layer (matrices are in params).
double mixing_flops(const ModelConfig& c, int i) {
  const double d = c.d_model;
  const ResidualSpec& r = c.residual;
  if (r.kind == ResidualKind::attn_residuals) {
    // Per source: RMSNorm (3d), score w.x (2d), weighted sum (2d); at most 2 + blocks + 1 sources.
    const int block = i / r.block_size;
    const double sources = 2 + block + 1;
    const int mixes = 2 + (c.layers[i].kv.kind == KvSourceKind::bridge ? 1 : 0);
    return mixes * 7.0 * sources * d;
  }
  if (r.kind == ResidualKind::mhc) {
    // Per boundary: the n x n mix and the read / write of the n streams (phi is a matrix).
    const double s = r.streams;
    return 2 * (2.0 * s * s * d + 4.0 * s * d);
  }
  return 0;
}

// A tensor whose rows are touched per token in layers the prefill early exit skips.
bool skipped_in_prefill(const ModelConfig& c, const TensorInfo& t, int exit_layer) {
  if (t.layer < exit_layer) return false;
  if (t.layer < 0) return true;  // LM head, final mixes: only the last prompt token
  if (t.layer == exit_layer || c.layers[t.layer].kv.kind == KvSourceKind::bridge) {
    // The cache owners past the exit still project K/V (and the bridge mix) for every token.
    const std::string& s = t.name;
    for (const char* keep : {".attn.wk", ".attn.wv", ".attn.bk", ".attn.bv", ".attn.k_norm", ".attn.wkv_a",
                             ".attn.kv_a_norm", ".kv_bridge.", ".attn_norm"})
      if (s.find(keep) != std::string::npos) return false;
  }
  return true;
}

double precision_of(const TensorInfo& t, const DecodeKnobs& k) {
  if (t.component == Component::router) return 4.0;  // routers stay f32 (seed 002)
  if (t.role == TensorRole::norm || t.role == TensorRole::vector || t.role == TensorRole::conv ||
      t.role == TensorRole::buffer)
    return 4.0;
  if (t.component == Component::lm_head) return k.head.bytes;
  if (t.component == Component::engram_tables) return k.engram.bytes;
  return k.weights.bytes;
}

}  // namespace

ParamCounts count_params(const ModelConfig& c, const WeightMap& w) {
  ParamCounts p;
  for (const TensorInfo& t : w.tensors) {
    const int64_t n = t.numel();
    p.total[int(t.component)] += n;
    p.total_all += n;
    if (t.component == Component::mixer) p.mixer_total[c.mixer(t.layer).kind] += n;
    if (t.activity == Activity::always) p.active[int(t.component)] += n;
    if (t.activity == Activity::routed) p.active[int(t.component)] += n * t.active_fraction;
    if (is_lookup(t)) p.lookup_values += t.lookup_rows * t.shape.back();
  }
  double active = 0;
  for (double a : p.active) active += a;
  const double embed = double(p.total[int(Component::embedding)]);
  if (c.tie_embeddings) {
    // A tied matrix is multiplied once, as the LM head.
    p.active[int(Component::lm_head)] += embed;
    active += embed;
  }
  const double head = p.active[int(Component::lm_head)];
  p.active_incl_embedding = c.tie_embeddings ? active : active + embed;
  p.active_excl_embedding = active;
  p.active_excl_head = active - head;
  return p;
}

double Flops::total() const {
  double t = params + mixing;
  for (auto& [k, v] : attention) t += v;
  return t;
}

Flops flops_per_token(const ModelConfig& c, const WeightMap& w, double n, Phase phase) {
  Flops f;
  const int exit_layer = c.prefill_exit_layer();
  const double passes = phase == Phase::training ? 3.0 : 1.0;
  for (const TensorInfo& t : w.tensors) {
    if (t.role != TensorRole::matrix) continue;
    if (phase == Phase::prefill && skipped_in_prefill(c, t, exit_layer)) continue;
    double mult = t.activity == Activity::routed ? t.active_fraction : 1.0;
    if (t.activity == Activity::always || t.activity == Activity::routed) f.params += 2.0 * passes * t.numel() * mult;
  }
  if (c.tie_embeddings && phase != Phase::prefill) f.params += 2.0 * passes * double(c.rows()) * c.d_model;
  for (int i = 0; i < c.n_layers(); ++i) {
    if (phase == Phase::prefill && i >= exit_layer) continue;
    f.attention[c.mixer(i).kind] += passes * mixer_flops(c, i, n, phase);
    f.mixing += passes * mixing_flops(c, i);
  }
  return f;
}

double State::stored_total() const {
  double t = 0;
  for (auto& [k, v] : stored) t += v;
  return t;
}
double State::read_total() const {
  double t = 0;
  for (auto& [k, v] : read) t += v;
  return t;
}

State state(const ModelConfig& c, double n, double v_read_fraction) {
  State s;
  for (int i = 0; i < c.n_layers(); ++i) {
    const MixerSpec& m = c.mixer(i);
    s.stored[m.kind] += 0;
    s.read[m.kind] += 0;
    const double keys = keys_attended(c, i, n, false);
    switch (m.kind) {
      case MixerKind::attention:
      case MixerKind::relu2_attention: {
        if (!c.has_cache(i)) {  // reads its owner's cache (cross-layer sharing)
          s.read[m.kind] += 2.0 * m.n_kv_heads * m.head_dim * keys;
          break;
        }
        const double kv = m.n_kv_heads * m.head_dim;
        s.stored[m.kind] += 2.0 * kv * (m.window ? std::min(n, double(m.window)) : n);
        // ReLU^2 attention reads every key to score it, and only the values some head weighs (V-skip).
        const double v_fraction = m.kind == MixerKind::relu2_attention ? v_read_fraction : 1.0;
        s.read[m.kind] += kv * keys * (1.0 + v_fraction);
        break;
      }
      case MixerKind::sparse_reuse: {
        const MixerSpec& src = c.mixer(c.cache_owner(i));
        s.read[m.kind] += 2.0 * src.n_kv_heads * src.head_dim * keys;  // K and V of the selected keys
        break;
      }
      case MixerKind::mla:
        s.stored[m.kind] += double(m.kv_lora_rank + m.qk_rope_dim) * n;
        s.read[m.kind] += double(m.kv_lora_rank + m.qk_rope_dim) * keys;
        break;
      case MixerKind::gdn:
      case MixerKind::gdn2: {
        const double recurrent = double(m.value_heads()) * m.head_dim * m.value_dim();
        const double conv = double(m.conv_kernel - 1) * (2.0 * m.n_heads * m.head_dim + m.value_heads() * m.value_dim());
        s.stored[m.kind] += recurrent + conv;
        s.read[m.kind] += recurrent + conv;
        s.recurrent_stored += recurrent + conv;
        break;
      }
      case MixerKind::short_conv: {
        const double tail = double(m.conv_kernel - 1) * c.d_model;  // the last K-1 gated inputs
        s.stored[m.kind] += tail;
        s.read[m.kind] += tail;
        s.recurrent_stored += tail;
        break;
      }
      case MixerKind::mamba2: {
        // Every head's S [P, N] and the conv's last K-1 inputs [x~, B, C].
        const double inner = double(m.n_heads) * m.head_dim, bc = double(m.ssm_groups()) * m.state_dim;
        const double held = inner * m.state_dim + double(m.conv_kernel - 1) * (inner + 2 * bc);
        s.stored[m.kind] += held;
        s.read[m.kind] += held;
        s.recurrent_stored += held;
        break;
      }
    }
  }
  return s;
}

Precision parse_precision(const std::string& text) {
  std::string base = text;
  int group = 32;
  if (auto colon = text.find(':'); colon != std::string::npos) {
    base = text.substr(0, colon);
    std::string g = text.substr(colon + 1);
    if (g.size() < 2 || g[0] != 'g' || g.find_first_not_of("0123456789", 1) != std::string::npos || g.size() > 6 ||
        std::stoi(g.substr(1)) < 1)
      throw std::invalid_argument("precision \"" + text + "\": expected a group size like :g32 after the type");
    group = std::stoi(g.substr(1));
  }
  if (base == "f32") return {text, 4.0};
  if (base == "bf16" || base == "f16") return {text, 2.0};
  if (base == "int8") return {text, 1.0 + 2.0 / group};
  if (base == "int4") return {text, 0.5 + 2.0 / group};
  throw std::invalid_argument("precision \"" + text + "\": expected f32, bf16, int8[:gN] or int4[:gN]");
}

double DecodeBytes::memory_total() const {
  double t = state;
  for (double b : weights) t += b;
  return t;
}

double DecodeBytes::tokens_per_second(double bandwidth_gbs) const {
  return bandwidth_gbs * 1e9 / memory_total();
}

DecodeBytes decode_bytes(const ModelConfig& c, const WeightMap& w, double n, const DecodeKnobs& k) {
  DecodeBytes b;
  for (const TensorInfo& t : w.tensors) {
    if (t.activity == Activity::never) continue;
    const double bytes = precision_of(t, k);
    double values = double(t.numel());
    if (t.activity == Activity::routed) values *= t.active_fraction;
    if (t.activity == Activity::lookup) values = double(t.lookup_rows) * t.shape.back();
    if (t.neuron_rows) values *= k.firing_fraction;  // dead_neuron_skip: rows of silent neurons unread
    if (t.component == Component::engram_tables && k.engram_from_storage) {
      b.storage += values * bytes;
      continue;
    }
    b.weights[int(t.component)] += values * bytes;
  }
  if (c.tie_embeddings) b.weights[int(Component::lm_head)] += double(c.rows()) * c.d_model * k.head.bytes;
  const State s = state(c, n, k.v_read_fraction);
  const double recurrent_read = s.recurrent_stored;  // recurrent states are read whole, in f32
  b.state = (s.read_total() - recurrent_read) * k.kv.bytes + recurrent_read * 4.0;
  return b;
}

double cache_bytes_per_token(const ModelConfig& c, const Precision& kv) {
  const State a = state(c, 1e6), b = state(c, 1e6 + 1);
  return (b.stored_total() - a.stored_total()) * kv.bytes;
}

}  // namespace wren::explore
