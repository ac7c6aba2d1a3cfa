// Small Hugging Face checkpoints written in the exact transformers layout of each family
// (names, shapes, bf16, optionally sharded with an index), and a plain forward pass over
// those HF tensors with HF's semantics, written here from the transformers modelling code
// (not from our engine): the oracle the converted model's logits are checked against.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "config/json_reader.h"
#include "io/output_file.h"
#include "io/safetensors.h"
#include "kernels/types.h"
#include "text/bpe_train.h"

namespace wren::hf_fixture {

struct HfTensor {
  std::vector<int64_t> shape;
  std::vector<float> values;  // already rounded to bf16
};

struct HfModel {
  Json config;
  std::map<std::string, HfTensor> tensors;
  uint32_t seed = 1;

  // A tensor of N(mean, std) values rounded to bf16 (the oracle sees exactly what is stored).
  void add(const std::string& name, std::vector<int64_t> shape, float std, float mean = 0.0f) {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    std::mt19937 rng(seed++);
    std::normal_distribution<float> dist(mean, std);
    HfTensor t{std::move(shape), std::vector<float>(size_t(n))};
    for (float& x : t.values) x = kernels::bf16_to_f32(kernels::f32_to_bf16(dist(rng)));
    tensors[name] = std::move(t);
  }
  void set(const std::string& name, std::vector<int64_t> shape, std::vector<float> values) {
    tensors[name] = HfTensor{std::move(shape), std::move(values)};
  }
  const std::vector<float>& at(const std::string& name) const { return tensors.at(name).values; }
  bool has(const std::string& name) const { return tensors.count(name) > 0; }

  // config.json, the tensors as BF16 (one file, or `shards` files with an index), tokenizer.json.
  void write(const std::string& dir, int shards, const std::string& tokenizer_json) const {
    std::vector<SafetensorsWriter> files(static_cast<size_t>(shards));
    Json index = {{"metadata", {{"total_size", 0}}}, {"weight_map", Json::object()}};
    size_t k = 0;
    for (auto& [name, t] : tensors) {
      std::vector<uint8_t> bytes(t.values.size() * 2);
      for (size_t i = 0; i < t.values.size(); ++i) {
        uint16_t b = kernels::f32_to_bf16(t.values[i]).bits;
        std::memcpy(bytes.data() + 2 * i, &b, 2);
      }
      const size_t s = k++ % size_t(shards);
      files[s].add(name, Dtype::BF16, t.shape, std::move(bytes));
      index["weight_map"][name] = shard_name(s, shards);
    }
    for (int s = 0; s < shards; ++s) files[size_t(s)].write(dir + "/" + shard_name(static_cast<size_t>(s), shards));
    if (shards > 1) write_file_atomic(dir + "/model.safetensors.index.json", index.dump(2));
    write_file_atomic(dir + "/config.json", config.dump(2));
    write_file_atomic(dir + "/tokenizer.json", tokenizer_json);
  }
  static std::string shard_name(size_t s, int shards) {
    if (shards == 1) return "model.safetensors";
    char b[64];
    std::snprintf(b, sizeof b, "model-%05zu-of-%05d.safetensors", s + 1, shards);
    return b;
  }
};

// ---- The oracle: HF's forward pass, plainly ----------------------------------------------

using Vec = std::vector<float>;

inline Vec matvec(const std::vector<float>& w, int64_t rows, int64_t cols, const float* x, int64_t row0 = 0) {
  Vec y(static_cast<size_t>(rows));
  for (int64_t r = 0; r < rows; ++r) {
    double s = 0;
    for (int64_t c = 0; c < cols; ++c) s += double(w[size_t((row0 + r) * cols + c)]) * x[c];
    y[size_t(r)] = float(s);
  }
  return y;
}

// RMSNorm as transformers computes it: x / sqrt(mean x^2 + eps) * (offset + w).
inline void rmsnorm(float* x, int64_t n, const float* w, double eps, float offset) {
  double ss = 0;
  for (int64_t i = 0; i < n; ++i) ss += double(x[i]) * x[i];
  const double inv = 1.0 / std::sqrt(ss / double(n) + eps);
  for (int64_t i = 0; i < n; ++i) x[i] = float(x[i] * inv * (offset + w[i]));
}

// rotate_half (Llama, Qwen, Gemma, OLMoE): pairs (i, i + d/2) rotate by pos * theta^(-2i/d);
// LongRoPE (Phi-3) divides frequency i by factor[i] and scales cos and sin by `magnitude`.
inline void rope_half(float* x, int d, int64_t pos, double theta, const double* factor = nullptr, double magnitude = 1.0) {
  for (int i = 0; i < d / 2; ++i) {
    const double a = double(pos) * std::pow(theta, -2.0 * i / d) / (factor ? factor[i] : 1.0);
    const double c = std::cos(a) * magnitude, s = std::sin(a) * magnitude;
    const double x1 = x[i], x2 = x[i + d / 2];
    x[i] = float(x1 * c - x2 * s), x[i + d / 2] = float(x2 * c + x1 * s);
  }
}

// DeepSeek: the interleaved pairs (2i, 2i + 1) rotate (transformers de-interleaves, then
// rotate_half; the dot products of q and k are those of the interleaved rotation).
inline void rope_interleaved(float* x, int d, int64_t pos, double theta) {
  for (int i = 0; i < d / 2; ++i) {
    const double a = double(pos) * std::pow(theta, -2.0 * i / d), c = std::cos(a), s = std::sin(a);
    const double x1 = x[2 * i], x2 = x[2 * i + 1];
    x[2 * i] = float(x1 * c - x2 * s), x[2 * i + 1] = float(x2 * c + x1 * s);
  }
}

inline float silu(float x) { return x / (1.0f + std::exp(-x)); }
inline float gelu_tanh(float x) {
  return 0.5f * x * (1.0f + std::tanh(0.7978845608028654f * (x + 0.044715f * x * x * x)));
}

// ---- The families' layouts and the oracle ------------------------------------------------

constexpr int kD = 256, kVocab = 260, kLayers = 2, kHeads = 4, kKvHeads = 2, kHeadDim = 16, kInter = 96;

inline std::string tokenizer_json() { return text::train_bpe({}, {.vocab_size = 257}).dump(); }

// ---- Checkpoints in each family's layout -----------------------------------------------

struct Layout {
  std::string type;
  bool moe = false, stacked_experts = false, fused_qkv = false;
};

inline void add_attention(HfModel& m, const std::string& p, const Layout& l) {
  const int q = kHeads * kHeadDim, kv = kKvHeads * kHeadDim;
  const bool bias = l.type == "qwen2";
  if (l.fused_qkv) {
    m.add(p + "qkv_proj.weight", {q + 2 * kv, kD}, 0.08f);
  } else {
    m.add(p + "q_proj.weight", {q, kD}, 0.08f);
    m.add(p + "k_proj.weight", {kv, kD}, 0.08f);
    m.add(p + "v_proj.weight", {kv, kD}, 0.08f);
  }
  if (bias) {
    m.add(p + "q_proj.bias", {q}, 0.05f), m.add(p + "k_proj.bias", {kv}, 0.05f), m.add(p + "v_proj.bias", {kv}, 0.05f);
  }
  m.add(p + "o_proj.weight", {kD, q}, 0.08f);
  const bool gemma = l.type.rfind("gemma", 0) == 0;
  if (l.type == "qwen3" || l.type == "qwen3_moe" || l.type == "gemma3_text" || l.type == "exaone4") {
    m.add(p + "q_norm.weight", {kHeadDim}, 0.1f, gemma ? 0.0f : 1.0f);
    m.add(p + "k_norm.weight", {kHeadDim}, 0.1f, gemma ? 0.0f : 1.0f);
  }
  if (l.type == "olmoe" || l.type.rfind("olmo", 0) == 0) {  // OLMoE, OLMo 2, Olmo 3: over all heads
    m.add(p + "q_norm.weight", {q}, 0.1f, 1.0f);
    m.add(p + "k_norm.weight", {kv}, 0.1f, 1.0f);
  }
}

inline void add_mlp(HfModel& m, const std::string& p, int hidden, const char* g = "gate_proj", const char* u = "up_proj",
             const char* dn = "down_proj") {
  m.add(p + g + ".weight", {hidden, kD}, 0.08f);
  m.add(p + u + ".weight", {hidden, kD}, 0.08f);
  m.add(p + dn + ".weight", {kD, hidden}, 0.08f);
}

constexpr int kExperts = 4, kTopK = 2, kExpertHidden = 32;

inline void add_experts(HfModel& m, const std::string& p, const Layout& l) {
  m.add(p + "gate.weight", {kExperts, kD}, 0.3f);
  if (l.stacked_experts) {
    m.add(p + "experts.gate_up_proj", {kExperts, 2 * kExpertHidden, kD}, 0.08f);
    m.add(p + "experts.down_proj", {kExperts, kD, kExpertHidden}, 0.08f);
    return;
  }
  for (int e = 0; e < kExperts; ++e) {
    const std::string q = p + "experts." + std::to_string(e) + ".";
    if (l.type == "mixtral") add_mlp(m, q, kExpertHidden, "w1", "w3", "w2");
    else add_mlp(m, q, kExpertHidden);
  }
}

inline HfModel make_dense_or_moe(const Layout& l) {
  HfModel m;
  const bool gemma = l.type.rfind("gemma", 0) == 0;
  m.config = {{"model_type", l.type}, {"hidden_size", kD}, {"vocab_size", kVocab}, {"max_position_embeddings", 64},
              {"num_hidden_layers", kLayers}, {"num_attention_heads", kHeads}, {"num_key_value_heads", kKvHeads},
              {"head_dim", kHeadDim}, {"intermediate_size", l.moe ? kExpertHidden : kInter},
              {"rms_norm_eps", 1e-5}, {"rope_theta", 500.0}, {"tie_word_embeddings", gemma}};
  if (l.moe) {
    m.config["num_experts_per_tok"] = kTopK;
    m.config[l.type == "mixtral" ? "num_local_experts" : "num_experts"] = kExperts;
    if (l.type == "qwen3_moe") m.config["moe_intermediate_size"] = kExpertHidden, m.config["norm_topk_prob"] = true;
  }
  if (l.type == "gemma2") {
    m.config["sliding_window"] = 3, m.config["query_pre_attn_scalar"] = 24;
    m.config["attn_logit_softcapping"] = 5.0, m.config["final_logit_softcapping"] = 3.0;
  }
  if (l.type == "gemma") m.config["hidden_act"] = "gelu", m.config["hidden_activation"] = "gelu_pytorch_tanh";
  if (l.type == "gemma3_text") {
    m.config["sliding_window"] = 3, m.config["sliding_window_pattern"] = 2, m.config["query_pre_attn_scalar"] = 24;
    m.config["rope_local_base_freq"] = 100.0;
  }
  m.add("model.embed_tokens.weight", {kVocab, kD}, gemma ? 0.1f : 1.0f);
  m.add("model.norm.weight", {kD}, 0.1f, gemma ? 0.0f : 1.0f);
  if (!gemma) m.add("lm_head.weight", {kVocab, kD}, 0.1f);
  for (int i = 0; i < kLayers; ++i) {
    const std::string p = "model.layers." + std::to_string(i) + ".";
    const float mean = gemma ? 0.0f : 1.0f;
    const bool post = l.type == "olmo2" || l.type == "olmo3" || l.type == "exaone4";
    if (!post) m.add(p + "input_layernorm.weight", {kD}, 0.1f, mean);
    m.add(p + "post_attention_layernorm.weight", {kD}, 0.1f, mean);
    if (gemma && l.type != "gemma") m.add(p + "pre_feedforward_layernorm.weight", {kD}, 0.1f, mean);  // Gemma 2 / 3: sandwich norms
    if ((gemma && l.type != "gemma") || post) m.add(p + "post_feedforward_layernorm.weight", {kD}, 0.1f, mean);
    add_attention(m, p + "self_attn.", l);
    if (!l.moe) add_mlp(m, p + "mlp.", kInter);
    else add_experts(m, p + (l.type == "mixtral" ? "block_sparse_moe." : "mlp."), l);
  }
  m.add("model.layers.0.self_attn.rotary_emb.inv_freq", {kHeadDim / 2}, 1.0f);  // an old checkpoint's buffer: left out
  return m;
}

// Phi-3 as Phi-4-mini has it: fused qkv_proj and gate_up_proj (gate rows first), 3/4 of each
// head rotated, LongRoPE (short factors while the sequence is within
// original_max_position_embeddings = 4, long ones past it; the factors are float values, as a
// GGUF stores them) and a sliding window of 5.
inline HfModel make_phi3() {
  HfModel m = make_dense_or_moe({.type = "phi3", .fused_qkv = true});
  for (int i = 0; i < kLayers; ++i) {
    const std::string p = "model.layers." + std::to_string(i) + ".mlp.";
    std::vector<float> fused = m.at(p + "gate_proj.weight");
    const std::vector<float>& up = m.at(p + "up_proj.weight");
    fused.insert(fused.end(), up.begin(), up.end());
    m.set(p + "gate_up_proj.weight", {2 * kInter, kD}, std::move(fused));
    m.tensors.erase(p + "gate_proj.weight"), m.tensors.erase(p + "up_proj.weight");
  }
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> shorter(1.0f, 2.0f), longer(2.0f, 40.0f);
  Json short_factor = Json::array(), long_factor = Json::array();
  for (int i = 0; i < kHeadDim * 3 / 8; ++i) short_factor.push_back(shorter(rng)), long_factor.push_back(longer(rng));
  m.config["partial_rotary_factor"] = 0.75;
  m.config["original_max_position_embeddings"] = 4;
  m.config["sliding_window"] = 5;
  m.config["rope_scaling"] = {{"type", "longrope"}, {"short_factor", short_factor}, {"long_factor", long_factor}};
  return m;
}

// Granite's multipliers over Llama's layers; Granite MoE (`moe`) with its experts stacked as
// input_linear / output_linear.
inline void set_granite_multipliers(HfModel& m) {
  m.config["embedding_multiplier"] = 3.0, m.config["attention_multiplier"] = 0.11;
  m.config["residual_multiplier"] = 0.4, m.config["logits_scaling"] = 2.5;
}
inline HfModel make_granite(bool moe) {
  HfModel m = make_dense_or_moe({.type = moe ? "granitemoe" : "granite"});
  set_granite_multipliers(m);
  if (!moe) return m;
  m.config["num_local_experts"] = kExperts, m.config["num_experts_per_tok"] = kTopK;
  m.config["intermediate_size"] = kExpertHidden;
  for (int i = 0; i < kLayers; ++i) {
    const std::string p = "model.layers." + std::to_string(i) + ".";
    for (const char* w : {"gate_proj", "up_proj", "down_proj"}) m.tensors.erase(p + "mlp." + w + ".weight");
    const std::string q = p + "block_sparse_moe.";
    m.add(q + "router.layer.weight", {kExperts, kD}, 0.3f);
    m.add(q + "input_linear.weight", {kExperts, 2 * kExpertHidden, kD}, 0.08f);
    m.add(q + "output_linear.weight", {kExperts, kD, kExpertHidden}, 0.08f);
  }
  return m;
}

// Granite 4 without Mamba layers or experts: the MLP as shared_mlp's fused input_linear (gate
// rows, then up rows) and output_linear; RoPE only with position_embedding_type "rope".
inline HfModel make_granite4(const char* position) {
  HfModel m = make_dense_or_moe({.type = "granitemoehybrid"});
  set_granite_multipliers(m);
  m.config["layer_types"] = {"attention", "attention"};
  m.config["num_local_experts"] = 0, m.config["shared_intermediate_size"] = kInter;
  m.config["position_embedding_type"] = position;
  for (int i = 0; i < kLayers; ++i) {
    const std::string p = "model.layers." + std::to_string(i) + ".";
    std::vector<float> fused = m.at(p + "mlp.gate_proj.weight");
    const std::vector<float>& up = m.at(p + "mlp.up_proj.weight");
    fused.insert(fused.end(), up.begin(), up.end());
    m.set(p + "shared_mlp.input_linear.weight", {2 * kInter, kD}, std::move(fused));
    m.set(p + "shared_mlp.output_linear.weight", {kD, kInter}, m.at(p + "mlp.down_proj.weight"));
    for (const char* w : {"gate_proj", "up_proj", "down_proj"}) m.tensors.erase(p + "mlp." + w + ".weight");
  }
  return m;
}

// Granite 4.0-H: layer 0 Mamba-2 (in_proj rows z, x, B, C, dt; conv1d over x, B, C with a
// bias; dt_bias, A_log, D; the gated norm's norm.weight; out_proj), layer 1 attention without
// positions; the shared MLP as make_granite4's. mamba_d_head "auto": 256 / 8 heads = 32.
// With `moe` (H tiny / H small), Granite MoE's routed experts beside the shared MLP in every layer.
constexpr int kMambaHeads = 8, kMambaState = 16, kMambaConv = 4;
inline HfModel make_granite4h(bool moe = false) {
  HfModel m = make_granite4("nope");
  if (moe) {
    m.config["num_local_experts"] = kExperts, m.config["num_experts_per_tok"] = kTopK;
    m.config["intermediate_size"] = kExpertHidden;
    for (int i = 0; i < kLayers; ++i) {
      const std::string q = "model.layers." + std::to_string(i) + ".block_sparse_moe.";
      m.add(q + "router.layer.weight", {kExperts, kD}, 0.3f);
      m.add(q + "input_linear.weight", {kExperts, 2 * kExpertHidden, kD}, 0.08f);
      m.add(q + "output_linear.weight", {kExperts, kD, kExpertHidden}, 0.08f);
    }
  }
  m.config["layer_types"] = {"mamba", "attention"};
  m.config["mamba_n_heads"] = kMambaHeads, m.config["mamba_d_head"] = "auto", m.config["mamba_expand"] = 1;
  m.config["mamba_d_state"] = kMambaState, m.config["mamba_n_groups"] = 1, m.config["mamba_d_conv"] = kMambaConv;
  m.config["mamba_conv_bias"] = true, m.config["mamba_proj_bias"] = false, m.config["mamba_chunk_size"] = 256;
  const std::string p = "model.layers.0.";
  for (const char* w : {"q_proj", "k_proj", "v_proj", "o_proj"}) m.tensors.erase(p + "self_attn." + w + ".weight");
  const int channels = kD + 2 * kMambaState;
  m.add(p + "mamba.in_proj.weight", {kD + channels + kMambaHeads, kD}, 0.08f);
  m.add(p + "mamba.conv1d.weight", {channels, 1, kMambaConv}, 0.5f);
  m.add(p + "mamba.conv1d.bias", {channels}, 0.2f);
  m.add(p + "mamba.dt_bias", {kMambaHeads}, 0.5f);
  m.add(p + "mamba.A_log", {kMambaHeads}, 0.5f);
  m.add(p + "mamba.D", {kMambaHeads}, 0.3f, 1.0f);
  m.add(p + "mamba.norm.weight", {kD}, 0.1f, 1.0f);
  m.add(p + "mamba.out_proj.weight", {kD, kD}, 0.08f);
  return m;
}

// DeepSeek-V2 with a query LoRA, MLA, one dense layer, then routed + shared experts.
constexpr int kLora = 24, kQLora = 32, kNope = 16, kRope = 8, kV = 16;
inline HfModel make_deepseek() {
  HfModel m;
  m.config = {{"model_type", "deepseek_v2"}, {"hidden_size", kD}, {"vocab_size", kVocab}, {"max_position_embeddings", 64},
              {"num_hidden_layers", kLayers}, {"num_attention_heads", kHeads}, {"q_lora_rank", kQLora},
              {"kv_lora_rank", kLora}, {"qk_nope_head_dim", kNope}, {"qk_rope_head_dim", kRope}, {"v_head_dim", kV},
              {"intermediate_size", kInter}, {"moe_intermediate_size", kExpertHidden}, {"n_routed_experts", kExperts},
              {"num_experts_per_tok", kTopK}, {"n_shared_experts", 1}, {"first_k_dense_replace", 1},
              {"rms_norm_eps", 1e-6}, {"rope_theta", 300.0}, {"norm_topk_prob", false}, {"topk_method", "greedy"}};
  m.add("model.embed_tokens.weight", {kVocab, kD}, 1.0f);
  m.add("model.norm.weight", {kD}, 0.1f, 1.0f);
  m.add("lm_head.weight", {kVocab, kD}, 0.1f);
  for (int i = 0; i < kLayers; ++i) {
    const std::string p = "model.layers." + std::to_string(i) + ".", a = p + "self_attn.";
    m.add(p + "input_layernorm.weight", {kD}, 0.1f, 1.0f);
    m.add(p + "post_attention_layernorm.weight", {kD}, 0.1f, 1.0f);
    m.add(a + "q_a_proj.weight", {kQLora, kD}, 0.1f);
    m.add(a + "q_a_layernorm.weight", {kQLora}, 0.1f, 1.0f);
    m.add(a + "q_b_proj.weight", {kHeads * (kNope + kRope), kQLora}, 0.1f);
    m.add(a + "kv_a_proj_with_mqa.weight", {kLora + kRope, kD}, 0.1f);
    m.add(a + "kv_a_layernorm.weight", {kLora}, 0.1f, 1.0f);
    m.add(a + "kv_b_proj.weight", {kHeads * (kNope + kV), kLora}, 0.1f);
    m.add(a + "o_proj.weight", {kD, kHeads * kV}, 0.08f);
    if (i == 0) {
      add_mlp(m, p + "mlp.", kInter);
    } else {
      add_experts(m, p + "mlp.", {.type = "deepseek_v2"});
      add_mlp(m, p + "mlp.shared_experts.", kExpertHidden);
    }
  }
  return m;
}

// Qwen3.5 (`qwen3_5`: the text model in text_config, tensors under model.language_model., a
// vision tower and an MTP block beside it), Qwen3.5-MoE (`qwen3_5_moe`) and Qwen3-Next
// (`qwen3_next`: in_proj_qkvz / in_proj_ba fused per key head): layer 0 Gated DeltaNet with two
// key heads and four value heads, layer 1 full attention whose q_proj holds, per head, the
// query then its gate; half of each head rotated; norm gains zero-centred (1 + w) but the
// DeltaNet's output norm (plain w).
constexpr int kGdnKeyHeads = 2, kGdnValueHeads = 4, kGdnDim = 8, kGdnConv = 4, kSharedHidden = 24;
inline HfModel make_qwen_hybrid(const std::string& type) {
  HfModel m;
  const bool wrapped = type != "qwen3_next", moe = type != "qwen3_5";
  Json text = {{"model_type", wrapped ? type + "_text" : type}, {"hidden_size", kD}, {"vocab_size", kVocab},
               {"max_position_embeddings", 64}, {"num_hidden_layers", kLayers}, {"num_attention_heads", kHeads},
               {"num_key_value_heads", kKvHeads}, {"head_dim", kHeadDim}, {"intermediate_size", kInter},
               {"rms_norm_eps", 1e-6}, {"layer_types", {"linear_attention", "full_attention"}},
               {"linear_num_key_heads", kGdnKeyHeads}, {"linear_num_value_heads", kGdnValueHeads},
               {"linear_key_head_dim", kGdnDim}, {"linear_value_head_dim", kGdnDim}, {"linear_conv_kernel_dim", kGdnConv},
               {"mtp_num_hidden_layers", 1}};
  if (wrapped) {
    text["rope_parameters"] = {{"rope_type", "default"}, {"rope_theta", 500.0}, {"partial_rotary_factor", 0.5},
                               {"mrope_section", {2, 1, 1}}, {"mrope_interleaved", true}};
    text["attn_output_gate"] = true;
  } else {
    text["rope_theta"] = 500.0, text["partial_rotary_factor"] = 0.5;
  }
  if (moe) {
    text["num_experts"] = kExperts, text["num_experts_per_tok"] = kTopK, text["moe_intermediate_size"] = kExpertHidden;
    text["shared_expert_intermediate_size"] = kSharedHidden, text["norm_topk_prob"] = true;
  }
  m.config = wrapped ? Json{{"model_type", type}, {"tie_word_embeddings", false}, {"text_config", text},
                            {"vision_config", {{"depth", 1}}}}
                     : text;
  const std::string P = wrapped ? "model.language_model." : "model.";
  m.add(P + "embed_tokens.weight", {kVocab, kD}, 1.0f);
  m.add(P + "norm.weight", {kD}, 0.1f);
  m.add("lm_head.weight", {kVocab, kD}, 0.1f);
  const int key = kGdnKeyHeads * kGdnDim, value = kGdnValueHeads * kGdnDim, r = kGdnValueHeads / kGdnKeyHeads;
  for (int i = 0; i < kLayers; ++i) {
    const std::string p = P + "layers." + std::to_string(i) + ".";
    m.add(p + "input_layernorm.weight", {kD}, 0.1f);
    m.add(p + "post_attention_layernorm.weight", {kD}, 0.1f);
    if (i == 0) {
      const std::string a = p + "linear_attn.";
      if (wrapped) {
        m.add(a + "in_proj_qkv.weight", {2 * key + value, kD}, 0.1f);
        m.add(a + "in_proj_z.weight", {value, kD}, 0.1f);
        m.add(a + "in_proj_b.weight", {kGdnValueHeads, kD}, 0.1f);
        m.add(a + "in_proj_a.weight", {kGdnValueHeads, kD}, 0.1f);
      } else {
        m.add(a + "in_proj_qkvz.weight", {2 * key + 2 * value, kD}, 0.1f);
        m.add(a + "in_proj_ba.weight", {2 * kGdnValueHeads, kD}, 0.1f);
      }
      m.add(a + "conv1d.weight", {2 * key + value, 1, kGdnConv}, 0.4f);
      std::vector<float> a_log(kGdnValueHeads);
      for (int h = 0; h < kGdnValueHeads; ++h) a_log[size_t(h)] = kernels::bf16_to_f32(kernels::f32_to_bf16(std::log(1.5f + 3.0f * h)));
      m.set(a + "A_log", {kGdnValueHeads}, a_log);
      m.add(a + "dt_bias", {kGdnValueHeads}, 0.5f, 1.0f);
      m.add(a + "norm.weight", {kGdnDim}, 0.1f, 1.0f);
      m.add(a + "out_proj.weight", {kD, value}, 0.1f);
    } else {
      const std::string a = p + "self_attn.";
      m.add(a + "q_proj.weight", {2 * kHeads * kHeadDim, kD}, 0.08f);
      m.add(a + "k_proj.weight", {kKvHeads * kHeadDim, kD}, 0.08f);
      m.add(a + "v_proj.weight", {kKvHeads * kHeadDim, kD}, 0.08f);
      m.add(a + "o_proj.weight", {kD, kHeads * kHeadDim}, 0.08f);
      m.add(a + "q_norm.weight", {kHeadDim}, 0.1f);
      m.add(a + "k_norm.weight", {kHeadDim}, 0.1f);
    }
    if (!moe) {
      add_mlp(m, p + "mlp.", kInter);
    } else {
      add_experts(m, p + "mlp.", {.type = type});
      add_mlp(m, p + "mlp.shared_expert.", kSharedHidden);
      m.add(p + "mlp.shared_expert_gate.weight", {1, kD}, 0.3f);
    }
  }
  (void)r;
  m.add("mtp.fc.weight", {kD, 2 * kD}, 0.1f);  // multi-token prediction: left out
  if (wrapped) m.add("model.visual.patch_embed.proj.weight", {8, 3}, 0.1f);  // the vision tower: left out
  return m;
}

// LFM2: layer 0 a gated short convolution (in_proj rows B, C, x; conv taps [d, 1, 3];
// out_proj), layer 1 GQA attention with QK-norm per head (out_proj, q_layernorm, k_layernorm);
// SwiGLU MLPs as feed_forward.w1 / w3 / w2 of block_ff_dim 144 adjusted to 96 (2/3, times 1,
// rounded to 32); the final norm is model.embedding_norm; tied embeddings.
constexpr int kConvTaps = 3;
inline HfModel make_lfm2() {
  HfModel m;
  m.config = {{"model_type", "lfm2"}, {"hidden_size", kD}, {"vocab_size", kVocab}, {"max_position_embeddings", 64},
              {"num_hidden_layers", kLayers}, {"num_attention_heads", kHeads}, {"num_key_value_heads", kKvHeads},
              {"block_ff_dim", 144}, {"intermediate_size", 144}, {"block_auto_adjust_ff_dim", true},
              {"block_ffn_dim_multiplier", 1.0}, {"block_multiple_of", 32}, {"norm_eps", 1e-5}, {"rope_theta", 500.0},
              {"conv_L_cache", kConvTaps}, {"conv_bias", false}, {"tie_embedding", true},
              {"layer_types", {"conv", "full_attention"}}, {"head_dim", kHeadDim}};
  m.add("model.embed_tokens.weight", {kVocab, kD}, 1.0f);
  m.add("model.embedding_norm.weight", {kD}, 0.1f, 1.0f);
  const int head = kHeadDim;
  for (int i = 0; i < kLayers; ++i) {
    const std::string p = "model.layers." + std::to_string(i) + ".";
    m.add(p + "operator_norm.weight", {kD}, 0.1f, 1.0f);
    m.add(p + "ffn_norm.weight", {kD}, 0.1f, 1.0f);
    if (i == 0) {
      m.add(p + "conv.in_proj.weight", {3 * kD, kD}, 0.08f);
      m.add(p + "conv.conv.weight", {kD, 1, kConvTaps}, 0.5f);
      m.add(p + "conv.out_proj.weight", {kD, kD}, 0.08f);
    } else {
      m.add(p + "self_attn.q_proj.weight", {kHeads * head, kD}, 0.08f);
      m.add(p + "self_attn.k_proj.weight", {kKvHeads * head, kD}, 0.08f);
      m.add(p + "self_attn.v_proj.weight", {kKvHeads * head, kD}, 0.08f);
      m.add(p + "self_attn.out_proj.weight", {kD, kHeads * head}, 0.08f);
      m.add(p + "self_attn.q_layernorm.weight", {head}, 0.1f, 1.0f);
      m.add(p + "self_attn.k_layernorm.weight", {head}, 0.1f, 1.0f);
    }
    add_mlp(m, p + "feed_forward.", kInter, "w1", "w3", "w2");
  }
  return m;
}

// LFM2-MoE: LFM2's layers; layer 0 keeps a dense MLP (num_dense_layers 1), layer 1 routes:
// sigmoid scores, top-2 chosen by score + expert_bias, renormalised and scaled by 2.5; the
// experts as feed_forward.experts.{e}.w1 / w3 / w2.
inline HfModel make_lfm2_moe() {
  HfModel m = make_lfm2();
  m.config["model_type"] = "lfm2_moe";
  for (const char* k : {"block_ff_dim", "block_auto_adjust_ff_dim", "block_ffn_dim_multiplier", "block_multiple_of"}) m.config.erase(k);
  m.config["intermediate_size"] = kInter, m.config["num_dense_layers"] = 1, m.config["num_experts"] = kExperts;
  m.config["num_experts_per_tok"] = kTopK, m.config["moe_intermediate_size"] = kExpertHidden;
  m.config["use_expert_bias"] = true, m.config["routed_scaling_factor"] = 2.5, m.config["norm_topk_prob"] = true;
  const std::string p = "model.layers.1.feed_forward.";
  for (const char* w : {"w1", "w2", "w3"}) m.tensors.erase(p + w + ".weight");
  m.add(p + "gate.weight", {kExperts, kD}, 0.3f);
  m.add(p + "expert_bias", {kExperts}, 0.2f);
  for (int e = 0; e < kExperts; ++e) add_mlp(m, p + "experts." + std::to_string(e) + ".", kExpertHidden, "w1", "w3", "w2");
  return m;
}

// ---- The oracle ----------------------------------------------------------------------------

class HfOracle {
 public:
  explicit HfOracle(const HfModel& m)
      : m_(m), c_(m.config.contains("text_config") ? m.config["text_config"] : m.config), type_(c_["model_type"].get<std::string>()) {
    if (m.config.contains("text_config")) prefix_ = "model.language_model.";
    hybrid_ = type_ == "qwen3_next" || type_.rfind("qwen3_5", 0) == 0;
    lfm2_ = type_.rfind("lfm2", 0) == 0;
    gemma_ = type_.rfind("gemma", 0) == 0;
    sandwich_ = gemma_ && type_ != "gemma";
    post_ = type_ == "olmo2" || type_ == "olmo3" || type_ == "exaone4";
    eps_ = c_.value("rms_norm_eps", 1e-6);
    keys_.resize(kLayers), values_.resize(kLayers), conv_.resize(kLayers), state_.resize(kLayers);
  }

  Vec step(int token) {
    const std::vector<float>& embed = m_.at(prefix_ + "embed_tokens.weight");
    Vec h(embed.begin() + int64_t(token) * kD, embed.begin() + int64_t(token + 1) * kD);
    if (gemma_)
      for (float& x : h) x *= std::sqrt(float(kD));
    for (float& x : h) x *= c_.value("embedding_multiplier", 1.0f);  // Granite
    for (int i = 0; i < kLayers; ++i) layer(i, h);
    norm(h.data(), kD, prefix_ + (lfm2_ ? "embedding_norm.weight" : "norm.weight"));
    const std::string head = m_.has("lm_head.weight") ? "lm_head.weight" : prefix_ + "embed_tokens.weight";
    Vec logits = matvec(m_.at(head), kVocab, kD, h.data());
    for (float& x : logits) x /= c_.value("logits_scaling", 1.0f);  // Granite
    if (c_.contains("final_logit_softcapping")) {
      const float cap = c_["final_logit_softcapping"].get<float>();
      for (float& x : logits) x = cap * std::tanh(x / cap);
    }
    ++pos_;
    return logits;
  }

 private:
  void norm(float* x, int64_t n, const std::string& w) { rmsnorm(x, n, m_.at(w).data(), eps_, gemma_ || hybrid_ ? 1.0f : 0.0f); }
  Vec proj(const std::string& w, int64_t rows, int64_t cols, const Vec& x) {
    Vec y = matvec(m_.at(w + ".weight"), rows, cols, x.data());
    if (m_.has(w + ".bias"))
      for (int64_t r = 0; r < rows; ++r) y[size_t(r)] += m_.at(w + ".bias")[size_t(r)];
    return y;
  }

  void layer(int i, Vec& h) {
    const std::string p = prefix_ + "layers." + std::to_string(i) + ".";
    // OLMo 2 / Olmo 3 (post_): the sublayers read h itself, their outputs are normalised.
    Vec x = h;
    if (!post_) norm(x.data(), kD, p + (lfm2_ ? "operator_norm.weight" : "input_layernorm.weight"));
    Vec a = type_.rfind("deepseek", 0) == 0                          ? mla(i, p + "self_attn.", x)
            : hybrid_ && c_["layer_types"][i] == "linear_attention" ? gated_deltanet(i, p + "linear_attn.", x)
            : lfm2_ && c_["layer_types"][i] == "conv"               ? short_conv(i, p + "conv.", x)
            : type_ == "granitemoehybrid" && c_["layer_types"][i] == "mamba" ? mamba2(i, p + "mamba.", x)
                                                                    : attention(i, p + "self_attn.", x);
    if (sandwich_ || post_) norm(a.data(), kD, p + "post_attention_layernorm.weight");
    const float residual = c_.value("residual_multiplier", 1.0f);  // Granite
    for (int k = 0; k < kD; ++k) h[k] += a[k] * residual;
    x = h;
    if (!post_)
      norm(x.data(), kD, p + (lfm2_ ? "ffn_norm.weight" : sandwich_ ? "pre_feedforward_layernorm.weight" : "post_attention_layernorm.weight"));
    Vec f = ffn(i, p, x);
    if (sandwich_ || post_) norm(f.data(), kD, p + "post_feedforward_layernorm.weight");
    for (int k = 0; k < kD; ++k) h[k] += f[k] * residual;
  }

  // Attention over the cached positions with HF's per-family details.
  Vec attention(int i, const std::string& p, const Vec& x) {
    const int q = kHeads * kHeadDim, kv = kKvHeads * kHeadDim;
    Vec qv, kvec, vv;
    if (m_.has(p + "qkv_proj.weight")) {
      const auto& w = m_.at(p + "qkv_proj.weight");
      qv = matvec(w, q, kD, x.data(), 0), kvec = matvec(w, kv, kD, x.data(), q);
      vv = matvec(w, kv, kD, x.data(), q + kv);
    } else {
      qv = proj(p + "q_proj", q, kD, x), kvec = proj(p + "k_proj", kv, kD, x), vv = proj(p + "v_proj", kv, kD, x);
    }
    Vec gate;
    if (hybrid_) {  // Qwen3-Next / Qwen3.5: q_proj gives, per head, the query and then a gate
      const Vec both = proj(p + "q_proj", 2 * q, kD, x);
      qv.assign(size_t(q), 0.0f), gate.assign(size_t(q), 0.0f);
      for (int hd = 0; hd < kHeads; ++hd)
        for (int e = 0; e < kHeadDim; ++e)
          qv[size_t(hd * kHeadDim + e)] = both[size_t(2 * hd * kHeadDim + e)],
          gate[size_t(hd * kHeadDim + e)] = both[size_t((2 * hd + 1) * kHeadDim + e)];
    }
    const bool olmo = type_.rfind("olmo", 0) == 0;  // OLMoE, OLMo 2, Olmo 3: RMSNorm over all heads
    if (olmo) norm(qv.data(), q, p + "q_norm.weight"), norm(kvec.data(), kv, p + "k_norm.weight");
    const char* qn = lfm2_ ? "q_layernorm.weight" : "q_norm.weight";  // LFM2's names
    const char* kn = lfm2_ ? "k_layernorm.weight" : "k_norm.weight";
    if (m_.has(p + qn) && !olmo) {
      for (int hd = 0; hd < kHeads; ++hd) norm(qv.data() + hd * kHeadDim, kHeadDim, p + qn);
      for (int hd = 0; hd < kKvHeads; ++hd) norm(kvec.data() + hd * kHeadDim, kHeadDim, p + kn);
    }
    const bool sliding = (type_ == "gemma2" && i % 2 == 0) || (type_ == "gemma3_text" && (i + 1) % 2 != 0) ||
                         (type_ == "phi3" && c_.contains("sliding_window")) ||
                         ((type_ == "olmo3" || type_ == "exaone4") && c_["layer_types"][i] == "sliding_attention");
    const double theta = type_ == "gemma3_text" && sliding ? 100.0 : rope_field("rope_theta", 10000.0);
    // SmolLM3's marked layers; EXAONE 4's full layers when it has windows ("global NoPE").
    // Granite 4: position_embedding_type "nope".
    const bool nope = (c_.contains("no_rope_layers") && c_["no_rope_layers"][i].get<int>() == 0) ||
                      (type_ == "exaone4" && c_.contains("sliding_window") && !sliding) ||
                      c_.value("position_embedding_type", "rope") == "nope";
    // Olmo 3's sliding layers rotate with rope_type "default": no scaling.
    const bool scaled = !(type_ == "olmo3" && sliding);
    for (int hd = 0; hd < kHeads && !nope; ++hd) rotate(qv.data() + hd * kHeadDim, theta, scaled);
    for (int hd = 0; hd < kKvHeads && !nope; ++hd) rotate(kvec.data() + hd * kHeadDim, theta, scaled);
    keys_[i].push_back(kvec), values_[i].push_back(vv);
    const double scale = c_.value("attention_multiplier", 1.0 / std::sqrt(c_.value("query_pre_attn_scalar", double(kHeadDim))));
    const int window = sliding ? c_["sliding_window"].get<int>() : 1 << 30;
    Vec o(static_cast<size_t>(q));
    for (int hd = 0; hd < kHeads; ++hd) {
      const int g = hd / (kHeads / kKvHeads);
      std::vector<double> s;
      for (int64_t j = 0; j <= pos_; ++j) {
        double dot = 0;
        for (int e = 0; e < kHeadDim; ++e) dot += double(qv[hd * kHeadDim + e]) * keys_[i][j][g * kHeadDim + e];
        dot *= scale;
        if (c_.contains("attn_logit_softcapping")) {
          const double cap = c_["attn_logit_softcapping"].get<double>();
          dot = cap * std::tanh(dot / cap);
        }
        s.push_back(pos_ - j < window ? dot : -INFINITY);
      }
      mix(s, values_[i], g * kHeadDim, kHeadDim, o.data() + hd * kHeadDim);
    }
    for (size_t e = 0; e < gate.size(); ++e) o[e] *= 1.0f / (1.0f + std::exp(-gate[e]));
    return proj(p + (lfm2_ ? "out_proj" : "o_proj"), kD, q, o);
  }

  // The first partial_rotary_factor x head_dim values rotate. LongRoPE as transformers'
  // _compute_longrope_parameters and its dynamic update: the long factors once the sequence
  // (pos + 1) is longer than original_max_position_embeddings L, and cos and sin scaled by
  // sqrt(1 + ln s / ln L), s = max_position_embeddings / L.
  // Linear scaling ("rope_type": "linear") divides every frequency by its factor.
  void rotate(float* x, double theta, bool scaled = true) const {
    const int r = int(std::lround(rope_field("partial_rotary_factor", 1.0) * kHeadDim));
    if (scaled && c_.contains("rope_scaling") && c_["rope_scaling"].value("rope_type", "") == "linear") {
      const std::vector<double> factor(size_t(r / 2), c_["rope_scaling"]["factor"].get<double>());
      return rope_half(x, r, pos_, theta, factor.data());
    }
    if (!scaled || !c_.contains("rope_scaling") || c_["rope_scaling"].value("type", "") != "longrope") return rope_half(x, r, pos_, theta);
    const Json& sc = c_["rope_scaling"];
    const double L = c_["original_max_position_embeddings"].get<double>(), s = c_["max_position_embeddings"].get<double>() / L;
    const std::vector<double> factor = sc[pos_ + 1 > L ? "long_factor" : "short_factor"].get<std::vector<double>>();
    rope_half(x, r, pos_, theta, factor.data(), s > 1 ? std::sqrt(1 + std::log(s) / std::log(L)) : 1.0);
  }

  // A RoPE field at the top of the config or, as transformers 5 writes it, in rope_parameters.
  double rope_field(const char* key, double fallback) const {
    if (c_.contains("rope_parameters") && c_["rope_parameters"].contains(key)) return c_["rope_parameters"][key].get<double>();
    return c_.value(key, fallback);
  }

  // Layer i's depthwise causal conv (PyTorch Conv1d, padding K - 1, cut to the sequence) after
  // `x` joins its inputs: y[ch] = sum_j w[ch][j] x_{t-(K-1)+j}[ch], zeros before the first token.
  Vec causal_conv(int i, const Vec& x, const std::vector<float>& w, int K) {
    std::vector<Vec>& past = conv_[i];
    past.push_back(x);
    Vec y(x.size());
    for (size_t ch = 0; ch < x.size(); ++ch) {
      double acc = 0;
      for (int j = 0; j < K; ++j) {
        const int64_t t = int64_t(past.size()) - K + j;
        if (t >= 0) acc += double(w[ch * size_t(K) + size_t(j)]) * past[size_t(t)][ch];
      }
      y[ch] = float(acc);
    }
    return y;
  }

  // Gated DeltaNet as transformers' Qwen3NextGatedDeltaNet / Qwen3_5GatedDeltaNet with its torch
  // recurrence (torch_recurrent_gated_delta_rule): a causal depthwise conv and SiLU over [q, k, v],
  // q and k L2-normalised (eps 1e-6), q scaled by 1 / sqrt(d_k); per value head h, reading key
  // head h / r: S <- e^g S, S <- S + k ((v - S^T k) beta)^T, o = S^T q; then
  // RMSNorm(o) w silu(z) per head and out_proj. Qwen3-Next's fused projections are read through
  // its fix_query_key_value_ordering (per key head: q, k, r v heads, r z heads; r b's, r a's).
  Vec gated_deltanet(int i, const std::string& p, const Vec& x) {
    const int hk = kGdnKeyHeads, hv = kGdnValueHeads, dk = kGdnDim, dv = kGdnDim, K = kGdnConv, r = hv / hk;
    const int key = hk * dk, value = hv * dv, channels = 2 * key + value;
    Vec mixed(static_cast<size_t>(channels)), z(static_cast<size_t>(value)), b(static_cast<size_t>(hv)), a(static_cast<size_t>(hv));
    if (m_.has(p + "in_proj_qkv.weight")) {
      mixed = proj(p + "in_proj_qkv", channels, kD, x), z = proj(p + "in_proj_z", value, kD, x);
      b = proj(p + "in_proj_b", hv, kD, x), a = proj(p + "in_proj_a", hv, kD, x);
    } else {
      const Vec qkvz = proj(p + "in_proj_qkvz", 2 * key + 2 * value, kD, x), ba = proj(p + "in_proj_ba", 2 * hv, kD, x);
      const int group = 2 * dk + 2 * r * dv;
      for (int g = 0; g < hk; ++g) {
        for (int e = 0; e < dk; ++e)
          mixed[size_t(g * dk + e)] = qkvz[size_t(g * group + e)], mixed[size_t(key + g * dk + e)] = qkvz[size_t(g * group + dk + e)];
        for (int e = 0; e < r * dv; ++e)
          mixed[size_t(2 * key + g * r * dv + e)] = qkvz[size_t(g * group + 2 * dk + e)],
          z[size_t(g * r * dv + e)] = qkvz[size_t(g * group + 2 * dk + r * dv + e)];
        for (int e = 0; e < r; ++e) b[size_t(g * r + e)] = ba[size_t(g * 2 * r + e)], a[size_t(g * r + e)] = ba[size_t(g * 2 * r + r + e)];
      }
    }
    Vec c = causal_conv(i, mixed, m_.at(p + "conv1d.weight"), K);
    for (float& v : c) v = silu(v);
    auto l2 = [](float* v, int n) {
      double ss = 0;
      for (int e = 0; e < n; ++e) ss += double(v[e]) * v[e];
      const double inv = 1.0 / std::sqrt(ss + 1e-6);
      for (int e = 0; e < n; ++e) v[e] = float(v[e] * inv);
    };
    for (int g = 0; g < hk; ++g) l2(c.data() + g * dk, dk), l2(c.data() + key + g * dk, dk);
    std::vector<double>& S = state_[i];
    S.resize(size_t(hv * dk * dv), 0.0);
    Vec o(static_cast<size_t>(value));
    for (int h = 0; h < hv; ++h) {
      const float* qh = c.data() + (h / r) * dk;
      const float* kh = c.data() + key + (h / r) * dk;
      const float* vh = c.data() + 2 * key + h * dv;
      const double A = std::exp(double(m_.at(p + "A_log")[size_t(h)]));
      const double pre = double(a[size_t(h)]) + m_.at(p + "dt_bias")[size_t(h)];
      const double g = -A * (pre > 20 ? pre : std::log1p(std::exp(pre))), beta = 1.0 / (1.0 + std::exp(-double(b[size_t(h)])));
      double* s = S.data() + h * dk * dv;
      for (int e = 0; e < dk * dv; ++e) s[e] *= std::exp(g);
      for (int f = 0; f < dv; ++f) {
        double mem = 0;
        for (int e = 0; e < dk; ++e) mem += s[e * dv + f] * kh[e];
        const double delta = (vh[f] - mem) * beta;
        for (int e = 0; e < dk; ++e) s[e * dv + f] += kh[e] * delta;
      }
      for (int f = 0; f < dv; ++f) {
        double acc = 0;
        for (int e = 0; e < dk; ++e) acc += s[e * dv + f] * qh[e] / std::sqrt(double(dk));
        o[size_t(h * dv + f)] = float(acc);
      }
      rmsnorm(o.data() + h * dv, dv, m_.at(p + "norm.weight").data(), eps_, 0.0f);
      for (int f = 0; f < dv; ++f) o[size_t(h * dv + f)] *= silu(z[size_t(h * dv + f)]);
    }
    return proj(p + "out_proj", kD, value, o);
  }

  // LFM2's Lfm2ShortConv (slow_forward): [B, C, x] = in_proj x, chunked by rows; the conv of
  // kernel K with padding K - 1, cut to the sequence (causal), over B * x; out_proj(C * conv).
  Vec short_conv(int i, const std::string& p, const Vec& x) {
    const Vec bcx = proj(p + "in_proj", 3 * kD, kD, x);
    Vec bx(static_cast<size_t>(kD));
    for (int ch = 0; ch < kD; ++ch) bx[size_t(ch)] = bcx[size_t(ch)] * bcx[size_t(2 * kD + ch)];
    Vec y = causal_conv(i, bx, m_.at(p + "conv.weight"), kConvTaps);
    for (int ch = 0; ch < kD; ++ch) y[size_t(ch)] *= bcx[size_t(kD + ch)];
    return proj(p + "out_proj", kD, kD, y);
  }

  // Granite 4.0-H's Mamba-2 as transformers' GraniteMoeHybridMambaLayer.torch_forward steps it
  // with a cache: [z, xBC, dt] = in_proj x; xBC = SiLU(conv1d(xBC) + bias); dt = softplus(dt +
  // dt_bias); per head S = exp(dt A) S + dt x B^T, y = S C + D x (A = -exp(A_log)); then the
  // gated RMSNorm over all channels, norm(y * SiLU(z)) * w, and out_proj.
  Vec mamba2(int i, const std::string& p, const Vec& x) {
    const int H = kMambaHeads, N = kMambaState, inner = kD, P = inner / H, channels = inner + 2 * N;
    const Vec zxbcdt = matvec(m_.at(p + "in_proj.weight"), inner + channels + H, kD, x.data());
    const Vec xbc(zxbcdt.begin() + inner, zxbcdt.begin() + inner + channels);
    Vec c = causal_conv(i, xbc, m_.at(p + "conv1d.weight"), kMambaConv);
    for (int ch = 0; ch < channels; ++ch) c[size_t(ch)] = silu(c[size_t(ch)] + m_.at(p + "conv1d.bias")[size_t(ch)]);
    std::vector<double>& S = state_[size_t(i)];
    S.resize(size_t(H * P * N), 0.0);
    Vec y(static_cast<size_t>(inner));
    for (int h = 0; h < H; ++h) {
      const double dt = std::log1p(std::exp(double(zxbcdt[size_t(inner + channels + h)]) + m_.at(p + "dt_bias")[size_t(h)]));
      const double decay = std::exp(dt * -std::exp(double(m_.at(p + "A_log")[size_t(h)])));
      for (int q = 0; q < P; ++q) {
        const double xv = c[size_t(h * P + q)];
        double acc = 0;
        for (int n = 0; n < N; ++n) {
          double& s = S[size_t((h * P + q) * N + n)];
          s = decay * s + dt * xv * c[size_t(inner + n)];
          acc += s * c[size_t(inner + N + n)];
        }
        y[size_t(h * P + q)] = float(acc + m_.at(p + "D")[size_t(h)] * xv);
      }
    }
    for (int k = 0; k < inner; ++k) y[size_t(k)] *= silu(zxbcdt[size_t(k)]);
    rmsnorm(y.data(), inner, m_.at(p + "norm.weight").data(), eps_, 0.0f);
    return proj(p + "out_proj", kD, inner, y);
  }

  // softmax(s) . V (columns [off, off + n) of each cached value).
  static void mix(std::vector<double>& s, const std::vector<Vec>& v, int off, int n, float* out) {
    double mx = -INFINITY, sum = 0;
    for (double x : s) mx = std::max(mx, x);
    for (double& x : s) sum += (x = std::exp(x - mx));
    for (int e = 0; e < n; ++e) {
      double acc = 0;
      for (size_t j = 0; j < s.size(); ++j) acc += s[j] / sum * v[j][size_t(off + e)];
      out[e] = float(acc);
    }
  }

  // DeepSeek MLA as transformers runs it (no absorption): k = [k_nope, rope(k_pe)], per head.
  Vec mla(int i, const std::string& p, const Vec& x) {
    Vec qv;
    if (m_.has(p + "q_proj.weight")) {
      qv = proj(p + "q_proj", kHeads * (kNope + kRope), kD, x);
    } else {
      Vec qa = proj(p + "q_a_proj", kQLora, kD, x);
      norm(qa.data(), kQLora, p + "q_a_layernorm.weight");
      qv = proj(p + "q_b_proj", kHeads * (kNope + kRope), kQLora, qa);
    }
    Vec ckv = proj(p + "kv_a_proj_with_mqa", kLora + kRope, kD, x);
    norm(ckv.data(), kLora, p + "kv_a_layernorm.weight");
    const double theta = c_["rope_theta"].get<double>();
    rope_interleaved(ckv.data() + kLora, kRope, pos_, theta);
    for (int hd = 0; hd < kHeads; ++hd) rope_interleaved(qv.data() + hd * (kNope + kRope) + kNope, kRope, pos_, theta);
    Vec kv = matvec(m_.at(p + "kv_b_proj.weight"), kHeads * (kNope + kV), kLora, ckv.data());
    // Cache per head [k_nope, k_pe, v] so that mix() can read v.
    Vec key(static_cast<size_t>(kHeads * (kNope + kRope))), val(static_cast<size_t>(kHeads * kV));
    for (int hd = 0; hd < kHeads; ++hd) {
      for (int e = 0; e < kNope; ++e) key[hd * (kNope + kRope) + e] = kv[hd * (kNope + kV) + e];
      for (int e = 0; e < kRope; ++e) key[hd * (kNope + kRope) + kNope + e] = ckv[kLora + e];
      for (int e = 0; e < kV; ++e) val[hd * kV + e] = kv[hd * (kNope + kV) + kNope + e];
    }
    keys_[i].push_back(key), values_[i].push_back(val);
    Vec o(static_cast<size_t>(kHeads * kV));
    for (int hd = 0; hd < kHeads; ++hd) {
      std::vector<double> s;
      for (int64_t j = 0; j <= pos_; ++j) {
        double dot = 0;
        for (int e = 0; e < kNope + kRope; ++e) dot += double(qv[hd * (kNope + kRope) + e]) * keys_[i][j][hd * (kNope + kRope) + e];
        s.push_back(dot / std::sqrt(double(kNope + kRope)));
      }
      mix(s, values_[i], hd * kV, kV, o.data() + hd * kV);
    }
    return proj(p + "o_proj", kD, kHeads * kV, o);
  }

  Vec mlp(const std::vector<float>& g, const std::vector<float>& u, const std::vector<float>& dn, int hidden,
          const Vec& x, int64_t row0 = 0, int64_t up_row0 = 0) {
    Vec a = matvec(g, hidden, kD, x.data(), row0), b = matvec(u, hidden, kD, x.data(), up_row0);
    for (int k = 0; k < hidden; ++k) a[k] = (gemma_ ? gelu_tanh(a[k]) : silu(a[k])) * b[k];
    return matvec(dn, kD, hidden, a.data());
  }
  Vec named_mlp(const std::string& q, int hidden, const Vec& x, const char* g = "gate_proj", const char* u = "up_proj",
                const char* dn = "down_proj") {
    return mlp(m_.at(q + g + ".weight"), m_.at(q + u + ".weight"), m_.at(q + dn + ".weight"), hidden, x);
  }

  Vec ffn(int i, const std::string& p, const Vec& x) {
    const std::string q = p + (type_ == "mixtral" ? "block_sparse_moe." : "mlp.");
    const int hidden = c_.value("intermediate_size", kInter);
    if (m_.has(q + "gate_up_proj.weight"))
      return mlp(m_.at(q + "gate_up_proj.weight"), m_.at(q + "gate_up_proj.weight"), m_.at(q + "down_proj.weight"), hidden, x, 0, hidden);
    if (type_ == "granitemoe") return granite_moe(p + "block_sparse_moe.", x);
    if (m_.has(p + "shared_mlp.input_linear.weight")) {  // Granite 4: the shared MLP, plus routed experts where present
      const auto& in = m_.at(p + "shared_mlp.input_linear.weight");
      const int shared = c_.value("shared_intermediate_size", hidden);
      Vec y = mlp(in, in, m_.at(p + "shared_mlp.output_linear.weight"), shared, x, 0, shared);
      if (m_.has(p + "block_sparse_moe.router.layer.weight")) {
        const Vec routed = granite_moe(p + "block_sparse_moe.", x);
        for (int k = 0; k < kD; ++k) y[size_t(k)] += routed[size_t(k)];
      }
      return y;
    }
    if (lfm2_ && m_.has(p + "feed_forward.gate.weight")) return lfm2_moe(p + "feed_forward.", x);
    if (lfm2_) return named_mlp(p + "feed_forward.", kInter, x, "w1", "w3", "w2");
    if (!m_.has(q + "gate.weight")) return named_mlp(q, hidden, x);
    Vec logits = matvec(m_.at(q + "gate.weight"), kExperts, kD, x.data());
    double mx = -INFINITY, sum = 0;
    for (float l : logits) mx = std::max<double>(mx, l);
    std::vector<double> prob(kExperts);
    for (int e = 0; e < kExperts; ++e) sum += (prob[e] = std::exp(logits[e] - mx));
    for (double& pr : prob) pr /= sum;
    std::vector<int> order(kExperts);
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return prob[a] > prob[b]; });
    const bool renorm = type_ == "mixtral" || c_.value("norm_topk_prob", false);
    double chosen = 0;
    for (int k = 0; k < kTopK; ++k) chosen += prob[order[k]];
    Vec y(kD, 0.0f);
    for (int k = 0; k < kTopK; ++k) {
      const int e = order[k];
      Vec out;
      if (m_.has(q + "experts.down_proj")) {
        std::vector<float> down(m_.at(q + "experts.down_proj").begin() + int64_t(e) * kD * kExpertHidden,
                                m_.at(q + "experts.down_proj").begin() + int64_t(e + 1) * kD * kExpertHidden);
        out = mlp(m_.at(q + "experts.gate_up_proj"), m_.at(q + "experts.gate_up_proj"), down, kExpertHidden, x,
                  int64_t(e) * 2 * kExpertHidden, int64_t(e) * 2 * kExpertHidden + kExpertHidden);
      } else if (type_ == "mixtral") {
        out = named_mlp(q + "experts." + std::to_string(e) + ".", kExpertHidden, x, "w1", "w3", "w2");
      } else {
        out = named_mlp(q + "experts." + std::to_string(e) + ".", kExpertHidden, x);
      }
      const double w = renorm ? prob[e] / chosen : prob[e];
      for (int r = 0; r < kD; ++r) y[r] += float(w * out[r]);
    }
    if (m_.has(q + "shared_experts.down_proj.weight")) {
      Vec s = named_mlp(q + "shared_experts.", kExpertHidden, x);
      for (int r = 0; r < kD; ++r) y[r] += s[r];
    }
    if (m_.has(q + "shared_expert.down_proj.weight")) {  // Qwen: one shared expert scaled by sigmoid(w . x)
      const Vec s = named_mlp(q + "shared_expert.", c_["shared_expert_intermediate_size"].get<int>(), x);
      const float gate = 1.0f / (1.0f + std::exp(-matvec(m_.at(q + "shared_expert_gate.weight"), 1, kD, x.data())[0]));
      for (int r = 0; r < kD; ++r) y[r] += gate * s[r];
    }
    (void)i;
    return y;
  }

  // Lfm2MoeSparseMoeBlock: s = sigmoid(gate x); the top-k of s + expert_bias; weights s_e /
  // (sum of the chosen s + 1e-6) times routed_scaling_factor.
  Vec lfm2_moe(const std::string& q, const Vec& x) {
    const Vec logits = matvec(m_.at(q + "gate.weight"), kExperts, kD, x.data());
    std::vector<double> s(kExperts), biased(kExperts);
    for (int e = 0; e < kExperts; ++e)
      s[size_t(e)] = 1.0 / (1.0 + std::exp(-double(logits[size_t(e)]))), biased[size_t(e)] = s[size_t(e)] + m_.at(q + "expert_bias")[size_t(e)];
    std::vector<int> order(kExperts);
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return biased[size_t(a)] > biased[size_t(b)]; });
    double sum = 0;
    for (int k = 0; k < kTopK; ++k) sum += s[size_t(order[size_t(k)])];
    Vec y(kD, 0.0f);
    for (int k = 0; k < kTopK; ++k) {
      const int e = order[size_t(k)];
      const Vec o = named_mlp(q + "experts." + std::to_string(e) + ".", kExpertHidden, x, "w1", "w3", "w2");
      const double w = s[size_t(e)] / (sum + 1e-6) * c_["routed_scaling_factor"].get<double>();
      for (int r = 0; r < kD; ++r) y[size_t(r)] += float(w * o[size_t(r)]);
    }
    return y;
  }

  // GraniteMoeTopKGating: the top-k router logits, then a softmax over them; each expert's
  // input_linear rows are its gate then its up projection.
  Vec granite_moe(const std::string& q, const Vec& x) {
    const Vec logits = matvec(m_.at(q + "router.layer.weight"), kExperts, kD, x.data());
    std::vector<int> order(kExperts);
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return logits[a] > logits[b]; });
    double sum = 0;
    for (int k = 0; k < kTopK; ++k) sum += std::exp(double(logits[order[k]] - logits[order[0]]));
    const auto& in = m_.at(q + "input_linear.weight");
    const auto& out = m_.at(q + "output_linear.weight");
    Vec y(kD, 0.0f);
    for (int k = 0; k < kTopK; ++k) {
      const int e = order[k];
      std::vector<float> down(out.begin() + int64_t(e) * kD * kExpertHidden, out.begin() + int64_t(e + 1) * kD * kExpertHidden);
      const Vec o = mlp(in, in, down, kExpertHidden, x, int64_t(e) * 2 * kExpertHidden, int64_t(e) * 2 * kExpertHidden + kExpertHidden);
      const double w = std::exp(double(logits[e] - logits[order[0]])) / sum;
      for (int r = 0; r < kD; ++r) y[r] += float(w * o[r]);
    }
    return y;
  }

  const HfModel& m_;
  const Json& c_;
  std::string type_, prefix_ = "model.";
  bool gemma_ = false, sandwich_ = false;  // Gemma: 1 + w gains, sqrt(d) embedding, GeGLU; 2 / 3: sandwich norms
  bool post_ = false;                      // OLMo 2 / Olmo 3 / EXAONE 4: x + norm(f(x))
  bool hybrid_ = false;                    // Qwen3-Next / Qwen3.5: 1 + w gains, DeltaNet layers, gated attention
  bool lfm2_ = false;                      // LFM2: short-conv layers, its own names
  double eps_ = 1e-6;
  int64_t pos_ = 0;
  std::vector<std::vector<Vec>> keys_, values_;
  std::vector<std::vector<Vec>> conv_;     // DeltaNet / short-conv layers: every token's conv input
  std::vector<std::vector<double>> state_;  // DeltaNet layers: S per value head [d_k][d_v]
};

}  // namespace wren::hf_fixture
