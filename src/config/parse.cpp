// Reading and writing the model description. The JSON keys are the field names of
// model_config.h; enum values are written as the strings in the tables below (same order
// as the enums), so reading and writing share one list per enum.
#include "config/parse.h"

#include <algorithm>
#include <filesystem>
#include <string_view>
#include <utility>

namespace wren {

const std::vector<std::pair<std::string_view, std::string_view>>& embedded_presets();  // generated

namespace {

const std::vector<std::string> kMixerKinds = {"attention", "relu2_attention", "sparse_reuse", "mla", "gdn", "gdn2", "short_conv", "mamba2"};
const std::vector<std::string> kQkNorms = {"none", "head", "full"};
const std::vector<std::string> kActivations = {"swiglu", "geglu", "relu2", "swiglu_oai"};
const std::vector<std::string> kFfnKinds = {"dense", "moe"};
const std::vector<std::string> kScores = {"softmax", "sigmoid"};
const std::vector<std::string> kGateNorms = {"none", "normalize", "softmax_topk"};
const std::vector<std::string> kResiduals = {"plain", "attn_residuals", "mhc"};
const std::vector<std::string> kReadouts = {"gate", "sum"};
const std::vector<std::string> kPlacements = {"pre", "sandwich", "post"};
const std::vector<std::string> kEngramPlacements = {"residual_source", "gated_add"};
const std::vector<std::string> kKvSources = {"own", "bridge", "reuse"};

template <class E>
E pick(JsonReader& r, const std::string& key, const std::vector<std::string>& names, E fallback) {
  return E(r.choice_or(key, names, int(fallback)));
}

Rope parse_rope(JsonReader r) {
  Rope rope;
  rope.theta = r.number_or("theta", rope.theta, 1.0, 1e12);
  rope.rotary_dim = r.integer_or("rotary_dim", 0, 0);
  rope.llama3_factor = r.number_or("llama3_factor", 0.0, 0.0, 1e6);
  rope.llama3_low_freq = r.number_or("llama3_low_freq", 1.0, 0.0, 1e6);
  rope.llama3_high_freq = r.number_or("llama3_high_freq", 4.0, 0.0, 1e6);
  rope.llama3_original_context = r.integer_or("llama3_original_context", 8192, 1);
  rope.linear_factor = r.number_or("linear_factor", 1.0, 1e-6, 1e6);
  rope.yarn_factor = r.number_or("yarn_factor", 0.0, 0.0, 1e6);
  rope.yarn_beta_fast = r.number_or("yarn_beta_fast", 32.0, 0.0, 1e6);
  rope.yarn_beta_slow = r.number_or("yarn_beta_slow", 1.0, 0.0, 1e6);
  rope.yarn_mscale = r.number_or("yarn_mscale", 1.0, 0.0, 1e6);
  rope.yarn_mscale_all_dim = r.number_or("yarn_mscale_all_dim", 0.0, 0.0, 1e6);
  rope.yarn_original_context = r.integer_or("yarn_original_context", 4096, 1);
  rope.yarn_truncate = r.boolean_or("yarn_truncate", true);
  if (r.has("longrope_short")) rope.longrope_short = r.number_list("longrope_short", 1e-6, 1e6);
  if (r.has("longrope_long")) rope.longrope_long = r.number_list("longrope_long", 1e-6, 1e6);
  rope.longrope_original_context = r.integer_or("longrope_original_context", 0, 0);
  rope.longrope_attention = r.number_or("longrope_attention", 1.0, 1e-6, 1e6);
  r.finish();
  return rope;
}

MixerSpec parse_mixer(JsonReader r) {
  MixerSpec m;
  m.kind = MixerKind(r.choice("kind", kMixerKinds));
  const bool conv = m.kind == MixerKind::short_conv;  // its width is d_model's: no heads
  m.n_heads = conv ? r.integer_or("n_heads", 0, 0) : r.integer("n_heads", 1);
  bool attention_like = m.kind == MixerKind::attention || m.kind == MixerKind::relu2_attention;
  m.n_kv_heads = attention_like ? r.integer("n_kv_heads", 1) : r.integer_or("n_kv_heads", 0, 0);
  m.head_dim = m.kind == MixerKind::mla || conv ? r.integer_or("head_dim", 0, 0) : r.integer("head_dim", 1);
  m.window = r.integer_or("window", 0, 0);
  if (r.has("rope")) m.rope = parse_rope(r.object("rope"));
  // ReLU^2 and sparse layers score RMS-normalised queries and keys (NOTES.md 1).
  const bool normalised = m.kind == MixerKind::relu2_attention || m.kind == MixerKind::sparse_reuse;
  m.qk_norm = pick(r, "qk_norm", kQkNorms, normalised ? QkNorm::head : QkNorm::none);
  if (normalised && m.qk_norm == QkNorm::none) r.fail("qk_norm", "relu2_attention and sparse_reuse score normalised q and k");
  m.qkv_bias = r.boolean_or("qkv_bias", false);
  m.o_bias = r.boolean_or("o_bias", false);
  m.sinks = r.boolean_or("sinks", false);
  m.output_gate = r.boolean_or("output_gate", false);
  m.softcap = r.number_or("softcap", 0.0, 0.0, 1e9);
  m.scale = r.number_or("scale", 0.0, 0.0, 1e9);
  m.relu2_c = r.number_or("relu2_c", 1.0, 1e-9, 1e9);  // c > 0 keeps o finite when no key fires
  m.top_k = r.integer_or("top_k", 1024, 1);
  m.recent = r.integer_or("recent", 128, 0);
  m.q_lora_rank = r.integer_or("q_lora_rank", 0, 0);
  m.kv_lora_rank = m.kind == MixerKind::mla ? r.integer("kv_lora_rank", 1) : r.integer_or("kv_lora_rank", 0, 0);
  m.qk_nope_dim = r.integer_or("qk_nope_dim", 0, 0);
  m.qk_rope_dim = r.integer_or("qk_rope_dim", 0, 0);
  m.v_head_dim = r.integer_or("v_head_dim", 0, 0);
  m.n_v_heads = r.integer_or("n_v_heads", 0, 0);
  m.conv_kernel = r.integer_or("conv_kernel", 4, 1, 64);
  m.gate_rank = r.integer_or("gate_rank", 0, 0);
  m.out_gate_rank = r.integer_or("out_gate_rank", 0, 0);
  m.state_dim = m.kind == MixerKind::mamba2 ? r.integer("state_dim", 1) : r.integer_or("state_dim", 0, 0);
  m.conv_bias = r.boolean_or("conv_bias", false);
  r.finish();
  return m;
}

FfnSpec parse_ffn(JsonReader r) {
  FfnSpec f;
  f.kind = FfnKind(r.choice("kind", kFfnKinds));
  f.activation = Activation(r.choice("activation", kActivations));
  f.bias = r.boolean_or("bias", false);
  if (f.kind == FfnKind::dense) {
    f.hidden = r.integer("hidden", 1);
  } else {
    f.n_experts = r.integer("n_experts", 1);
    f.top_k = r.integer("top_k", 1, f.n_experts);
    f.expert_hidden = r.integer("expert_hidden", 1);
    f.n_shared = r.integer_or("n_shared", 0, 0);
    f.shared_hidden = f.n_shared ? r.integer("shared_hidden", 1) : r.integer_or("shared_hidden", 0, 0);
    f.shared_gate = r.boolean_or("shared_gate", false);
    f.latent_dim = r.integer_or("latent_dim", 0, 0);
    f.score = pick(r, "score", kScores, RouterScore::softmax);
    f.gates = pick(r, "gates", kGateNorms, GateNorm::none);
    f.balance_bias = r.boolean_or("balance_bias", false);
    f.router_bias = r.boolean_or("router_bias", false);
    f.routed_scale = r.number_or("routed_scale", 1.0, 0.0, 1e6);
    f.n_groups = r.integer_or("n_groups", 1, 1);
    f.topk_groups = r.integer_or("topk_groups", 1, 1, f.n_groups);
    if (f.n_experts % f.n_groups) r.fail("n_groups", "n_experts " + std::to_string(f.n_experts) + " is not divisible by n_groups " + std::to_string(f.n_groups));
  }
  r.finish();
  return f;
}

EngramSpec parse_engram(JsonReader r) {
  EngramSpec e;
  e.orders = r.int_list("orders", 1);
  if (e.orders.empty()) r.fail("orders", "expected at least one n-gram order");
  e.heads_per_order = r.integer("heads_per_order", 1);
  e.rows = r.integer64("rows", 2);
  if (e.rows > (int64_t(1) << 32)) r.fail("rows", "value " + std::to_string(e.rows) + " must be <= 2^32");
  e.row_dim = r.integer("row_dim", 1);
  e.placement = pick(r, "placement", kEngramPlacements, EngramPlacement::residual_source);
  if (r.has("layers")) e.layers = r.int_list("layers", 0);
  e.conv_kernel = r.integer_or("conv_kernel", 4, 1, 64);
  if (r.has("seed")) e.seed = uint64_t(r.integer64("seed", 0));
  r.finish();
  return e;
}

// One entry of "layers": {"mixer", "ffn", "kv"?, "repeat"?}; kv is "own", {"bridge": L} or {"reuse": L}.
void parse_layers(JsonReader& top, ModelConfig& c) {
  const Json& list = top.raw("layers");
  if (!list.is_array() || list.empty()) top.fail("layers", "expected a non-empty list of layers");
  for (size_t i = 0; i < list.size(); ++i) {
    JsonReader r = top.element("layers", i);
    LayerSpec l;
    l.mixer = r.string("mixer");
    l.ffn = r.string("ffn");
    if (!c.find_mixer(l.mixer)) r.fail("mixer", "no mixer named \"" + l.mixer + "\" in \"mixers\"");
    if (!c.find_ffn(l.ffn)) r.fail("ffn", "no ffn named \"" + l.ffn + "\" in \"ffns\"");
    if (r.has("kv")) {
      const Json& kv = r.raw("kv");
      if (kv.is_string() && kv == "own") {
      } else if (kv.is_object() && kv.size() == 1 && (kv.contains("bridge") || kv.contains("reuse"))) {
        JsonReader k = r.object("kv");
        bool bridge = kv.contains("bridge");
        l.kv.kind = bridge ? KvSourceKind::bridge : KvSourceKind::reuse;
        l.kv.layer = k.integer(bridge ? "bridge" : "reuse", 0);
      } else {
        r.fail("kv", "expected \"own\", {\"bridge\": layer} or {\"reuse\": layer}, got " + json_value_text(kv));
      }
    }
    const int repeat = r.integer_or("repeat", 1, 1, kMaxLayers);
    r.finish();
    if (c.layers.size() + size_t(repeat) > size_t(kMaxLayers))
      r.fail("repeat", "the schedule would have more than " + std::to_string(kMaxLayers) + " layers");
    for (int k = 0; k < repeat; ++k) c.layers.push_back(l);
  }
}

}  // namespace

ModelConfig parse_model_config(const Json& j, const std::string& origin) {
  JsonReader r(j, origin, "");
  ModelConfig c;
  c.name = r.string_or("name", "");
  c.d_model = r.integer("d_model", 1);
  c.vocab_size = r.integer("vocab_size", 1);
  c.vocab_pad = r.integer_or("vocab_pad", 0, 0);
  c.tie_embeddings = r.boolean_or("tie_embeddings", false);
  c.context_length = r.integer("context_length", 1, kMaxContext);
  c.embedding_scale = r.number_or("embedding_scale", 1.0, 0.0, 1e6);
  c.logit_softcap = r.number_or("logit_softcap", 0.0, 0.0, 1e6);
  c.residual_scale = r.number_or("residual_scale", 1.0, 1e-6, 1e6);
  c.logit_divisor = r.number_or("logit_divisor", 1.0, 1e-6, 1e6);
  if (r.has("norm")) {
    JsonReader n = r.object("norm");
    c.norm.eps = n.number_or("eps", 1e-6, 1e-12, 1.0);  // eps > 0: the norm of a zero vector stays finite
    c.norm.placement = pick(n, "placement", kPlacements, NormPlacement::pre);
    c.norm.unit_offset = n.boolean_or("unit_offset", false);
    n.finish();
  }
  if (r.has("residual")) {
    JsonReader n = r.object("residual");
    c.residual.kind = ResidualKind(n.choice("kind", kResiduals));
    c.residual.block_size = n.integer_or("block_size", 4, 1);
    c.residual.streams = n.integer_or("streams", 4, 1, 64);
    c.residual.sinkhorn_iters = n.integer_or("sinkhorn_iters", 20, 1, 1000);
    c.residual.readout = pick(n, "readout", kReadouts, StreamReadout::gate);
    n.finish();
  }
  if (r.has("engram")) c.engram = parse_engram(r.object("engram"));

  JsonReader mixers = r.object("mixers");
  for (auto it = mixers.json().begin(); it != mixers.json().end(); ++it)
    c.mixers.push_back({it.key(), parse_mixer(mixers.object(it.key()))});
  JsonReader ffns = r.object("ffns");
  for (auto it = ffns.json().begin(); it != ffns.json().end(); ++it)
    c.ffns.push_back({it.key(), parse_ffn(ffns.object(it.key()))});
  parse_layers(r, c);
  r.finish();
  validate_model_config(c, origin);
  return c;
}

namespace {

std::string num(long long x) { return std::to_string(x); }

// The checks of validate_model_config, each naming the field it refuses after the config's
// origin.
struct ConfigChecks {
  const ModelConfig& c;
  const std::string& origin;

  [[noreturn]] void fail(const std::string& where, const std::string& msg) const {
    throw ConfigError(origin + ": " + where + ": " + msg);
  }
  // The engine indexes with int: every width, and every product of widths it allocates, stays
  // below 2^24 values (a 16M-wide row), far from overflow.
  void bounded(const std::string& where, int64_t value) const {
    if (value > kMaxWidth) fail(where, "size " + num(value) + " exceeds 2^24 values");
  }
  void widths() const;
  void rope(const std::string& w, const MixerSpec& m) const;
  void mixer(const std::string& w, const MixerSpec& m) const;
  void layer(int i) const;
  void engram(const EngramSpec& e) const;
};

void ConfigChecks::widths() const {
  bounded("d_model", c.d_model);
  bounded("vocab_size", int64_t(c.vocab_size) + c.vocab_pad);
  bounded("residual.streams", int64_t(c.residual.streams) * c.d_model);
  if (c.engram) bounded("engram.row_dim", int64_t(c.engram->tables()) * c.engram->row_dim);
  for (auto& [name, m] : c.mixers) {
    const std::string w = "mixers." + name;
    const int64_t widest = std::max({int64_t(m.head_dim), int64_t(m.value_dim()), int64_t(m.qk_nope_dim) + m.qk_rope_dim});
    bounded(w + ".n_heads", int64_t(std::max(m.n_heads, m.value_heads())) * widest);
    bounded(w + ".n_kv_heads", int64_t(m.n_kv_heads) * m.head_dim);
    bounded(w + ".kv_lora_rank", int64_t(m.kv_lora_rank) + m.qk_rope_dim);
  }
  for (auto& [name, f] : c.ffns) {
    const std::string w = "ffns." + name;
    bounded(w + ".hidden", f.hidden);
    bounded(w + ".expert_hidden", int64_t(f.n_experts) * f.expert_hidden);
    bounded(w + ".shared_hidden", int64_t(f.n_shared) * f.shared_hidden);
  }
}

// The rotary span fits the head, LongRoPE's factors one per rotated pair, and only mixers
// that encode positions rotate.
void ConfigChecks::rope(const std::string& w, const MixerSpec& m) const {
  int span = m.kind == MixerKind::mla ? m.qk_rope_dim : m.head_dim;
  int rd = m.rope->rotary_dim ? m.rope->rotary_dim : span;
  if (rd > span || rd % 2)
    fail(w + ".rope.rotary_dim", "value " + num(rd) + " must be even and <= " + num(span));
  const Rope& p = *m.rope;
  if (!p.longrope_short.empty() || !p.longrope_long.empty() || p.longrope_original_context) {
    if (p.longrope_short.size() != size_t(rd / 2) || p.longrope_long.size() != size_t(rd / 2))
      fail(w + ".rope.longrope_short", "LongRoPE needs " + num(rd / 2) + " short and " + num(rd / 2) +
                                           " long factors (one per rotated pair), got " + num(int64_t(p.longrope_short.size())) +
                                           " and " + num(int64_t(p.longrope_long.size())));
    if (p.longrope_original_context <= 0)
      fail(w + ".rope.longrope_original_context", "LongRoPE needs the original context (> 0)");
    if (m.kind == MixerKind::mla) fail(w + ".rope.longrope_short", "LongRoPE is not defined for MLA's rope part");
    if (p.llama3_factor || p.yarn_factor || p.linear_factor != 1.0)
      fail(w + ".rope.longrope_short", "LongRoPE does not combine with Llama-3, YaRN or linear scaling");
  }
  if (m.kind == MixerKind::relu2_attention || m.kind == MixerKind::sparse_reuse || is_recurrent(m.kind))
    fail(w + ".rope", std::string(to_string(m.kind)) + " encodes no position; remove \"rope\"");
}

// Heads that divide into their groups, and fields only the kinds that have them take.
void ConfigChecks::mixer(const std::string& w, const MixerSpec& m) const {
  bool attention_like = m.kind == MixerKind::attention || m.kind == MixerKind::relu2_attention;
  if (attention_like && m.n_heads % m.n_kv_heads)
    fail(w + ".n_kv_heads", "n_heads " + num(m.n_heads) + " is not divisible by n_kv_heads " + num(m.n_kv_heads));
  if (m.rope) rope(w, m);
  if (m.kind == MixerKind::mla) {
    if (m.qk_nope_dim + m.qk_rope_dim <= 0) fail(w + ".qk_nope_dim", "MLA needs qk_nope_dim + qk_rope_dim > 0");
    if (m.v_head_dim <= 0) fail(w + ".v_head_dim", "MLA needs v_head_dim > 0");
  }
  if (m.kind == MixerKind::mamba2 && m.n_heads % m.ssm_groups())
    fail(w + ".n_kv_heads", "Mamba-2's " + num(m.n_heads) + " heads do not divide into " + num(m.ssm_groups()) + " B/C groups");
  // Value heads of their own width or count exist only where the weights have them (weight
  // map): attention's values are head_dim wide, one per key head.
  const bool gated_deltanet = m.kind == MixerKind::gdn || m.kind == MixerKind::gdn2;
  if (m.v_head_dim && !gated_deltanet && m.kind != MixerKind::mla)
    fail(w + ".v_head_dim", std::string(to_string(m.kind)) + " has no value width of its own (only mla, gdn and gdn2); remove it");
  if (m.n_v_heads && !gated_deltanet)
    fail(w + ".n_v_heads", std::string(to_string(m.kind)) + " has no value heads of its own (only gdn and gdn2); remove it");
  if (gated_deltanet && m.value_heads() % m.n_heads)
    fail(w + ".n_v_heads", "n_v_heads " + num(m.value_heads()) + " is not divisible by n_heads " + num(m.n_heads));
  if (m.window && m.kind != MixerKind::attention)
    fail(w + ".window", "only softmax attention takes a sliding window");
}

// Layer i's K / V source: an earlier layer, a full-attention cache of the same head shape to
// reuse, or a bridge where the residual has a stream to carry it.
void ConfigChecks::layer(int i) const {
  const LayerSpec& l = c.layers[i];
  const MixerSpec& m = c.mixer(i);
  std::string w = "layers[" + num(i) + "]";
  if (l.kv.kind != KvSourceKind::own && (l.kv.layer < 0 || l.kv.layer >= i))
    fail(w + ".kv", "layer " + num(l.kv.layer) + " is not an earlier layer (a K/V source must come before layer " + num(i) + ")");
  if (m.kind == MixerKind::sparse_reuse && l.kv.kind != KvSourceKind::reuse)
    fail(w + ".kv", "a sparse_reuse layer needs {\"reuse\": L} naming the full layer whose cache it reads");
  if (l.kv.kind == KvSourceKind::reuse) {
    const LayerSpec& src = c.layers[l.kv.layer];
    const MixerSpec& s = c.mixer(l.kv.layer);
    bool full = (s.kind == MixerKind::attention && s.window == 0) || s.kind == MixerKind::relu2_attention;
    if (src.kv.kind == KvSourceKind::reuse || !full)
      fail(w + ".kv", "layer " + num(l.kv.layer) + " (" + src.mixer + ") keeps no full-attention cache of its own to reuse");
    if (m.kind == MixerKind::mla || is_recurrent(m.kind))
      fail(w + ".kv", std::string(to_string(m.kind)) + " cannot reuse another layer's cache");
    int kv_heads = m.kind == MixerKind::sparse_reuse ? s.n_kv_heads : m.n_kv_heads;
    if (m.head_dim != s.head_dim || m.n_heads % kv_heads || (m.kind != MixerKind::sparse_reuse && m.n_kv_heads != s.n_kv_heads))
      fail(w + ".kv", "head shape (" + num(m.n_heads) + " heads of " + num(m.head_dim) + ") does not fit layer " +
                          num(l.kv.layer) + "'s cache (" + num(s.n_kv_heads) + " KV heads of " + num(s.head_dim) + ")");
  }
  if (l.kv.kind == KvSourceKind::bridge) {
    if (m.kind == MixerKind::sparse_reuse || is_recurrent(m.kind))
      fail(w + ".kv", std::string(to_string(m.kind)) + " cannot take bridged K/V");
    if (c.residual.kind == ResidualKind::mhc)
      fail(w + ".kv", "a KV bridge needs plain or attn_residuals residuals");
  }
  if (c.ffn(i).kind == FfnKind::moe && c.ffn(i).latent_dim == 0 && c.ffn(i).expert_hidden <= 0)
    fail(w + ".ffn", "MoE needs expert_hidden > 0");
}

// A residual source replaces the residual stream (attn_residuals), a gated add joins it at
// the layers it names.
void ConfigChecks::engram(const EngramSpec& e) const {
  if (e.placement == EngramPlacement::residual_source) {
    if (c.residual.kind != ResidualKind::attn_residuals)
      fail("engram.placement", "residual_source needs \"residual\": {\"kind\": \"attn_residuals\"}");
    if (e.width() != c.d_model)
      fail("engram.row_dim", "orders x heads x row_dim = " + num(e.width()) + " must equal d_model " + num(c.d_model) + " for a residual source");
    if (!e.layers.empty()) fail("engram.layers", "residual_source engram is read by every layer from 1 on; remove \"layers\"");
  } else {
    if (c.residual.kind == ResidualKind::attn_residuals)
      fail("engram.placement", "gated_add adds into the residual stream; attn_residuals has none (use residual_source)");
    if (e.layers.empty()) fail("engram.layers", "gated_add needs the layers it is added before");
    for (int x : e.layers)
      if (x >= c.n_layers()) fail("engram.layers", "layer " + num(x) + " is out of range (the model has " + num(c.n_layers()) + " layers)");
  }
}

}  // namespace

// The checks that need the whole model: shapes that must divide, and a schedule that can run.
void validate_model_config(const ModelConfig& c, const std::string& origin) {
  const ConfigChecks check{c, origin};
  check.widths();
  for (auto& [name, m] : c.mixers) check.mixer("mixers." + name, m);
  for (auto& [name, f] : c.ffns)
    if (f.kind == FfnKind::moe && f.latent_dim && f.activation == Activation::swiglu_oai)
      check.fail("ffns." + name + ".latent_dim", "latent experts with swiglu_oai are not supported");
  const int L = c.n_layers();
  if (L > kMaxLayers) check.fail("layers", num(L) + " layers, more than the limit of " + num(kMaxLayers));
  if (c.context_length > kMaxContext)
    check.fail("context_length", "value " + num(c.context_length) + " must be <= " + num(kMaxContext));
  for (int i = 0; i < L; ++i) check.layer(i);
  if (c.residual.kind == ResidualKind::attn_residuals && L % c.residual.block_size)
    check.fail("residual.block_size", "the " + num(L) + " layers do not split into blocks of " + num(c.residual.block_size));
  if (c.engram) check.engram(*c.engram);
}

std::vector<std::string> preset_names() {
  std::vector<std::string> names;
  for (auto& [name, text] : embedded_presets()) names.emplace_back(name);
  return names;
}

ModelConfig load_preset(const std::string& name) {
  for (auto& [n, text] : embedded_presets())
    if (n == name) {
      return parse_model_config(parse_json(text, "preset " + name, kConfigJsonLimits), "preset " + name);
    }
  std::string list;
  for (auto& n : preset_names()) list += (list.empty() ? "" : ", ") + n;
  throw ConfigError("unknown preset \"" + name + "\"; presets: " + list);
}

ModelConfig resolve_model_config(const std::string& name_or_path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (fs::is_directory(name_or_path, ec)) {
    std::string p = (fs::path(name_or_path) / "config.json").string();
    return parse_model_config(parse_json_file(p, kConfigJsonLimits), p);
  }
  if (fs::exists(name_or_path, ec)) return parse_model_config(parse_json_file(name_or_path, kConfigJsonLimits), name_or_path);
  return load_preset(name_or_path);
}

}  // namespace wren

namespace wren {

Json to_json(const ModelConfig& c) {
  Json j;
  j["name"] = c.name;
  j["d_model"] = c.d_model;
  j["vocab_size"] = c.vocab_size;
  j["vocab_pad"] = c.vocab_pad;
  j["tie_embeddings"] = c.tie_embeddings;
  j["context_length"] = c.context_length;
  j["embedding_scale"] = c.embedding_scale;
  j["logit_softcap"] = c.logit_softcap;
  j["residual_scale"] = c.residual_scale;
  j["logit_divisor"] = c.logit_divisor;
  j["norm"] = {{"eps", c.norm.eps}, {"placement", kPlacements[int(c.norm.placement)]}, {"unit_offset", c.norm.unit_offset}};
  j["residual"] = {{"kind", kResiduals[int(c.residual.kind)]}, {"block_size", c.residual.block_size},
                   {"streams", c.residual.streams}, {"sinkhorn_iters", c.residual.sinkhorn_iters},
                   {"readout", kReadouts[int(c.residual.readout)]}};
  if (c.engram) {
    const EngramSpec& e = *c.engram;
    j["engram"] = {{"orders", e.orders}, {"heads_per_order", e.heads_per_order}, {"rows", e.rows},
                   {"row_dim", e.row_dim}, {"placement", kEngramPlacements[int(e.placement)]},
                   {"layers", e.layers}, {"conv_kernel", e.conv_kernel}, {"seed", e.seed}};
  }
  Json mixers = Json::object();
  for (auto& [name, m] : c.mixers) {
    Json x = {{"kind", kMixerKinds[int(m.kind)]}, {"n_heads", m.n_heads}, {"n_kv_heads", m.n_kv_heads},
              {"head_dim", m.head_dim}, {"window", m.window}, {"qk_norm", kQkNorms[int(m.qk_norm)]},
              {"qkv_bias", m.qkv_bias}, {"o_bias", m.o_bias}, {"sinks", m.sinks}, {"output_gate", m.output_gate},
              {"softcap", m.softcap}, {"scale", m.scale}, {"relu2_c", m.relu2_c}, {"top_k", m.top_k}, {"recent", m.recent}, {"q_lora_rank", m.q_lora_rank},
              {"kv_lora_rank", m.kv_lora_rank}, {"qk_nope_dim", m.qk_nope_dim}, {"qk_rope_dim", m.qk_rope_dim},
              {"v_head_dim", m.v_head_dim}, {"n_v_heads", m.n_v_heads}, {"conv_kernel", m.conv_kernel},
              {"gate_rank", m.gate_rank}, {"out_gate_rank", m.out_gate_rank}};
    if (m.kind == MixerKind::mamba2) x.update({{"state_dim", m.state_dim}, {"conv_bias", m.conv_bias}});
    if (m.rope)
      x["rope"] = {{"theta", m.rope->theta}, {"rotary_dim", m.rope->rotary_dim},
                   {"llama3_factor", m.rope->llama3_factor}, {"llama3_low_freq", m.rope->llama3_low_freq},
                   {"llama3_high_freq", m.rope->llama3_high_freq},
                   {"llama3_original_context", m.rope->llama3_original_context},
                   {"linear_factor", m.rope->linear_factor}, {"yarn_factor", m.rope->yarn_factor},
                   {"yarn_beta_fast", m.rope->yarn_beta_fast}, {"yarn_beta_slow", m.rope->yarn_beta_slow},
                   {"yarn_mscale", m.rope->yarn_mscale}, {"yarn_mscale_all_dim", m.rope->yarn_mscale_all_dim},
                   {"yarn_original_context", m.rope->yarn_original_context},
                   {"yarn_truncate", m.rope->yarn_truncate}};
    if (m.rope && !m.rope->longrope_short.empty()) {
      x["rope"]["longrope_short"] = m.rope->longrope_short;
      x["rope"]["longrope_long"] = m.rope->longrope_long;
      x["rope"]["longrope_original_context"] = m.rope->longrope_original_context;
      x["rope"]["longrope_attention"] = m.rope->longrope_attention;
    }
    mixers[name] = x;
  }
  j["mixers"] = mixers;
  Json ffns = Json::object();
  for (auto& [name, f] : c.ffns) {
    Json x = {{"kind", kFfnKinds[int(f.kind)]}, {"activation", kActivations[int(f.activation)]}, {"bias", f.bias}};
    if (f.kind == FfnKind::dense) {
      x["hidden"] = f.hidden;
    } else {
      x.update({{"n_experts", f.n_experts}, {"top_k", f.top_k}, {"expert_hidden", f.expert_hidden},
                {"n_shared", f.n_shared}, {"shared_hidden", f.shared_hidden}, {"shared_gate", f.shared_gate},
                {"latent_dim", f.latent_dim}, {"score", kScores[int(f.score)]}, {"gates", kGateNorms[int(f.gates)]},
                {"balance_bias", f.balance_bias}, {"router_bias", f.router_bias}, {"routed_scale", f.routed_scale},
                {"n_groups", f.n_groups}, {"topk_groups", f.topk_groups}});
    }
    ffns[name] = x;
  }
  j["ffns"] = ffns;
  Json layers = Json::array();
  for (auto& l : c.layers) {
    Json x = {{"mixer", l.mixer}, {"ffn", l.ffn}};
    if (l.kv.kind != KvSourceKind::own) x["kv"] = {{kKvSources[int(l.kv.kind)], l.kv.layer}};
    layers.push_back(x);
  }
  j["layers"] = layers;
  return j;
}

}  // namespace wren
