// config/: the one description of a model. Everything else (explorer, engine, trainer)
// reads a ModelConfig; nothing else parses model JSON.
//
// A ModelConfig is plain data, validated once at parse time (config/parse.cpp) and
// immutable afterwards. The JSON form is documented in docs/model-config.md; the
// field names below are the JSON keys.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace wren {

// ---- Sequence mixers -------------------------------------------------------------

enum class MixerKind {
  attention,        // softmax attention with GQA; optional RoPE, QK-norm, sliding window
  relu2_attention,  // Sevren Sparse Attention: w_j = max(q^.k^_j / sqrt(d_h), 0)^2, o = sum w v / (c + sum w)
  sparse_reuse,     // reads another layer's cache: top_k keys by that layer's scores + recent window
  mla,              // multi-head latent attention: cache a normalised latent + a shared key
  gdn,              // Gated DeltaNet: scalar decay and beta per head
  gdn2,             // Gated DeltaNet-2: per-key-channel decay and erase, per-value-channel write
  short_conv,       // gated short convolution (LFM2): y = W_o (c * conv(b * x~)), [b, c, x~] = W x
  mamba2,           // Mamba-2 (SSD): per head S = exp(dt A) S + dt x B^T, y = S C + D x, then a gated RMSNorm
};

// Mixers whose memory is a state carried from token to token (no cache of past keys): every
// token runs them, in order.
inline bool is_recurrent(MixerKind k) {
  return k == MixerKind::gdn || k == MixerKind::gdn2 || k == MixerKind::short_conv || k == MixerKind::mamba2;
}

enum class QkNorm { none, head, full };  // head: gain of width head_dim; full: gain over all heads

struct Rope {
  double theta = 10000.0;
  int rotary_dim = 0;  // 0: the whole head (or MLA's rope part)
  // Llama-3 style frequency scaling; factor 0 means none.
  double llama3_factor = 0.0, llama3_low_freq = 1.0, llama3_high_freq = 4.0;
  int llama3_original_context = 8192;
  // Linear position interpolation (Gemma 3 global layers): angles use position / linear_factor.
  double linear_factor = 1.0;
  // YaRN (DeepSeek, gpt-oss); factor 0 means none. With m(s, k) = 0.1 k ln s + 1: frequencies
  // blend interpolation and extrapolation between the beta_fast and beta_slow rotation counts
  // (ramp ends rounded to whole dimensions unless !yarn_truncate), cos and sin are scaled by
  // m(f, yarn_mscale) / m(f, yarn_mscale_all_dim), and the softmax scale by m(f, yarn_mscale_all_dim)^2.
  double yarn_factor = 0.0, yarn_beta_fast = 32.0, yarn_beta_slow = 1.0;
  double yarn_mscale = 1.0, yarn_mscale_all_dim = 0.0;
  int yarn_original_context = 4096;
  bool yarn_truncate = true;
  // LongRoPE (Phi-3, Phi-4-mini), as transformers' _compute_longrope_parameters: frequency i is
  // divided by short[i] at positions below longrope_original_context and by long[i] from there
  // on (HF picks the factors by the sequence length max(position) + 1, so a cached decode
  // switches at that position), and cos and sin are scaled by longrope_attention, by default
  // sqrt(1 + ln s / ln original) with s = context / original. Empty lists mean none.
  std::vector<double> longrope_short, longrope_long;
  int longrope_original_context = 0;
  double longrope_attention = 1.0;
};

struct MixerSpec {
  MixerKind kind = MixerKind::attention;
  int n_heads = 0;     // query heads (GDN: query/key heads)
  int n_kv_heads = 0;  // attention / relu2: KV heads; sparse_reuse: taken from the source layer
  int head_dim = 0;    // query/key width per head (GDN: d_k)
  int window = 0;      // attention: sliding window in tokens (current one included); 0 = full
  std::optional<Rope> rope;
  QkNorm qk_norm = QkNorm::none;
  bool qkv_bias = false, o_bias = false;
  bool sinks = false;        // per-head learned sink logit (gpt-oss)
  bool output_gate = false;  // o *= sigmoid(W_g x) before W_o (gated attention, MLA, GDN)
  double softcap = 0.0;      // attention: logits become c tanh(logit / c) (Gemma 2); 0 = none
  double scale = 0.0;        // attention: softmax scale of q.k; 0 = 1 / sqrt(head_dim)
  double relu2_c = 1.0;      // relu2_attention: the constant c in c + sum_j w_j
  int top_k = 1024;          // sparse_reuse: keys chosen by the source layer's scores
  int recent = 128;          // sparse_reuse: most recent positions always selected
  // MLA
  int q_lora_rank = 0;   // 0: queries projected directly from x
  int kv_lora_rank = 0;  // cached latent width (normalised)
  int qk_nope_dim = 0;   // per-head key/query width from the latent
  int qk_rope_dim = 0;   // shared key width (cached beside the latent); rotated only if rope
  int v_head_dim = 0;    // MLA / GDN value width per head (0: head_dim)
  // Gated DeltaNet
  int n_v_heads = 0;     // value heads (0: n_heads); q/k heads are repeated to match
  int conv_kernel = 4;   // GDN: causal depthwise conv over q, k, v; short_conv: its conv (current + kernel-1 previous)
  int gate_rank = 0;     // gdn2: rank of the decay / erase / write gate projections (0: full)
  int out_gate_rank = 0; // gdn/gdn2: rank of the output gate projection (0: full)
  // Mamba-2: n_heads heads of head_dim channels; n_kv_heads groups (0: 1) share B and C
  int state_dim = 0;      // N: the width of B and C, and of each head's state per channel
  bool conv_bias = false; // the conv over [x, B, C] adds a bias per channel

  int value_dim() const { return v_head_dim ? v_head_dim : head_dim; }
  int value_heads() const { return n_v_heads ? n_v_heads : n_heads; }
  int ssm_groups() const { return n_kv_heads ? n_kv_heads : 1; }  // mamba2
};

// Where a layer's keys and values come from.
enum class KvSourceKind {
  own,     // projected from the layer's own attention input
  bridge,  // projected from a separate mix over the residual sources that exist at layer `layer`'s attention
  reuse,   // no K/V of its own: reads layer `layer`'s cache (and, for sparse_reuse, its scores)
};
struct KvSource {
  KvSourceKind kind = KvSourceKind::own;
  int layer = -1;
};

// ---- Feed-forward ----------------------------------------------------------------

enum class Activation { swiglu, geglu, relu2, swiglu_oai };  // swiglu_oai: gpt-oss clamped variant
enum class FfnKind { dense, moe };
enum class RouterScore { softmax, sigmoid };
// How the chosen experts' weights are formed from their scores.
enum class GateNorm {
  none,         // the chosen scores as they are
  normalize,    // chosen scores divided by their sum
  softmax_topk  // softmax over the chosen logits
};

struct FfnSpec {
  FfnKind kind = FfnKind::dense;
  Activation activation = Activation::swiglu;
  int hidden = 0;   // dense width
  bool bias = false;
  // MoE
  int n_experts = 0, top_k = 0, expert_hidden = 0;
  int n_shared = 0, shared_hidden = 0;  // shared experts, each of width shared_hidden
  bool shared_gate = false;             // sigmoid(w . x) scales the shared output (Qwen)
  int latent_dim = 0;                   // latent MoE: experts run at this width (0: none)
  RouterScore score = RouterScore::softmax;
  GateNorm gates = GateNorm::none;
  bool balance_bias = false;  // per-expert bias added for selection only (a buffer, not trained)
  bool router_bias = false;   // learned router bias (gpt-oss)
  double routed_scale = 1.0;
  int n_groups = 1, topk_groups = 1;  // group-limited routing (DeepSeek); selection only

  bool gated() const { return activation != Activation::relu2; }
  int matrices() const { return gated() ? 3 : 2; }
};

// ---- Residual stream -------------------------------------------------------------

enum class ResidualKind {
  plain,           // x += f(norm(x))
  attn_residuals,  // block attention residuals (Kimi): softmax mix over e, g, block sums, partial sum
  mhc,             // manifold-constrained hyper-connections: n streams, Sinkhorn mixing
};
enum class StreamReadout { gate, sum };

struct ResidualSpec {
  ResidualKind kind = ResidualKind::plain;
  int block_size = 4;     // attn_residuals: layers per block
  int streams = 4;        // mhc
  int sinkhorn_iters = 20;
  StreamReadout readout = StreamReadout::gate;
};

// Where a sublayer's RMSNorms sit: pre, x + f(norm(x)) (Llama); sandwich, x + norm(f(norm(x)))
// (Gemma 2 / 3); post, x + norm(f(x)) (OLMo 2: the sublayer reads the residual as it is).
enum class NormPlacement { pre, sandwich, post };
struct NormSpec {
  double eps = 1e-6;
  NormPlacement placement = NormPlacement::pre;
  bool unit_offset = false;  // gain applied as (1 + w) (Gemma)
};

// ---- Engram ------------------------------------------------------------------------

enum class EngramPlacement {
  residual_source,  // Embla: g is one more source of the attention residuals, never added
  gated_add,        // Nenya: per-stream gated value, short conv, added before the listed layers
};

struct EngramSpec {
  std::vector<int> orders{2, 3};  // n-gram orders
  int heads_per_order = 8;        // hash heads (tables) per order
  int64_t rows = 0;               // rows per table: table j has the j-th prime >= rows
  int row_dim = 0;                // values per row; orders.size() * heads * row_dim = engram width
  EngramPlacement placement = EngramPlacement::residual_source;
  std::vector<int> layers;        // gated_add: added before these layers, each with its own tables
  int conv_kernel = 4;            // gated_add: short causal depthwise conv
  uint64_t seed = 0;              // hash multipliers
  int tables() const { return int(orders.size()) * heads_per_order; }
  int width() const { return tables() * row_dim; }
};

// ---- The model ------------------------------------------------------------------------

struct LayerSpec {
  std::string mixer;  // key into ModelConfig::mixers
  std::string ffn;    // key into ModelConfig::ffns
  KvSource kv;
};

struct NamedMixer { std::string name; MixerSpec spec; };
struct NamedFfn { std::string name; FfnSpec spec; };

// What a file may ask for (docs/model-config.md, "Limits"), checked while reading, before any
// of it sizes an allocation: far above every published model (126 layers, 10M tokens of
// context, 262k vocabulary, 2^24-wide rows), far below what would exhaust memory by itself.
inline constexpr int kMaxLayers = 1024;
inline constexpr int64_t kMaxContext = int64_t(1) << 24;
inline constexpr int64_t kMaxWidth = int64_t(1) << 24;  // d_model, vocab rows, every product of widths

struct ModelConfig {
  std::string name;
  int d_model = 0;
  int vocab_size = 0;
  int vocab_pad = 0;  // extra embedding / head rows beyond the tokenizer's vocabulary
  bool tie_embeddings = false;
  int context_length = 0;
  double embedding_scale = 1.0;  // e *= scale (Gemma: sqrt(d))
  double logit_softcap = 0.0;    // 0: none
  // Granite's multipliers: each sublayer's output is scaled before it joins the residual,
  // x + residual_scale f(x), and the logits are divided, z / logit_divisor (before any soft-cap).
  double residual_scale = 1.0;
  double logit_divisor = 1.0;
  NormSpec norm;
  ResidualSpec residual;
  std::optional<EngramSpec> engram;
  std::vector<NamedMixer> mixers;
  std::vector<NamedFfn> ffns;
  std::vector<LayerSpec> layers;

  int n_layers() const { return int(layers.size()); }
  int rows() const { return vocab_size + vocab_pad; }
  const MixerSpec& mixer(int layer) const;
  const FfnSpec& ffn(int layer) const;
  const MixerSpec* find_mixer(const std::string& name) const;
  const FfnSpec* find_ffn(const std::string& name) const;
  // The layer whose cache `layer` reads (itself when it keeps its own).
  int cache_owner(int layer) const;
  bool has_cache(int layer) const;  // keeps K/V (or a latent, or a recurrent state) of its own
  // Appends its own entry to that cache from its own input (not a bridge's, not a reuse).
  bool fills_own_cache(int layer) const;
  // Early exit (NOTES.md 1): the first layer E such that every cache of layers >= E is a
  // function of layers < E. Prefill runs layers < E on every prompt token, fills the caches
  // of layers >= E from their K/V inputs, and runs layers >= E for the last token only.
  int prefill_exit_layer() const;
};

// Number of rows of each engram table, in table order (order-major, then head):
// distinct primes searched upward from spec.rows, as DeepSeek's Engram does.
std::vector<int64_t> engram_table_rows(const EngramSpec& spec);

const char* to_string(MixerKind);
const char* to_string(Activation);

}  // namespace wren
