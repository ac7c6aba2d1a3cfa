// Hugging Face config.json -> ModelConfig: one small mapping function per model family, built
// from shared readers for the common parts (model-level fields, GQA attention, RoPE, dense and
// routed FFNs, per-layer attention kinds, the layer schedule).
//
// What is deliberately left out: multi-token-prediction blocks (DeepSeek's
// num_nextn_predict_layers, Qwen3-Next's mtp_num_hidden_layers) are extra layers used for
// speculative decoding and training, not part of the main model's forward pass, and the
// vision towers of multimodal configs (Gemma 3, Qwen3.5): only the text model is imported.
#include "config/hf_config.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <functional>
#include <optional>

#include "config/parse.h"

namespace wren {
namespace {

// ---- Field readers with HF semantics (null means absent) ------------------------------

// A shape-deciding integer: required, whatever default the transformers class has.
int required_int(JsonReader& r, const std::string& key, int64_t min_value = 1, int64_t max_value = INT32_MAX) {
  if (!r.json().contains(key))
    r.fail(key, "missing required field (expected an integer >= " + std::to_string(min_value) + ")");
  return r.integer(key, min_value, max_value);
}

// "hidden_act": only the gated activations our FFNs implement.
Activation read_activation(JsonReader& r, const std::string& key, const std::string& fallback) {
  std::string a = r.string_or(key, fallback);
  if (a == "silu" || a == "swish") return Activation::swiglu;
  if (a == "gelu_pytorch_tanh") return Activation::geglu;
  r.fail(key, "unsupported activation \"" + a + "\"; expected silu (SwiGLU) or gelu_pytorch_tanh (GeGLU)");
}

// LongRoPE ("longrope", Phi-3's older "su"), as transformers' _compute_longrope_parameters:
// with an original_max_position_embeddings (in the scaling or, as Phi-3 has it, beside it) the
// scale is s = max_position_embeddings / original, else "factor" over the whole context; the
// attention factor, when not given, is sqrt(1 + ln s / ln original) for s > 1, else 1.
void read_longrope(JsonReader& s, Rope& rope, int context_length, std::optional<int> original_beside) {
  rope.longrope_short = s.number_list("short_factor", 1e-6, 1e6);
  rope.longrope_long = s.number_list("long_factor", 1e-6, 1e6);
  double scale = 0;
  if (s.has("original_max_position_embeddings") || original_beside) {
    rope.longrope_original_context =
        s.has("original_max_position_embeddings") ? required_int(s, "original_max_position_embeddings") : *original_beside;
    scale = double(context_length) / rope.longrope_original_context;
  } else {
    rope.longrope_original_context = context_length;
    scale = s.number_or("factor", 1.0, 1e-6, 1e6);
  }
  const double fallback =
      scale <= 1.0 ? 1.0 : std::sqrt(1.0 + std::log(scale) / std::log(double(rope.longrope_original_context)));
  rope.longrope_attention = s.number_or("attention_factor", fallback, 1e-6, 1e6);
}

// RoPE scaling: "rope_type" (or the older "type") selects the variant; the rest are its parameters.
void read_rope_scaling(JsonReader s, Rope& rope, int context_length, std::optional<int> original_beside) {
  std::string type = s.has("rope_type") ? s.string("rope_type") : s.has("type") ? s.string("type") : "default";
  if (type == "default") return;
  if (type == "llama3") {
    // Wavelengths above original/low_freq are divided by factor, below original/high_freq kept,
    // and blended in between.
    rope.llama3_factor = s.number_or("factor", -1.0, 1.0, 1e6);
    if (rope.llama3_factor < 0) s.fail("factor", "missing required field (expected a number >= 1)");
    rope.llama3_low_freq = s.number_or("low_freq_factor", 1.0, 1e-6, 1e6);
    rope.llama3_high_freq = s.number_or("high_freq_factor", 4.0, 1e-6, 1e6);
    rope.llama3_original_context = required_int(s, "original_max_position_embeddings");
  } else if (type == "linear") {
    rope.linear_factor = s.number_or("factor", -1.0, 1e-6, 1e6);
    if (rope.linear_factor < 0) s.fail("factor", "missing required field (expected a number > 0)");
  } else if (type == "yarn") {
    rope.yarn_factor = s.number_or("factor", -1.0, 1.0, 1e6);
    if (rope.yarn_factor < 0) s.fail("factor", "missing required field (expected a number >= 1)");
    rope.yarn_original_context = s.integer_or("original_max_position_embeddings", context_length, 1);
    rope.yarn_beta_fast = s.number_or("beta_fast", 32.0, 0.0, 1e6);
    rope.yarn_beta_slow = s.number_or("beta_slow", 1.0, 0.0, 1e6);
    rope.yarn_mscale = s.number_or("mscale", 1.0, 0.0, 1e6);
    rope.yarn_mscale_all_dim = s.number_or("mscale_all_dim", 0.0, 0.0, 1e6);
    rope.yarn_truncate = s.boolean_or("truncate", true);
    // An explicit attention_factor (Olmo 3 writes one) replaces transformers' default
    // m(factor, mscale) / m(factor, mscale_all_dim) for cos and sin; m(f, k) = 0.1 k ln f + 1
    // is linear in k, so it is the mscale whose m is that factor, over an all-dim m of 1.
    if (s.has("attention_factor")) {
      const double a = s.number_or("attention_factor", 1.0, 1.0, 1e6);
      if (rope.yarn_factor > 1.0) {
        rope.yarn_mscale = (a - 1.0) / (0.1 * std::log(rope.yarn_factor));
        rope.yarn_mscale_all_dim = 0.0;
      } else if (a != 1.0) {
        s.fail("attention_factor", "a factor other than 1 needs a YaRN factor above 1");
      }
    }
  } else if (type == "longrope" || type == "su") {
    read_longrope(s, rope, context_length, original_beside);
  } else {
    s.fail(s.has("rope_type") ? "rope_type" : "type",
           "unsupported RoPE scaling \"" + type + "\"; supported: default, linear, llama3, yarn, longrope");
  }
}

// RoPE over `span` dimensions per head: theta, scaling and partial rotation, from either the
// classic fields (rope_theta, rope_scaling, partial_rotary_factor) or "rope_parameters".
Rope read_rope(JsonReader& r, int span, double theta_default, int context_length) {
  Rope rope;
  double partial = r.number_or("partial_rotary_factor", 1.0, 1e-6, 1.0);
  std::optional<int> original;  // Phi-3 keeps LongRoPE's original context beside the scaling
  if (r.has("original_max_position_embeddings")) original = required_int(r, "original_max_position_embeddings");
  if (r.has("rope_parameters")) {
    JsonReader p = r.object("rope_parameters");
    rope.theta = p.number_or("rope_theta", theta_default, 1.0, 1e12);
    partial = p.number_or("partial_rotary_factor", partial, 1e-6, 1.0);
    read_rope_scaling(p, rope, context_length, original);
  } else {
    rope.theta = r.number_or("rope_theta", theta_default, 1.0, 1e12);
    if (r.has("rope_scaling")) read_rope_scaling(r.object("rope_scaling"), rope, context_length, original);
  }
  if (partial < 1.0) {
    double dims = partial * span;
    int rotary = int(std::lround(dims));
    if (std::abs(dims - rotary) > 1e-6 || rotary % 2 || rotary == 0)
      r.fail("partial_rotary_factor", "factor x head_dim " + std::to_string(span) + " = " + std::to_string(dims) +
                                          " must be an even whole number of dimensions");
    rope.rotary_dim = rotary;
  }
  return rope;
}

// ---- Model-level fields --------------------------------------------------------------

ModelConfig read_model(JsonReader& r, bool tie_default, double eps_default) {
  ModelConfig c;
  c.d_model = required_int(r, "hidden_size");
  c.vocab_size = required_int(r, "vocab_size");
  c.context_length = required_int(r, "max_position_embeddings", 1, kMaxContext);
  c.tie_embeddings = r.boolean_or("tie_word_embeddings", tie_default);
  c.norm.eps = r.number_or("rms_norm_eps", eps_default, 1e-12, 1.0);  // as the model description: eps > 0
  return c;
}

// ---- Sequence mixers -------------------------------------------------------------------

// Softmax attention with grouped KV heads. num_key_value_heads defaults to the query heads and
// head_dim to hidden_size / num_attention_heads, as in transformers.
MixerSpec read_attention(JsonReader& r, const ModelConfig& c, double theta_default) {
  MixerSpec m;
  m.n_heads = required_int(r, "num_attention_heads");
  m.n_kv_heads = r.integer_or("num_key_value_heads", m.n_heads, 1);
  if (m.n_heads % m.n_kv_heads)
    r.fail("num_key_value_heads", "num_attention_heads " + std::to_string(m.n_heads) +
                                      " is not divisible by " + std::to_string(m.n_kv_heads));
  if (r.has("head_dim")) {
    m.head_dim = r.integer("head_dim", 1);
  } else {
    if (c.d_model % m.n_heads)
      r.fail("head_dim", "missing, and hidden_size " + std::to_string(c.d_model) +
                             " is not divisible by num_attention_heads " + std::to_string(m.n_heads));
    m.head_dim = c.d_model / m.n_heads;
  }
  m.rope = read_rope(r, m.head_dim, theta_default, c.context_length);
  return m;
}

// Per-layer kind from HF's "layer_types" (each `marked` or `other`; true = marked), else `fallback(i)`.
std::vector<bool> read_layer_types(JsonReader& r, int n_layers, const std::string& marked, const std::string& other,
                                   const std::function<bool(int)>& fallback) {
  std::vector<bool> out(n_layers);
  if (!r.has("layer_types")) {
    for (int i = 0; i < n_layers; ++i) out[i] = fallback(i);
    return out;
  }
  const Json& types = r.raw("layer_types");
  if (!types.is_array() || int(types.size()) != n_layers)
    r.fail("layer_types", "expected a list of " + std::to_string(n_layers) + " layer types, got " + json_value_text(types));
  for (int i = 0; i < n_layers; ++i) {
    out[i] = types[i] == marked;
    if (!out[i] && types[i] != other)
      r.fail("layer_types[" + std::to_string(i) + "]",
             "expected \"" + marked + "\" or \"" + other + "\", got " + json_value_text(types[i]));
  }
  return out;
}

// Which layers use the sliding window; `window` 0 means there are none.
std::vector<bool> read_sliding_layers(JsonReader& r, int n_layers, int window, const std::function<bool(int)>& sliding) {
  std::vector<bool> out = read_layer_types(r, n_layers, "sliding_attention", "full_attention",
                                           [&](int i) { return window > 0 && sliding(i); });
  if (window == 0 && std::find(out.begin(), out.end(), true) != out.end())
    r.fail("sliding_window", "layer_types has sliding_attention layers but no sliding_window");
  return out;
}

// Qwen: with use_sliding_window, the layers from max_window_layers on use sliding_window.
std::vector<bool> read_qwen_sliding_layers(JsonReader& r, int n_layers, int& window) {
  window = r.boolean_or("use_sliding_window", false) ? r.integer_or("sliding_window", 0, 0) : 0;
  int first = r.integer_or("max_window_layers", n_layers, 0);
  return read_sliding_layers(r, n_layers, window, [first](int i) { return i >= first; });
}

// ---- Feed-forward ----------------------------------------------------------------------

FfnSpec dense_ffn(int hidden, Activation a) {
  FfnSpec f;
  f.activation = a;
  f.hidden = hidden;
  return f;
}

FfnSpec routed_ffn(JsonReader& r, const std::string& experts_key, const std::string& width_key, Activation a) {
  FfnSpec f;
  f.kind = FfnKind::moe;
  f.activation = a;
  f.n_experts = required_int(r, experts_key);
  f.top_k = required_int(r, "num_experts_per_tok");
  if (f.top_k > f.n_experts)
    r.fail("num_experts_per_tok", "value " + std::to_string(f.top_k) + " exceeds the " + std::to_string(f.n_experts) + " experts");
  f.expert_hidden = required_int(r, width_key);
  return f;
}

// Qwen's "norm_topk_prob": the chosen softmax scores renormalised to sum 1, or used as they are.
GateNorm read_topk_norm(JsonReader& r, bool fallback) {
  return r.boolean_or("norm_topk_prob", fallback) ? GateNorm::normalize : GateNorm::none;
}

// Qwen MoE placement: layer i is routed unless listed in mlp_only_layers, and only every
// decoder_sparse_step-th layer. Adds `moe` (and the dense FFN when some layer needs it) to `c`.
std::vector<bool> add_qwen_ffns(JsonReader& r, ModelConfig& c, int n_layers, const FfnSpec& moe) {
  int step = r.integer_or("decoder_sparse_step", 1, 1);
  std::vector<int> dense_only = r.has("mlp_only_layers") ? r.int_list("mlp_only_layers", 0) : std::vector<int>{};
  std::vector<bool> routed(n_layers);
  for (int i = 0; i < n_layers; ++i)
    routed[i] = (i + 1) % step == 0 && std::find(dense_only.begin(), dense_only.end(), i) == dense_only.end();
  c.ffns.push_back({"moe", moe});
  if (std::find(routed.begin(), routed.end(), false) != routed.end())
    c.ffns.push_back({"dense", dense_ffn(required_int(r, "intermediate_size"), moe.activation)});
  return routed;
}

// ---- The layer schedule ------------------------------------------------------------------

// Drops the mixer and FFN specs no layer names.
void drop_unused_specs(ModelConfig& c) {
  auto used = [&](const std::string& name, bool is_mixer) {
    return std::any_of(c.layers.begin(), c.layers.end(),
                       [&](const LayerSpec& l) { return (is_mixer ? l.mixer : l.ffn) == name; });
  };
  std::erase_if(c.mixers, [&](const NamedMixer& m) { return !used(m.name, true); });
  std::erase_if(c.ffns, [&](const NamedFfn& f) { return !used(f.name, false); });
}

// Lays out `n_layers` layers naming their mixer and FFN, then drops specs no layer uses.
void schedule(ModelConfig& c, int n_layers, const std::function<std::pair<std::string, std::string>(int)>& layer) {
  for (int i = 0; i < n_layers; ++i) {
    auto [mixer, ffn] = layer(i);
    c.layers.push_back(LayerSpec{mixer, ffn, {}});
  }
  drop_unused_specs(c);
}

// "attention" and "sliding" mixers (the second with `window`), placed by `sliding_layers`.
void add_attention_pair(ModelConfig& c, const MixerSpec& full, int window) {
  MixerSpec local = full;
  local.window = window;
  c.mixers.push_back({"attention", full});
  c.mixers.push_back({"sliding", local});
}

const char* attention_name(const std::vector<bool>& sliding, int i) { return sliding[i] ? "sliding" : "attention"; }

// ---- Families ----------------------------------------------------------------------------

// Llama / Mistral / Qwen2 / Qwen3: dense GQA transformers differing in biases, QK-norm and windows.
struct DenseFamily {
  bool qkv_bias_always = false;  // Qwen2: q, k, v biases, never o
  bool qk_norm = false;          // Qwen3: RMSNorm over each head of q and k
  enum class Window { none, mistral, qwen } window = Window::none;
};

ModelConfig map_dense(JsonReader& r, const DenseFamily& fam) {
  ModelConfig c = read_model(r, false, 1e-6);
  const int L = required_int(r, "num_hidden_layers", 1, kMaxLayers);
  MixerSpec m = read_attention(r, c, 10000.0);
  if (fam.qkv_bias_always) {
    m.qkv_bias = true;
  } else {
    m.qkv_bias = m.o_bias = r.boolean_or("attention_bias", false);  // Llama, Qwen3: q, k, v and o
  }
  if (fam.qk_norm) m.qk_norm = QkNorm::head;
  FfnSpec f = dense_ffn(required_int(r, "intermediate_size"), read_activation(r, "hidden_act", "silu"));
  f.bias = r.boolean_or("mlp_bias", false);
  c.ffns.push_back({"dense", f});

  int window = 0;
  std::vector<bool> local;
  if (fam.window == DenseFamily::Window::qwen) {
    local = read_qwen_sliding_layers(r, L, window);
  } else {
    if (fam.window == DenseFamily::Window::mistral) window = r.integer_or("sliding_window", 0, 0);
    local = read_sliding_layers(r, L, window, [](int) { return true; });
  }
  add_attention_pair(c, m, window);
  schedule(c, L, [&](int i) { return std::pair{std::string(attention_name(local, i)), std::string("dense")}; });
  return c;
}

ModelConfig map_llama(JsonReader& r) { return map_dense(r, {}); }
// Phi-3 / Phi-3.5 / Phi-4-mini: Llama's layers with fused qkv_proj and gate_up_proj (the
// weights, io/hf_checkpoint), a sliding window when the config gives one, LongRoPE.
ModelConfig map_phi3(JsonReader& r) { return map_dense(r, {.window = DenseFamily::Window::mistral}); }
// SmolLM3: Llama's layers (Qwen's window fields) where the layers marked 0 in no_rope_layers
// (by default every no_rope_layer_interval-th, 4) attend without RoPE ("NoPE"): those get a
// copy of their mixer without "rope", named with "_nope".
ModelConfig map_smollm3(JsonReader& r) {
  ModelConfig c = map_dense(r, {.window = DenseFamily::Window::qwen});
  const int L = c.n_layers();
  std::vector<int> rotates;
  if (r.has("no_rope_layers")) {
    rotates = r.int_list("no_rope_layers", 0);
    if (int(rotates.size()) != L || std::any_of(rotates.begin(), rotates.end(), [](int v) { return v > 1; }))
      r.fail("no_rope_layers", "expected " + std::to_string(L) + " flags of 0 (no RoPE) or 1, one per layer");
  } else {
    const int interval = r.integer_or("no_rope_layer_interval", 4, 1);
    for (int i = 0; i < L; ++i) rotates.push_back((i + 1) % interval != 0);
  }
  for (int i = 0; i < L; ++i) {
    if (rotates[size_t(i)]) continue;
    std::string& name = c.layers[size_t(i)].mixer;
    const std::string nope = name + "_nope";
    if (!c.find_mixer(nope)) {
      MixerSpec m = *c.find_mixer(name);
      m.rope.reset();
      c.mixers.push_back({nope, m});
    }
    name = nope;
  }
  drop_unused_specs(c);
  return c;
}
ModelConfig map_mistral(JsonReader& r) { return map_dense(r, {.window = DenseFamily::Window::mistral}); }
ModelConfig map_qwen2(JsonReader& r) { return map_dense(r, {.qkv_bias_always = true, .window = DenseFamily::Window::qwen}); }
ModelConfig map_qwen3(JsonReader& r) { return map_dense(r, {.qk_norm = true, .window = DenseFamily::Window::qwen}); }

// Mixtral: Mistral attention, every FFN a softmax-routed MoE with the top-k renormalised.
ModelConfig map_mixtral(JsonReader& r) {
  ModelConfig c = read_model(r, false, 1e-5);
  const int L = required_int(r, "num_hidden_layers", 1, kMaxLayers);
  MixerSpec m = read_attention(r, c, 1e6);
  int window = r.integer_or("sliding_window", 0, 0);
  std::vector<bool> local = read_sliding_layers(r, L, window, [](int) { return true; });
  add_attention_pair(c, m, window);
  FfnSpec f = routed_ffn(r, "num_local_experts", "intermediate_size", read_activation(r, "hidden_act", "silu"));
  f.gates = GateNorm::normalize;
  c.ffns.push_back({"moe", f});
  schedule(c, L, [&](int i) { return std::pair{std::string(attention_name(local, i)), std::string("moe")}; });
  return c;
}

// Qwen3-MoE: Qwen3 attention; routed FFNs except in mlp_only_layers.
ModelConfig map_qwen3_moe(JsonReader& r) {
  ModelConfig c = read_model(r, false, 1e-6);
  const int L = required_int(r, "num_hidden_layers", 1, kMaxLayers);
  MixerSpec m = read_attention(r, c, 10000.0);
  m.qk_norm = QkNorm::head;
  m.qkv_bias = m.o_bias = r.boolean_or("attention_bias", false);
  int window = 0;
  std::vector<bool> local = read_qwen_sliding_layers(r, L, window);
  add_attention_pair(c, m, window);
  FfnSpec moe = routed_ffn(r, "num_experts", "moe_intermediate_size", read_activation(r, "hidden_act", "silu"));
  moe.gates = read_topk_norm(r, false);
  std::vector<bool> routed = add_qwen_ffns(r, c, L, moe);
  schedule(c, L, [&](int i) { return std::pair{std::string(attention_name(local, i)), std::string(routed[i] ? "moe" : "dense")}; });
  return c;
}

// Qwen3-Next and Qwen3.5: Gated DeltaNet layers ("linear_attention") with gated full attention
// every full_attention_interval-th layer; RMSNorm gains are zero-centred (applied as 1 + w).
// Qwen3-Next and Qwen3.5-MoE route experts beside one shared expert scaled by sigmoid(w . x);
// Qwen3.5's dense models have one SwiGLU MLP per layer. Qwen3.5's M-RoPE over a text has the same
// position on all three axes, so it is plain RoPE over the partial_rotary_factor dimensions.
ModelConfig map_qwen_hybrid(JsonReader& r, bool routed_experts) {
  ModelConfig c = read_model(r, false, 1e-6);
  c.norm.unit_offset = true;
  const int L = required_int(r, "num_hidden_layers", 1, kMaxLayers);
  MixerSpec full = read_attention(r, c, 10000.0);
  full.qk_norm = QkNorm::head;
  full.output_gate = r.boolean_or("attn_output_gate", true);  // q_proj emits, per head, the query then a gate: o *= sigmoid(g)
  full.qkv_bias = full.o_bias = r.boolean_or("attention_bias", false);
  if (full.qkv_bias && full.output_gate)
    r.fail("attention_bias", "a bias on the gated q_proj (query and gate rows per head) is not supported (expected false)");
  MixerSpec gdn;
  gdn.kind = MixerKind::gdn;
  gdn.n_heads = required_int(r, "linear_num_key_heads");
  gdn.n_v_heads = required_int(r, "linear_num_value_heads");
  gdn.head_dim = required_int(r, "linear_key_head_dim");
  gdn.v_head_dim = required_int(r, "linear_value_head_dim");
  gdn.conv_kernel = r.integer_or("linear_conv_kernel_dim", 4, 1, 64);
  gdn.output_gate = true;  // z: o = RMSNorm(o) * silu(W_z x)
  c.mixers.push_back({"attention", full});
  c.mixers.push_back({"gdn", gdn});

  int interval = r.integer_or("full_attention_interval", 4, 1);
  std::vector<bool> linear = read_layer_types(r, L, "linear_attention", "full_attention",
                                              [&](int i) { return (i + 1) % interval != 0; });
  const Activation act = read_activation(r, "hidden_act", "silu");
  std::vector<bool> routed(L, false);
  if (routed_experts) {
    FfnSpec moe = routed_ffn(r, "num_experts", "moe_intermediate_size", act);
    moe.gates = read_topk_norm(r, true);
    moe.shared_hidden = r.integer_or("shared_expert_intermediate_size", 0, 0);
    moe.n_shared = moe.shared_hidden ? 1 : 0;
    moe.shared_gate = moe.n_shared == 1;
    routed = add_qwen_ffns(r, c, L, moe);
  } else {
    c.ffns.push_back({"dense", dense_ffn(required_int(r, "intermediate_size"), act)});
  }
  schedule(c, L, [&](int i) {
    return std::pair{std::string(linear[i] ? "gdn" : "attention"), std::string(routed[i] ? "moe" : "dense")};
  });
  return c;
}

ModelConfig map_qwen3_next(JsonReader& r) { return map_qwen_hybrid(r, true); }
ModelConfig map_qwen3_5_text(JsonReader& r) { return map_qwen_hybrid(r, false); }
ModelConfig map_qwen3_5_moe_text(JsonReader& r) { return map_qwen_hybrid(r, true); }

// DeepSeek-V2 / V3: MLA everywhere; dense FFNs for the first first_k_dense_replace layers, then
// routed experts every moe_layer_freq-th layer with shared experts beside them.
ModelConfig map_deepseek(JsonReader& r, bool v3) {
  ModelConfig c = read_model(r, false, 1e-6);
  const int L = required_int(r, "num_hidden_layers", 1, kMaxLayers);
  if (r.boolean_or("attention_bias", false)) r.fail("attention_bias", "MLA projections with biases are not supported (expected false)");
  MixerSpec m;
  m.kind = MixerKind::mla;
  m.n_heads = required_int(r, "num_attention_heads");
  m.q_lora_rank = r.integer_or("q_lora_rank", 0, 0);  // null: queries projected straight from x
  m.kv_lora_rank = required_int(r, "kv_lora_rank");
  m.qk_nope_dim = required_int(r, "qk_nope_head_dim", 0);
  m.qk_rope_dim = required_int(r, "qk_rope_head_dim");
  m.v_head_dim = required_int(r, "v_head_dim");
  m.rope = read_rope(r, m.qk_rope_dim, 10000.0, c.context_length);
  c.mixers.push_back({"mla", m});

  Activation act = read_activation(r, "hidden_act", "silu");
  c.ffns.push_back({"dense", dense_ffn(required_int(r, "intermediate_size"), act)});
  const bool routed = r.has("n_routed_experts");
  if (routed) {
    FfnSpec f = routed_ffn(r, "n_routed_experts", "moe_intermediate_size", act);
    f.n_shared = r.integer_or("n_shared_experts", 0, 0);
    f.shared_hidden = f.n_shared ? f.expert_hidden : 0;  // one MLP of width n_shared x moe_intermediate_size
    f.score = RouterScore(r.choice_or("scoring_func", {"softmax", "sigmoid"}, v3 ? 1 : 0));
    f.gates = r.boolean_or("norm_topk_prob", v3) ? GateNorm::normalize : GateNorm::none;
    f.routed_scale = r.number_or("routed_scaling_factor", 1.0, 0.0, 1e6);
    // greedy: plain top-k; group_limited_greedy: top-k within the topk_group best of n_group
    // groups; noaux_tc: the same with per-expert selection biases (e_score_correction_bias).
    int method = r.choice_or("topk_method", {"greedy", "group_limited_greedy", "noaux_tc"}, v3 ? 2 : 0);
    if (method > 0) {
      f.n_groups = r.integer_or("n_group", 1, 1);
      f.topk_groups = r.integer_or("topk_group", 1, 1, f.n_groups);
      if (f.n_experts % f.n_groups) r.fail("n_group", "n_routed_experts is not divisible by n_group " + std::to_string(f.n_groups));
    }
    f.balance_bias = method == 2;
    c.ffns.push_back({"moe", f});
  }
  int first_moe = r.integer_or("first_k_dense_replace", 0, 0);
  int freq = r.integer_or("moe_layer_freq", 1, 1);
  schedule(c, L, [&](int i) {
    bool moe = routed && i >= first_moe && i % freq == 0;
    return std::pair{std::string("mla"), std::string(moe ? "moe" : "dense")};
  });
  return c;
}

ModelConfig map_deepseek_v2(JsonReader& r) { return map_deepseek(r, false); }
ModelConfig map_deepseek_v3(JsonReader& r) { return map_deepseek(r, true); }

// Gemma 1: pre-norm layers with 1 + w gains, the embedding scaled by sqrt(d), GeGLU (the tanh
// approximation: transformers' hidden_activation, which replaces the original configs' exact
// "gelu" with it), tied embeddings; no windows or soft-caps.
ModelConfig map_gemma1(JsonReader& r) {
  ModelConfig c = read_model(r, true, 1e-6);
  const int L = required_int(r, "num_hidden_layers", 1, kMaxLayers);
  c.embedding_scale = std::sqrt(double(c.d_model));
  c.norm.unit_offset = true;
  c.mixers.push_back({"attention", read_attention(r, c, 10000.0)});
  if (r.has("hidden_act")) r.string("hidden_act");  // superseded by hidden_activation
  c.ffns.push_back({"dense", dense_ffn(required_int(r, "intermediate_size"), read_activation(r, "hidden_activation", "gelu_pytorch_tanh"))});
  schedule(c, L, [](int) { return std::pair{std::string("attention"), std::string("dense")}; });
  return c;
}

// Gemma 2 / 3: embeddings scaled by sqrt(d), RMSNorm gains as (1 + w) before and after each
// block, GeGLU, tied head; local (sliding) and global layers alternate. Gemma 2 soft-caps
// attention and final logits; Gemma 3 adds per-head QK-norm and a separate RoPE base for local layers.
ModelConfig map_gemma(JsonReader& r, int version) {
  ModelConfig c = read_model(r, true, 1e-6);
  const int L = required_int(r, "num_hidden_layers", 1, kMaxLayers);
  c.embedding_scale = std::sqrt(double(c.d_model));
  c.norm.placement = NormPlacement::sandwich;
  c.norm.unit_offset = true;
  c.logit_softcap = r.number_or("final_logit_softcapping", 0.0, 0.0, 1e9);
  MixerSpec global = read_attention(r, c, version == 2 ? 10000.0 : 1e6);
  global.softcap = r.number_or("attn_logit_softcapping", 0.0, 0.0, 1e9);
  double query_scalar = r.number_or("query_pre_attn_scalar", global.head_dim, 1e-6, 1e9);
  if (query_scalar != global.head_dim) global.scale = 1.0 / std::sqrt(query_scalar);
  if (version == 3) global.qk_norm = QkNorm::head;
  int window = required_int(r, "sliding_window");
  MixerSpec local = global;
  local.window = window;
  if (version == 3) {
    local.rope = Rope{};  // unscaled
    local.rope->theta = r.number_or("rope_local_base_freq", 10000.0, 1.0, 1e12);
  }
  c.mixers.push_back({"global", global});
  c.mixers.push_back({"local", local});

  // Gemma 2: even layers local; Gemma 3: every sliding_window_pattern-th layer global.
  int pattern = version == 2 ? 2 : r.integer_or("sliding_window_pattern", 6, 1);
  std::vector<bool> sliding = read_sliding_layers(r, L, window, [&](int i) {
    return version == 2 ? i % 2 == 0 : (i + 1) % pattern != 0;
  });
  c.ffns.push_back({"dense", dense_ffn(required_int(r, "intermediate_size"), read_activation(r, "hidden_activation", "gelu_pytorch_tanh"))});
  schedule(c, L, [&](int i) { return std::pair{std::string(sliding[i] ? "local" : "global"), std::string("dense")}; });
  return c;
}

ModelConfig map_gemma2(JsonReader& r) { return map_gemma(r, 2); }
ModelConfig map_gemma3_text(JsonReader& r) { return map_gemma(r, 3); }

// The Gemma3TextConfig defaults: a multimodal config's text_config lists only the fields that differ.
Json gemma3_text_defaults() {
  return Json{{"vocab_size", 262208}, {"hidden_size", 2304}, {"intermediate_size", 9216},
              {"num_hidden_layers", 26}, {"num_attention_heads", 8}, {"num_key_value_heads", 4},
              {"head_dim", 256}, {"max_position_embeddings", 131072}, {"rms_norm_eps", 1e-6},
              {"rope_theta", 1000000.0}, {"rope_local_base_freq", 10000.0}, {"query_pre_attn_scalar", 256},
              {"sliding_window", 4096}, {"sliding_window_pattern", 6}, {"tie_word_embeddings", true},
              {"hidden_activation", "gelu_pytorch_tanh"}};
}

// OLMoE: MHA with RMSNorm over the whole q and k projections, 64 softmax-routed experts, no renormalisation.
ModelConfig map_olmoe(JsonReader& r) {
  ModelConfig c = read_model(r, false, 1e-5);
  const int L = required_int(r, "num_hidden_layers", 1, kMaxLayers);
  MixerSpec m = read_attention(r, c, 10000.0);
  m.qk_norm = QkNorm::full;
  m.qkv_bias = m.o_bias = r.boolean_or("attention_bias", false);
  if (r.has("clip_qkv")) r.fail("clip_qkv", "clipping of q, k, v is not supported (expected null)");
  c.mixers.push_back({"attention", m});
  FfnSpec f = routed_ffn(r, "num_experts", "intermediate_size", read_activation(r, "hidden_act", "silu"));
  f.gates = read_topk_norm(r, false);
  c.ffns.push_back({"moe", f});
  schedule(c, L, [](int) { return std::pair{std::string("attention"), std::string("moe")}; });
  return c;
}

// Granite's four multipliers over Llama's layers: embeddings scaled, the softmax scale given
// outright (attention_multiplier in place of 1 / sqrt(head_dim)), each sublayer's output
// scaled before it is added, the logits divided.
void read_granite_multipliers(JsonReader& r, ModelConfig& c) {
  c.embedding_scale = r.number_or("embedding_multiplier", 1.0, 1e-6, 1e6);
  c.residual_scale = r.number_or("residual_multiplier", 1.0, 1e-6, 1e6);
  c.logit_divisor = r.number_or("logits_scaling", 1.0, 1e-6, 1e6);
  const double scale = r.number_or("attention_multiplier", 1.0, 1e-6, 1e6);
  for (NamedMixer& m : c.mixers) m.spec.scale = scale;
}

ModelConfig map_granite(JsonReader& r) {
  ModelConfig c = map_dense(r, {});
  read_granite_multipliers(r, c);
  return c;
}

// Granite MoE's routing (granitemoe, and Granite 4's routed experts): num_local_experts experts
// of intermediate_size, a softmax over the top-k router logits.
FfnSpec granite_moe_ffn(JsonReader& r, Activation act) {
  FfnSpec f = routed_ffn(r, "num_local_experts", "intermediate_size", act);
  f.gates = GateNorm::softmax_topk;
  return f;
}

// Granite MoE: the same multipliers; experts stacked as input_linear ([E, 2 ffn, d], gate rows
// first) and output_linear, routed as granite_moe_ffn.
ModelConfig map_granitemoe(JsonReader& r) {
  ModelConfig c = read_model(r, false, 1e-6);
  const int L = required_int(r, "num_hidden_layers", 1, kMaxLayers);
  MixerSpec m = read_attention(r, c, 10000.0);
  m.qkv_bias = m.o_bias = r.boolean_or("attention_bias", false);
  c.mixers.push_back({"attention", m});
  c.ffns.push_back({"moe", granite_moe_ffn(r, read_activation(r, "hidden_act", "silu"))});
  schedule(c, L, [](int) { return std::pair{std::string("attention"), std::string("moe")}; });
  read_granite_multipliers(r, c);
  return c;
}

// Mamba-2's widths under transformers' names (GraniteMoeHybridConfig, BambaConfig). Its gated
// norm is over all h P channels in transformers and over each group's in mamba_ssm and
// llama.cpp: the two agree for one group, the only count these models use.
MixerSpec read_mamba2(JsonReader& r, const ModelConfig& c) {
  MixerSpec m;
  m.kind = MixerKind::mamba2;
  m.n_heads = r.integer_or("mamba_n_heads", 128, 1, 1 << 16);
  const int expand = r.integer_or("mamba_expand", 2, 1, 64);
  const int64_t inner = int64_t(expand) * c.d_model;
  if (r.has("mamba_d_head") && r.raw("mamba_d_head").is_string()) {
    if (r.string("mamba_d_head") != "auto") r.fail("mamba_d_head", "expected a width or \"auto\"");
    m.head_dim = int(inner / m.n_heads);
  } else {
    m.head_dim = r.integer_or("mamba_d_head", int(inner / m.n_heads), 1, 1 << 16);
  }
  if (int64_t(m.n_heads) * m.head_dim != inner)
    r.fail("mamba_d_head", std::to_string(m.n_heads) + " heads of " + std::to_string(m.head_dim) +
                               " are not mamba_expand x hidden_size = " + std::to_string(inner) + " channels");
  m.n_kv_heads = r.integer_or("mamba_n_groups", 1, 1, 1 << 16);
  if (m.n_kv_heads != 1) r.fail("mamba_n_groups", "only 1 group is supported (the gated norm's groups differ between transformers and llama.cpp)");
  m.state_dim = r.integer_or("mamba_d_state", 256, 1, 1 << 16);
  m.conv_kernel = r.integer_or("mamba_d_conv", 4, 1, 64);
  m.conv_bias = r.boolean_or("mamba_conv_bias", true);
  if (r.boolean_or("mamba_proj_bias", false)) r.fail("mamba_proj_bias", "biases on Mamba-2's projections are not supported");
  return m;
}

// Granite 4 (granitemoehybrid): Granite's multipliers over layers of attention or Mamba-2
// (layer_types), each with the MLP shared_mlp of shared_intermediate_size; attention rotates
// only with position_embedding_type "rope" (the default, as the hybrid models' attention, is
// "nope"). Mamba-2: mamba_n_heads heads of mamba_d_head ("auto": mamba_expand d_model / heads)
// over mamba_expand d_model channels, mamba_n_groups groups of B and C of mamba_d_state,
// mamba_d_conv taps with mamba_conv_bias. With num_local_experts (H tiny, H small) every layer
// routes as Granite MoE (softmax over the top-k logits, experts of intermediate_size) beside
// the shared MLP as one shared expert.
ModelConfig map_granitemoehybrid(JsonReader& r) {
  ModelConfig c = read_model(r, false, 1e-6);
  const int L = required_int(r, "num_hidden_layers", 1, kMaxLayers);
  const std::vector<bool> attention = read_layer_types(r, L, "attention", "mamba", [](int) { return false; });
  if (!r.has("layer_types")) r.fail("layer_types", "expected the list of \"attention\" and \"mamba\" layers");
  MixerSpec m = read_attention(r, c, 10000.0);
  m.qkv_bias = m.o_bias = r.boolean_or("attention_bias", false);
  const std::string position = r.string_or("position_embedding_type", "nope");
  if (position == "nope") m.rope.reset();
  else if (position != "rope") r.fail("position_embedding_type", "expected \"rope\" or \"nope\", got \"" + position + "\"");
  c.mixers.push_back({"attention", m});
  if (std::find(attention.begin(), attention.end(), false) != attention.end()) c.mixers.push_back({"mamba2", read_mamba2(r, c)});
  const Activation act = read_activation(r, "hidden_act", "silu");
  const int shared = required_int(r, "shared_intermediate_size");
  const bool routed = r.integer_or("num_local_experts", 0, 0) > 0;
  if (routed) {
    FfnSpec f = granite_moe_ffn(r, act);
    f.n_shared = 1, f.shared_hidden = shared;
    c.ffns.push_back({"moe", f});
  } else {
    c.ffns.push_back({"dense", dense_ffn(shared, act)});
  }
  schedule(c, L, [&](int i) {
    return std::pair{std::string(attention[size_t(i)] ? "attention" : "mamba2"), std::string(routed ? "moe" : "dense")};
  });
  read_granite_multipliers(r, c);
  return c;
}

// OLMo 2 / Olmo 3: each sublayer reads the residual as it is and its output is normalised
// before it is added (x + norm(f(x))); RMSNorm over the whole q and k projections, as OLMoE.
// Olmo 3 adds sliding-window layers (by default all but every fourth), which rotate without the
// config's RoPE scaling (transformers' rotary_embs["sliding_attention"] is rope_type "default").
ModelConfig map_olmo(JsonReader& r, int version) {
  ModelConfig c = read_model(r, false, 1e-5);
  const int L = required_int(r, "num_hidden_layers", 1, kMaxLayers);
  c.norm.placement = NormPlacement::post;
  MixerSpec m = read_attention(r, c, 10000.0);
  m.qk_norm = QkNorm::full;
  m.qkv_bias = m.o_bias = r.boolean_or("attention_bias", false);
  c.ffns.push_back({"dense", dense_ffn(required_int(r, "intermediate_size"), read_activation(r, "hidden_act", "silu"))});
  const int window = version == 3 ? r.integer_or("sliding_window", 4096, 1) : 0;
  const std::vector<bool> local = read_sliding_layers(r, L, window, [](int i) { return (i + 1) % 4 != 0; });
  add_attention_pair(c, m, window);
  if (m.rope) c.mixers.back().spec.rope = Rope{.theta = m.rope->theta, .rotary_dim = m.rope->rotary_dim};  // "sliding"
  schedule(c, L, [&](int i) { return std::pair{std::string(attention_name(local, i)), std::string("dense")}; });
  return c;
}

ModelConfig map_olmo2(JsonReader& r) { return map_olmo(r, 2); }
ModelConfig map_olmo3(JsonReader& r) { return map_olmo(r, 3); }

// EXAONE 4: OLMo 2's layers (post norms) with QK-norm per head. With a sliding_window, the
// layers marked sliding (layer_types, else sliding_window_pattern: a count n whose every n-th
// layer is full, or a string of L and G repeated from layer 0; default 4) rotate and the full
// ones attend without RoPE (transformers' "global NoPE"); without one every layer is full and rotates.
ModelConfig map_exaone4(JsonReader& r) {
  ModelConfig c = read_model(r, false, 1e-5);
  const int L = required_int(r, "num_hidden_layers", 1, kMaxLayers);
  c.norm.placement = NormPlacement::post;
  MixerSpec m = read_attention(r, c, 10000.0);
  m.qk_norm = QkNorm::head;
  c.ffns.push_back({"dense", dense_ffn(required_int(r, "intermediate_size"), read_activation(r, "hidden_act", "silu"))});
  const int window = r.has("sliding_window") ? r.integer("sliding_window", 1) : 0;
  std::function<bool(int)> pattern = [](int i) { return (i + 1) % 4 != 0; };
  if (window && r.has("sliding_window_pattern") && r.raw("sliding_window_pattern").is_string()) {
    const std::string p = r.raw("sliding_window_pattern").get<std::string>();
    if (p.empty() || p.find_first_not_of("LG") != std::string::npos)
      r.fail("sliding_window_pattern", "expected a count or a string of L (local) and G (global), got \"" + p + "\"");
    pattern = [p](int i) { return p[size_t(i) % p.size()] == 'L'; };
  } else if (window && r.has("sliding_window_pattern")) {
    const int n = r.integer("sliding_window_pattern", 1);
    pattern = [n](int i) { return (i + 1) % n != 0; };
  }
  const std::vector<bool> local = read_sliding_layers(r, L, window, pattern);
  add_attention_pair(c, m, window);
  if (window) c.mixers.front().spec.rope.reset();  // "attention": global NoPE
  schedule(c, L, [&](int i) { return std::pair{std::string(attention_name(local, i)), std::string("dense")}; });
  return c;
}

// gpt-oss: alternating banded (sliding) and full attention with biases and a learned sink
// logit per head; experts with biases and the clamped SwiGLU; softmax over the chosen router logits.
ModelConfig map_gpt_oss(JsonReader& r) {
  ModelConfig c = read_model(r, false, 1e-5);
  const int L = required_int(r, "num_hidden_layers", 1, kMaxLayers);
  MixerSpec m = read_attention(r, c, 150000.0);
  m.qkv_bias = m.o_bias = r.boolean_or("attention_bias", true);
  m.sinks = true;
  int window = required_int(r, "sliding_window");
  std::vector<bool> local = read_sliding_layers(r, L, window, [](int i) { return i % 2 == 0; });
  add_attention_pair(c, m, window);
  double limit = r.number_or("swiglu_limit", 7.0, 0.0, 1e9);
  if (limit != 7.0) r.fail("swiglu_limit", "swiglu_oai clamps at 7.0; other limits are not supported");
  FfnSpec f = routed_ffn(r, "num_local_experts", "intermediate_size", Activation::swiglu_oai);
  f.bias = true;
  f.router_bias = true;
  f.gates = GateNorm::softmax_topk;
  c.ffns.push_back({"moe", f});
  schedule(c, L, [&](int i) { return std::pair{std::string(attention_name(local, i)), std::string("moe")}; });
  return c;
}

// LFM2 (Liquid AI): gated short convolutions ("conv" layers: in_proj's rows B, C, x; a
// depthwise conv of conv_L_cache taps; out_proj) and GQA attention with QK-norm per head
// ("full_attention"), each followed by a SwiGLU MLP (w1, w3, w2). Plain RMSNorm gains
// (norm_eps); tied embeddings unless tie_embedding / tie_word_embeddings say otherwise; RoPE
// theta from rope_theta or theta (1e6). The layers and their mixers; the FFNs are the caller's.
ModelConfig read_lfm2_layers(JsonReader& r, std::vector<bool>& full) {
  ModelConfig c;
  c.d_model = required_int(r, "hidden_size");
  c.vocab_size = required_int(r, "vocab_size");
  c.context_length = r.integer_or("max_position_embeddings", 128000, 1, kMaxContext);
  c.tie_embeddings = r.has("tie_embedding") ? r.boolean_or("tie_embedding", true) : r.boolean_or("tie_word_embeddings", true);
  c.norm.eps = r.number_or("norm_eps", 1e-5, 1e-12, 1.0);
  const int L = required_int(r, "num_hidden_layers", 1, kMaxLayers);
  MixerSpec attention = read_attention(r, c, r.number_or("theta", 1e6, 1.0, 1e12));
  attention.qk_norm = QkNorm::head;
  MixerSpec conv;
  conv.kind = MixerKind::short_conv;
  conv.conv_kernel = r.integer_or("conv_L_cache", 3, 1, 64);
  if (r.boolean_or("conv_bias", false)) r.fail("conv_bias", "biases on the short convolution are not supported (expected false)");
  c.mixers.push_back({"attention", attention});
  c.mixers.push_back({"conv", conv});
  full.assign(size_t(L), true);
  if (r.has("layer_types")) {
    full = read_layer_types(r, L, "full_attention", "conv", [](int) { return true; });
  } else if (r.has("full_attn_idxs")) {
    std::fill(full.begin(), full.end(), false);
    for (int i : r.int_list("full_attn_idxs", 0)) {
      if (i >= L) r.fail("full_attn_idxs", "layer " + std::to_string(i) + " is past the " + std::to_string(L) + " layers");
      full[size_t(i)] = true;
    }
  }
  return c;
}

// LFM2's MLP width is block_ff_dim (or intermediate_size) adjusted as Lfm2MLP does: 2/3 of it,
// then times block_ffn_dim_multiplier and rounded up to block_multiple_of.
ModelConfig map_lfm2(JsonReader& r) {
  std::vector<bool> full;
  ModelConfig c = read_lfm2_layers(r, full);
  int64_t hidden = r.has("block_ff_dim") ? required_int(r, "block_ff_dim") : required_int(r, "intermediate_size");
  if (r.boolean_or("block_auto_adjust_ff_dim", true)) {
    hidden = 2 * hidden / 3;
    if (r.has("block_ffn_dim_multiplier")) {
      const int64_t multiple = r.integer_or("block_multiple_of", 256, 1);
      hidden = int64_t(r.number_or("block_ffn_dim_multiplier", 1.0, 1e-6, 1e6) * double(hidden));
      hidden = multiple * ((hidden + multiple - 1) / multiple);
    }
  }
  if (hidden < 1 || hidden > kMaxWidth) r.fail("block_ff_dim", "the MLP width comes to " + std::to_string(hidden));
  c.ffns.push_back({"dense", dense_ffn(int(hidden), Activation::swiglu)});
  schedule(c, int(full.size()), [&](int i) { return std::pair{std::string(full[size_t(i)] ? "attention" : "conv"), std::string("dense")}; });
  return c;
}

// LFM2-MoE: LFM2's layers; the first num_dense_layers keep an MLP of intermediate_size, the
// rest route: sigmoid scores, the top-k chosen by score + expert_bias (use_expert_bias), their
// scores renormalised (norm_topk_prob) and scaled by routed_scaling_factor.
ModelConfig map_lfm2_moe(JsonReader& r) {
  std::vector<bool> full;
  ModelConfig c = read_lfm2_layers(r, full);
  const int L = int(full.size()), dense = r.integer_or("num_dense_layers", 2, 0, L);
  FfnSpec moe = routed_ffn(r, "num_experts", "moe_intermediate_size", Activation::swiglu);
  moe.score = RouterScore::sigmoid;
  moe.gates = r.boolean_or("norm_topk_prob", true) ? GateNorm::normalize : GateNorm::none;
  moe.balance_bias = r.boolean_or("use_expert_bias", true);
  moe.routed_scale = r.number_or("routed_scaling_factor", 1.0, 0.0, 1e6);
  c.ffns.push_back({"moe", moe});
  if (dense > 0) c.ffns.push_back({"dense", dense_ffn(required_int(r, "intermediate_size"), Activation::swiglu)});
  schedule(c, L, [&](int i) {
    return std::pair{std::string(full[size_t(i)] ? "attention" : "conv"), std::string(i < dense ? "dense" : "moe")};
  });
  return c;
}

// ---- Dispatch ----------------------------------------------------------------------------

using Mapper = ModelConfig (*)(JsonReader&);
const std::vector<std::pair<std::string, Mapper>>& families() {
  static const std::vector<std::pair<std::string, Mapper>> list = {
      {"llama", map_llama},         {"mistral", map_mistral},         {"mixtral", map_mixtral},
      {"qwen2", map_qwen2},         {"qwen3", map_qwen3},             {"qwen3_moe", map_qwen3_moe},
      {"qwen3_next", map_qwen3_next}, {"qwen3_5_text", map_qwen3_5_text}, {"qwen3_5_moe_text", map_qwen3_5_moe_text},
      {"deepseek_v2", map_deepseek_v2}, {"deepseek_v3", map_deepseek_v3},
      {"gemma", map_gemma1},        {"gemma2", map_gemma2},           {"gemma3_text", map_gemma3_text},
      {"olmoe", map_olmoe},         {"olmo2", map_olmo2},             {"olmo3", map_olmo3},
      {"granite", map_granite},     {"granitemoe", map_granitemoe},   {"exaone4", map_exaone4},
      {"granitemoehybrid", map_granitemoehybrid},
      {"gpt_oss", map_gpt_oss},     {"phi3", map_phi3},               {"smollm3", map_smollm3},
      {"lfm2", map_lfm2},           {"lfm2_moe", map_lfm2_moe},
  };
  return list;
}

// "_name_or_path" without its organisation or directory, else the file name (the model
// directory's name for a file called config.json).
std::string model_name(JsonReader& r, const std::string& origin) {
  namespace fs = std::filesystem;
  std::string path = r.string_or("_name_or_path", "");
  while (!path.empty() && path.back() == '/') path.pop_back();
  if (!path.empty()) return fs::path(path).filename().string();
  fs::path file(origin);
  if (file.stem() == "config" && file.has_parent_path()) return file.parent_path().filename().string();
  return file.stem().string();
}

}  // namespace

namespace {

// Multimodal configs whose text model lives in text_config: the wrapper's model_type, the text
// model's, and the text class's defaults for the fields a text_config may leave out. The
// wrapper's tie_word_embeddings applies unless text_config sets its own (Qwen3-VL's classes
// keep it at the top).
struct TextWrapper {
  const char* outer;
  const char* inner;
  Json (*defaults)();
};
const std::vector<TextWrapper>& text_wrappers() {
  static const std::vector<TextWrapper> list = {{"gemma3", "gemma3_text", gemma3_text_defaults},
                                                {"qwen3_5", "qwen3_5_text", nullptr},
                                                {"qwen3_5_moe", "qwen3_5_moe_text", nullptr}};
  return list;
}

}  // namespace

const std::vector<std::string>& hf_model_types() {
  static const std::vector<std::string> types = [] {
    std::vector<std::string> t;
    for (auto& [type, map] : families()) t.push_back(type);
    for (const TextWrapper& w : text_wrappers()) t.push_back(w.outer);
    return t;
  }();
  return types;
}

ModelConfig import_hf_config(const Json& j, const std::string& origin) {
  JsonReader r(j, origin, "");
  const std::string type = r.string("model_type");
  auto wrapper = std::find_if(text_wrappers().begin(), text_wrappers().end(), [&](auto& w) { return type == w.outer; });
  ModelConfig c;
  if (wrapper != text_wrappers().end()) {
    JsonReader text = r.object("text_config");
    std::string inner = text.string_or("model_type", wrapper->inner);
    if (inner != wrapper->inner) text.fail("model_type", "expected \"" + std::string(wrapper->inner) + "\", got \"" + inner + "\"");
    Json merged = wrapper->defaults ? wrapper->defaults() : Json::object();
    if (r.has("tie_word_embeddings")) merged["tie_word_embeddings"] = r.raw("tie_word_embeddings");
    merged.update(text.json());
    merged["model_type"] = inner;
    JsonReader t(merged, origin, "text_config");
    auto family = std::find_if(families().begin(), families().end(), [&](auto& f) { return f.first == inner; });
    c = family->second(t);
  } else {
    auto it = std::find_if(families().begin(), families().end(), [&](auto& f) { return f.first == type; });
    if (it == families().end()) {
      std::string list;
      for (auto& t : hf_model_types()) list += (list.empty() ? "" : ", ") + t;
      r.fail("model_type", "unknown model_type \"" + type + "\"; supported: " + list);
    }
    c = it->second(r);
  }
  c.name = model_name(r, origin);
  // Read back through the model-description reader, so an import is exactly what `explore`
  // and the engine accept (its ranges, e.g. norm.eps > 0, are checked there once).
  return parse_model_config(to_json(c), origin + " (imported)");
}

ModelConfig load_hf_config(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  std::string file = fs::is_directory(path, ec) ? (fs::path(path) / "config.json").string() : path;
  return import_hf_config(parse_json_file(file, kConfigJsonLimits), file);
}

}  // namespace wren
