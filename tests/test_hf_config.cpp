// Hugging Face config.json import: parameter totals against published figures, the mapping of
// each family's features, the presets made from the fixtures, and the errors for bad input.
//
// Fixtures (tests/fixtures/hf/) are the published config.json files of the models, reproduced
// from the model repositories; a "-text" fixture is the text_config of a multimodal one as a
// text-only checkpoint (Qwen3_5ForCausalLM, Qwen3_5MoeForCausalLM) writes it. Totals count every tensor of build_weight_map(config).
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <set>

#include <unistd.h>

#include "config/hf_config.h"
#include "config/parse.h"
#include "config/weight_map.h"

namespace wren {
namespace {

std::string fixture(const std::string& name) { return std::string(WREN_SOURCE_DIR) + "/tests/fixtures/hf/" + name + ".json"; }

int64_t total_parameters(const ModelConfig& c) {
  int64_t n = 0;
  for (const TensorInfo& t : build_weight_map(c).tensors) n += t.numel();
  return n;
}

// The message of the ConfigError thrown by importing `j` ("" when none is thrown).
std::string import_error(const Json& j) {
  try {
    import_hf_config(j, "test.json");
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "";
}

Json fixture_json(const std::string& name) { return parse_json_file(fixture(name)); }

// ---- Totals ----------------------------------------------------------------------------
// Where the figure is safetensors "total_size" / 2, the checkpoint is stored in bf16 throughout.

struct Published {
  const char* fixture;
  int64_t total;
};

TEST(HfConfigTotals, MatchPublishedFigures) {
  // SigLIP so400m vision tower of Gemma 3 4B (27 layers, width 1152, MLP 4304, 896 px / 14 px
  // patches) and the projector into the text model; the published total counts both.
  const int64_t v = 1152, vm = 4304;
  const int64_t siglip = (v * 3 * 14 * 14 + v) + 64 * 64 * v +
                         27 * (4 * (v * v + v) + 4 * v + (v * vm + vm) + (vm * v + v)) + 2 * v;
  const int64_t projector = v * 2560 + v;
  const Published cases[] = {
      {"llama-3.1-8b", 8'030'261'248},        // index total_size 16,060,522,496 / 2
      {"olmoe-1b-7b-0924", 6'919'161'856},    // model card; fp32 checkpoint
      {"deepseek-v2-lite", 15'706'484'224},   // index total_size 31,412,968,448 / 2
      {"qwen3-30b-a3b", 30'532'122'624},      // index total_size 61,064,245,248 / 2
      {"mixtral-8x7b-v0.1", 46'702'792'704},  // index total_size 93,405,585,408 / 2
      {"gpt-oss-20b", 20'914'757'184},        // GGUF general.parameter_count (checkpoint is MXFP4)
      {"gemma-2-2b-it", 2'614'341'888},       // index total_size 5,228,683,776 / 2
      {"qwen3-8b", 8'190'735'360},            // index total_size 16,381,470,720 / 2
      {"mistral-7b-v0.1", 7'241'732'096},     // index total_size 14,483,464,192 / 2
      {"qwen2.5-7b", 7'615'616'512},          // index total_size 15,231,233,024 / 2
      {"gemma-3-1b-pt", 999'885'952},         // index total_size 1,999,771,904 / 2
      {"phi-3.5-mini-instruct", 3'821'079'552},  // index total_size 7,642,159,104 / 2
      {"smollm3-3b", 3'075'098'624},             // the model page's 3.08B (bf16, tied embeddings)
      // The model pages' 1.48B and 7.3B; by HF's modules, 2 V d + L (4 d^2 + 3 d ffn + 4 d) + d
      // (q_norm and k_norm over all heads, d each with as many KV heads as query heads).
      {"olmo-2-0425-1b", int64_t(2) * 100352 * 2048 + int64_t(16) * (4 * 2048 * 2048 + 3 * 2048 * 8192 + 4 * 2048) + 2048},
      // The model pages' 2.53B and 1.33B (tied): V d + L (2 d^2 + 2 d kv + 3 d ffn + 2 d) + d, the MoE's
      // ffn term E (3 d ffn) + E d for the router.
      {"granite-3.3-2b-instruct", int64_t(49159) * 2048 + int64_t(40) * (2 * 2048 * 2048 + 2 * 2048 * 512 + 3 * 2048 * 8192 + 2 * 2048) + 2048},
      {"granite-3.1-1b-a400m-instruct", int64_t(49155) * 1024 + int64_t(24) * (2 * 1024 * 1024 + 2 * 1024 * 512 + 32 * 3 * 1024 * 512 + 32 * 1024 + 2 * 1024) + 1024},
      // The model page's 1.07B without embeddings (tied): L (2 d^2 + 2 d kv + 2 head + 3 d ffn + 2 d) + d.
      {"exaone-4.0-1.2b", int64_t(102400) * 2048 + int64_t(30) * (2 * 2048 * 2048 + 2 * 2048 * 512 + 2 * 64 + 3 * 2048 * 4096 + 2 * 2048) + 2048},
      {"olmo-3-7b-instruct", int64_t(2) * 100278 * 4096 + 32 * (int64_t(4) * 4096 * 4096 + 3 * 4096 * 11008 + 4 * 4096) + 4096},
      {"gemma-2b", 2'506'172'416},               // index total_size 5,012,344,832 / 2
      // Text model only: index total_size 8,600,158,944 / 2, less the vision tower and projector.
      {"gemma-3-4b-it", 4'300'079'472 - siglip - projector},
      // The Instruct checkpoint holds 81,324,862,720 including its multi-token-prediction
      // block; the main model alone (as in Qwen3-Coder-Next, same shapes, and llama.cpp) is this.
      {"qwen3-next-80b-a3b-instruct", 79'674'391'296},
      // The model page's 1.17B: V d + 10 conv layers (4 d^2 + 3 d + 2 d + 3 d ffn) + 6 attention
      // layers (2 d^2 + 2 d kv + 2 head + 2 d + 3 d ffn) + d, ffn = 2/3 of 12288 = 8192.
      {"lfm2-1.2b", 1'170'340'608},
      // DeepSeek-R1 (V3 shapes) tensor listing: 684,531,386,000 numbers, of which the MTP layer
      // holds 13,463,426,304 and the FP8 block scales 41,540,496; the rest is the main model.
      {"deepseek-v3", 671'026'419'200},
  };
  EXPECT_EQ(siglip, 416'866'032);
  for (const Published& p : cases) EXPECT_EQ(total_parameters(load_hf_config(fixture(p.fixture))), p.total) << p.fixture;
}

TEST(HfConfigTotals, EveryModelTypeHasAFixture) {
  std::set<std::string> seen;
  for (auto& entry : std::filesystem::directory_iterator(std::string(WREN_SOURCE_DIR) + "/tests/fixtures/hf"))
    seen.insert(parse_json_file(entry.path().string())["model_type"].get<std::string>());
  for (const std::string& type : hf_model_types()) EXPECT_TRUE(seen.count(type)) << type;
}

// ---- Presets equal the import of their fixture ---------------------------------------------

TEST(HfConfigPresets, EqualTheImportedFixture) {
  const std::pair<const char*, const char*> pairs[] = {
      {"llama-3.1-8b", "llama-3.1-8b"},
      {"olmoe-1b-7b", "olmoe-1b-7b-0924"},
      {"deepseek-v2-lite", "deepseek-v2-lite"},
      {"qwen3-30b-a3b", "qwen3-30b-a3b"},
  };
  for (auto [preset, file] : pairs) {
    ModelConfig p = load_preset(preset), h = load_hf_config(fixture(file));
    EXPECT_EQ(total_parameters(p), total_parameters(h)) << preset;
    h.name = p.name;
    EXPECT_EQ(to_json(p), to_json(h)) << preset;
  }
  EXPECT_EQ(total_parameters(load_preset("llama-3.1-8b")), 8'030'261'248);
  EXPECT_EQ(total_parameters(load_preset("olmoe-1b-7b")), 6'919'161'856);
  EXPECT_EQ(total_parameters(load_preset("deepseek-v2-lite")), 15'706'484'224);
}

// ---- Mapping of each family's features -------------------------------------------------------

TEST(HfConfigMapping, LlamaQwenMistralMixtral) {
  ModelConfig llama = load_hf_config(fixture("llama-3.1-8b"));
  EXPECT_EQ(llama.name, "llama-3.1-8b");
  const MixerSpec& a = llama.mixer(0);
  EXPECT_EQ(a.n_heads, 32);
  EXPECT_EQ(a.n_kv_heads, 8);
  EXPECT_EQ(a.head_dim, 128);
  EXPECT_DOUBLE_EQ(a.rope->theta, 500000.0);
  EXPECT_DOUBLE_EQ(a.rope->llama3_factor, 8.0);
  EXPECT_EQ(a.rope->llama3_original_context, 8192);
  EXPECT_FALSE(llama.tie_embeddings);
  EXPECT_DOUBLE_EQ(llama.norm.eps, 1e-5);

  ModelConfig qwen2 = load_hf_config(fixture("qwen2.5-7b"));
  EXPECT_TRUE(qwen2.mixer(0).qkv_bias);
  EXPECT_FALSE(qwen2.mixer(0).o_bias);
  EXPECT_EQ(qwen2.mixer(27).window, 0);  // use_sliding_window is false

  EXPECT_EQ(load_hf_config(fixture("qwen3-8b")).mixer(0).qk_norm, QkNorm::head);

  ModelConfig mistral = load_hf_config(fixture("mistral-7b-v0.1"));
  for (int i = 0; i < mistral.n_layers(); ++i) EXPECT_EQ(mistral.mixer(i).window, 4096);

  ModelConfig mixtral = load_hf_config(fixture("mixtral-8x7b-v0.1"));
  const FfnSpec& f = mixtral.ffn(5);
  EXPECT_EQ(f.kind, FfnKind::moe);
  EXPECT_EQ(f.n_experts, 8);
  EXPECT_EQ(f.top_k, 2);
  EXPECT_EQ(f.gates, GateNorm::normalize);
  EXPECT_EQ(mixtral.mixer(0).window, 0);  // sliding_window is null

  ModelConfig qmoe = load_hf_config(fixture("qwen3-30b-a3b"));
  EXPECT_EQ(qmoe.ffn(0).expert_hidden, 768);
  EXPECT_EQ(qmoe.ffn(0).gates, GateNorm::normalize);
  EXPECT_EQ(qmoe.ffns.size(), 1u);  // no mlp_only_layers: the dense width is unused
}

TEST(HfConfigMapping, Gemma) {
  ModelConfig g2 = load_hf_config(fixture("gemma-2-2b-it"));
  EXPECT_TRUE(g2.tie_embeddings);
  EXPECT_EQ(g2.norm.placement, NormPlacement::sandwich);
  EXPECT_TRUE(g2.norm.unit_offset);
  EXPECT_DOUBLE_EQ(g2.embedding_scale, 48.0);  // sqrt(2304)
  EXPECT_DOUBLE_EQ(g2.logit_softcap, 30.0);
  EXPECT_DOUBLE_EQ(g2.mixer(0).softcap, 50.0);
  EXPECT_EQ(g2.mixer(0).window, 4096);  // even layers local
  EXPECT_EQ(g2.mixer(1).window, 0);
  EXPECT_EQ(g2.ffn(0).activation, Activation::geglu);
  EXPECT_EQ(g2.mixer(0).scale, 0.0);  // query_pre_attn_scalar = head_dim

  ModelConfig g3 = load_hf_config(fixture("gemma-3-1b-pt"));
  for (int i = 0; i < g3.n_layers(); ++i) {
    bool global = (i + 1) % 6 == 0;
    EXPECT_EQ(g3.mixer(i).window, global ? 0 : 512) << i;
    EXPECT_DOUBLE_EQ(g3.mixer(i).rope->theta, global ? 1e6 : 1e4) << i;
    EXPECT_EQ(g3.mixer(i).qk_norm, QkNorm::head);
  }
  EXPECT_EQ(g3.logit_softcap, 0.0);

  ModelConfig g3mm = load_hf_config(fixture("gemma-3-4b-it"));  // text_config over the defaults
  EXPECT_EQ(g3mm.name, "gemma-3-4b-it");
  EXPECT_EQ(g3mm.n_layers(), 34);
  EXPECT_EQ(g3mm.vocab_size, 262208);
  EXPECT_EQ(g3mm.mixer(5).n_heads, 8);
  EXPECT_DOUBLE_EQ(g3mm.mixer(5).rope->linear_factor, 8.0);  // global layers only
  EXPECT_DOUBLE_EQ(g3mm.mixer(0).rope->linear_factor, 1.0);
  EXPECT_EQ(g3mm.mixer(0).window, 1024);
}

TEST(HfConfigMapping, OlmoeAndGptOss) {
  ModelConfig olmoe = load_hf_config(fixture("olmoe-1b-7b-0924"));
  EXPECT_EQ(olmoe.mixer(0).qk_norm, QkNorm::full);
  EXPECT_EQ(olmoe.ffn(0).gates, GateNorm::none);
  EXPECT_EQ(olmoe.ffn(0).expert_hidden, 1024);

  ModelConfig oss = load_hf_config(fixture("gpt-oss-20b"));
  const MixerSpec& m = oss.mixer(0);
  EXPECT_TRUE(m.sinks && m.qkv_bias && m.o_bias);
  EXPECT_EQ(oss.mixer(0).window, 128);
  EXPECT_EQ(oss.mixer(1).window, 0);
  EXPECT_DOUBLE_EQ(m.rope->yarn_factor, 32.0);
  EXPECT_FALSE(m.rope->yarn_truncate);
  const FfnSpec& f = oss.ffn(0);
  EXPECT_EQ(f.activation, Activation::swiglu_oai);
  EXPECT_TRUE(f.bias && f.router_bias);
  EXPECT_EQ(f.gates, GateNorm::softmax_topk);
  EXPECT_EQ(f.top_k, 4);
}

// Phi-3.5-mini: the LongRoPE factors as given, switching at the original context 4096, the
// attention factor sqrt(1 + ln 32 / ln 4096) (s = 131072 / 4096); a window as long as 262144.
TEST(HfConfigMapping, Phi3LongRope) {
  const Json j = fixture_json("phi-3.5-mini-instruct");
  ModelConfig c = import_hf_config(j, "phi.json");
  const Rope& r = *c.mixer(0).rope;
  EXPECT_EQ(r.longrope_short, j["rope_scaling"]["short_factor"].get<std::vector<double>>());
  EXPECT_EQ(r.longrope_long, j["rope_scaling"]["long_factor"].get<std::vector<double>>());
  EXPECT_EQ(r.longrope_original_context, 4096);
  EXPECT_NEAR(r.longrope_attention, std::sqrt(1 + std::log(32.0) / std::log(4096.0)), 1e-12);
  EXPECT_EQ(c.mixer(0).window, 262144);
  Json given = j;
  given["rope_scaling"]["attention_factor"] = 1.25;
  EXPECT_EQ(import_hf_config(given, "phi.json").mixer(0).rope->longrope_attention, 1.25);

  Json shorter = j;
  shorter["rope_scaling"]["short_factor"].erase(0);
  EXPECT_NE(import_error(shorter).find("LongRoPE needs 48 short and 48 long factors"), std::string::npos) << import_error(shorter);
  Json zero = j;
  zero["rope_scaling"]["long_factor"][3] = 0.0;
  EXPECT_NE(import_error(zero).find("long_factor[3]"), std::string::npos) << import_error(zero);
  Json missing = j;
  missing["rope_scaling"].erase("long_factor");
  EXPECT_NE(import_error(missing).find("long_factor"), std::string::npos) << import_error(missing);
}

// SmolLM3-3B: every fourth layer attends without RoPE, the rest rotate with theta 5e6; a list
// of the wrong length is a named error.
TEST(HfConfigMapping, Smollm3NoRopeLayers) {
  const Json j = fixture_json("smollm3-3b");
  ModelConfig c = import_hf_config(j, "smollm3.json");
  for (int i = 0; i < c.n_layers(); ++i) {
    EXPECT_EQ(c.mixer(i).rope.has_value(), (i + 1) % 4 != 0) << i;
    if (c.mixer(i).rope) EXPECT_EQ(c.mixer(i).rope->theta, 5e6) << i;
  }
  EXPECT_EQ(c.mixers.size(), 2u);
  Json by_interval = j;
  by_interval.erase("no_rope_layers");
  by_interval["no_rope_layer_interval"] = 3;
  ModelConfig b = import_hf_config(by_interval, "smollm3.json");
  for (int i = 0; i < b.n_layers(); ++i) EXPECT_EQ(b.mixer(i).rope.has_value(), (i + 1) % 3 != 0) << i;
  Json shorter = j;
  shorter["no_rope_layers"].erase(0);
  EXPECT_NE(import_error(shorter).find("no_rope_layers"), std::string::npos) << import_error(shorter);
}

// Gemma 1: pre-norm (no sandwich) with 1 + w gains, sqrt(d) embedding, the tanh GeGLU in place
// of the original config's exact "gelu" (as transformers runs it), one KV head.
TEST(HfConfigMapping, Gemma1) {
  ModelConfig c = load_hf_config(fixture("gemma-2b"));
  EXPECT_EQ(c.norm.placement, NormPlacement::pre);
  EXPECT_TRUE(c.norm.unit_offset && c.tie_embeddings);
  EXPECT_DOUBLE_EQ(c.embedding_scale, std::sqrt(2048.0));
  EXPECT_EQ(c.ffn(0).activation, Activation::geglu);
  EXPECT_EQ(c.mixer(0).n_kv_heads, 1);
  EXPECT_EQ(c.mixer(0).head_dim, 256);
  EXPECT_EQ(c.mixer(0).window, 0);
}

// OLMo 2: post norms only, QK-norm over all heads. Olmo 3: three sliding layers to a full one,
// the sliding ones rotating without the YaRN scaling; its explicit attention_factor is the mscale
// whose m(8, k) = 0.1 k ln 8 + 1 it equals (here the default's k = 1).
TEST(HfConfigMapping, Olmo2And3) {
  ModelConfig c = load_hf_config(fixture("olmo-2-0425-1b"));
  EXPECT_EQ(c.norm.placement, NormPlacement::post);
  EXPECT_EQ(c.mixer(0).qk_norm, QkNorm::full);
  EXPECT_EQ(c.mixers.size(), 1u);
  EXPECT_EQ(c.mixer(0).window, 0);
  EXPECT_DOUBLE_EQ(c.mixer(0).rope->theta, 5e5);
  ModelConfig o3 = load_hf_config(fixture("olmo-3-7b-instruct"));
  EXPECT_EQ(o3.norm.placement, NormPlacement::post);
  for (int i = 0; i < o3.n_layers(); ++i) {
    const MixerSpec& m = o3.mixer(i);
    EXPECT_EQ(m.window, (i + 1) % 4 ? 4096 : 0) << i;
    EXPECT_EQ(m.rope->yarn_factor, (i + 1) % 4 ? 0.0 : 8.0) << i;
    EXPECT_DOUBLE_EQ(m.rope->theta, 5e5) << i;
  }
  EXPECT_NEAR(o3.mixer(3).rope->yarn_mscale, 1.0, 1e-12);
  Json other = fixture_json("olmo-3-7b-instruct");
  other["rope_scaling"]["attention_factor"] = 1.5;
  EXPECT_NEAR(import_hf_config(other, "olmo3.json").mixer(3).rope->yarn_mscale, 0.5 / (0.1 * std::log(8.0)), 1e-12);
  other.erase("layer_types");  // transformers' default: every fourth layer full
  ModelConfig d = import_hf_config(other, "olmo3.json");
  for (int i = 0; i < d.n_layers(); ++i) EXPECT_EQ(d.mixer(i).window, (i + 1) % 4 ? 4096 : 0) << i;
}

// Granite: the multipliers as the model description's embedding scale, softmax scale,
// residual scale and logit divisor; Granite MoE's softmax over the top-k router logits.
// EXAONE 4: post norms, QK-norm per head; without a window every layer is full and rotates
// (1.2B); with one (32B: "LLLG") the full layers attend without RoPE.
TEST(HfConfigMapping, Exaone4) {
  ModelConfig c = load_hf_config(fixture("exaone-4.0-1.2b"));
  EXPECT_EQ(c.norm.placement, NormPlacement::post);
  for (int i = 0; i < c.n_layers(); ++i) {
    EXPECT_EQ(c.mixer(i).qk_norm, QkNorm::head) << i;
    EXPECT_EQ(c.mixer(i).window, 0) << i;
    ASSERT_TRUE(c.mixer(i).rope) << i;
    EXPECT_EQ(c.mixer(i).rope->llama3_factor, 16.0) << i;
  }
  Json hybrid = fixture_json("exaone-4.0-1.2b");
  hybrid["sliding_window"] = 4096, hybrid["sliding_window_pattern"] = "LLLG";
  hybrid.erase("layer_types");
  ModelConfig h = import_hf_config(hybrid, "exaone4.json");
  for (int i = 0; i < h.n_layers(); ++i) {
    EXPECT_EQ(h.mixer(i).window, i % 4 == 3 ? 0 : 4096) << i;
    EXPECT_EQ(h.mixer(i).rope.has_value(), i % 4 != 3) << i;
  }
  hybrid["sliding_window_pattern"] = "LLX";
  EXPECT_NE(import_error(hybrid).find("sliding_window_pattern"), std::string::npos) << import_error(hybrid);
}

TEST(HfConfigMapping, GraniteMultipliers) {
  for (const char* name : {"granite-3.3-2b-instruct", "granite-3.1-1b-a400m-instruct"}) {
    ModelConfig c = load_hf_config(fixture(name));
    EXPECT_DOUBLE_EQ(c.embedding_scale, 12.0) << name;
    EXPECT_DOUBLE_EQ(c.residual_scale, 0.22) << name;
    EXPECT_DOUBLE_EQ(c.mixer(0).scale, 0.015625) << name;
    EXPECT_TRUE(c.tie_embeddings) << name;
  }
  EXPECT_DOUBLE_EQ(load_hf_config(fixture("granite-3.3-2b-instruct")).logit_divisor, 8.0);
  ModelConfig moe = load_hf_config(fixture("granite-3.1-1b-a400m-instruct"));
  EXPECT_DOUBLE_EQ(moe.logit_divisor, 6.0);
  EXPECT_EQ(moe.ffn(0).gates, GateNorm::softmax_topk);
  EXPECT_EQ(moe.ffn(0).n_experts, 32);
  EXPECT_EQ(moe.ffn(0).top_k, 8);
  Json bad = fixture_json("granite-3.3-2b-instruct");
  bad["residual_multiplier"] = -1.0;
  EXPECT_NE(import_error(bad).find("residual_multiplier"), std::string::npos) << import_error(bad);
}

// Granite 4 without Mamba layers (micro: every layer attention, RoPE, the shared MLP only); with
// routed experts, Granite MoE's routing beside the shared MLP.
TEST(HfConfigMapping, Granite4AttentionOnly) {
  ModelConfig c = load_hf_config(fixture("granite-4.0-micro"));
  EXPECT_EQ(c.ffn(0).kind, FfnKind::dense);
  EXPECT_EQ(c.ffn(0).hidden, 8192);
  EXPECT_TRUE(c.mixer(0).rope.has_value());
  EXPECT_DOUBLE_EQ(c.logit_divisor, 10.0);
  EXPECT_DOUBLE_EQ(c.mixer(0).scale, 0.015625);
  Json j = fixture_json("granite-4.0-micro");
  j["position_embedding_type"] = "nope";
  EXPECT_FALSE(import_hf_config(j, "g4.json").mixer(0).rope.has_value());
  j = fixture_json("granite-4.0-micro");  // H tiny's routing: 64 experts of 512, top 6, beside the shared MLP
  j["num_local_experts"] = 64, j["num_experts_per_tok"] = 6, j["intermediate_size"] = 512;
  const ModelConfig moe = import_hf_config(j, "g4moe.json");
  EXPECT_EQ(moe.ffn(0).kind, FfnKind::moe);
  EXPECT_EQ(moe.ffn(0).n_experts, 64);
  EXPECT_EQ(moe.ffn(0).expert_hidden, 512);
  EXPECT_EQ(moe.ffn(0).gates, GateNorm::softmax_topk);
  EXPECT_EQ(moe.ffn(0).n_shared, 1);
  EXPECT_EQ(moe.ffn(0).shared_hidden, 8192);
  j["num_experts_per_tok"] = 65;
  EXPECT_NE(import_error(j).find("num_experts_per_tok"), std::string::npos) << import_error(j);
}

// Granite 4.0-H: "mamba" layers become Mamba-2 mixers of mamba_n_heads x mamba_d_head channels
// (mamba_expand x hidden_size, "auto" dividing it), which must agree; one group only.
TEST(HfConfigMapping, Granite4HybridMamba2Layers) {
  Json j = fixture_json("granite-4.0-micro");  // hidden 2560, mamba_n_heads 128, mamba_d_head 64
  j["position_embedding_type"] = "nope";
  for (int i = 0; i < 40; ++i) j["layer_types"][size_t(i)] = i % 10 == 9 ? "attention" : "mamba";
  EXPECT_NE(import_error(j).find("mamba_d_head"), std::string::npos) << import_error(j);  // 128 x 64 != 2 x 2560
  j["mamba_d_head"] = 40;
  const ModelConfig c = import_hf_config(j, "g4h.json");
  for (int i = 0; i < 40; ++i) EXPECT_EQ(c.mixer(i).kind, i % 10 == 9 ? MixerKind::attention : MixerKind::mamba2) << i;
  const MixerSpec& m = c.mixer(0);
  EXPECT_EQ(m.n_heads, 128);
  EXPECT_EQ(m.head_dim, 40);
  EXPECT_EQ(m.state_dim, 256);
  EXPECT_EQ(m.ssm_groups(), 1);
  EXPECT_EQ(m.conv_kernel, 4);
  EXPECT_TRUE(m.conv_bias);
  EXPECT_FALSE(c.mixer(9).rope.has_value());
  j["mamba_d_head"] = "auto";
  EXPECT_EQ(import_hf_config(j, "g4h.json").mixer(0).head_dim, 40);
  j["mamba_n_groups"] = 2;
  EXPECT_NE(import_error(j).find("mamba_n_groups"), std::string::npos) << import_error(j);
  j["mamba_n_groups"] = 1, j["mamba_proj_bias"] = true;
  EXPECT_NE(import_error(j).find("mamba_proj_bias"), std::string::npos) << import_error(j);
}

TEST(HfConfigMapping, Qwen3NextHybrid) {
  ModelConfig c = load_hf_config(fixture("qwen3-next-80b-a3b-instruct"));
  EXPECT_TRUE(c.norm.unit_offset);
  for (int i = 0; i < c.n_layers(); ++i)
    EXPECT_EQ(c.mixer(i).kind, (i + 1) % 4 == 0 ? MixerKind::attention : MixerKind::gdn) << i;
  const MixerSpec& gdn = c.mixer(0);
  EXPECT_EQ(gdn.n_heads, 16);
  EXPECT_EQ(gdn.n_v_heads, 32);
  EXPECT_EQ(gdn.head_dim, 128);
  EXPECT_EQ(gdn.v_head_dim, 128);
  EXPECT_EQ(gdn.conv_kernel, 4);
  const MixerSpec& full = c.mixer(3);
  EXPECT_TRUE(full.output_gate);
  EXPECT_EQ(full.head_dim, 256);
  EXPECT_EQ(full.rope->rotary_dim, 64);  // partial_rotary_factor 0.25
  const FfnSpec& f = c.ffn(0);
  EXPECT_EQ(f.n_shared, 1);
  EXPECT_EQ(f.shared_hidden, 512);
  EXPECT_TRUE(f.shared_gate);
  EXPECT_EQ(f.top_k, 10);
}

// Qwen3.5: the text model inside the multimodal wrapper (or alone, as a text-only checkpoint
// writes it): Qwen3-Next's layers with a dense MLP (0.8B) or routed experts (35B-A3B); M-RoPE
// over a text is RoPE over a quarter of each head.
TEST(HfConfigMapping, Qwen35TextInsideItsWrapper) {
  const ModelConfig c = load_hf_config(fixture("qwen3.5-0.8b"));
  EXPECT_TRUE(c.norm.unit_offset);
  EXPECT_TRUE(c.tie_embeddings);
  EXPECT_EQ(c.n_layers(), 24);
  for (int i = 0; i < c.n_layers(); ++i) {
    EXPECT_EQ(c.mixer(i).kind, (i + 1) % 4 == 0 ? MixerKind::attention : MixerKind::gdn) << i;
    EXPECT_EQ(c.ffn(i).kind, FfnKind::dense) << i;
  }
  EXPECT_EQ(c.mixer(0).n_heads, 16);
  EXPECT_EQ(c.mixer(0).value_heads(), 16);
  EXPECT_EQ(c.mixer(0).value_dim(), 128);
  EXPECT_TRUE(c.mixer(3).output_gate);
  EXPECT_EQ(c.mixer(3).rope->rotary_dim, 64);
  EXPECT_DOUBLE_EQ(c.mixer(3).rope->theta, 1e7);
  EXPECT_EQ(c.ffn(0).hidden, 3584);
  ModelConfig text = load_hf_config(fixture("qwen3.5-0.8b-text"));
  text.name = c.name;
  EXPECT_EQ(to_json(text).dump(), to_json(c).dump());

  const ModelConfig moe = load_hf_config(fixture("qwen3.5-35b-a3b"));
  EXPECT_FALSE(moe.tie_embeddings);
  EXPECT_EQ(moe.mixer(0).value_heads(), 32);
  const FfnSpec& f = moe.ffn(0);
  EXPECT_EQ(f.kind, FfnKind::moe);
  EXPECT_EQ(f.n_experts, 256);
  EXPECT_EQ(f.top_k, 8);
  EXPECT_EQ(f.expert_hidden, 512);
  EXPECT_EQ(f.shared_hidden, 512);
  EXPECT_TRUE(f.shared_gate);
  EXPECT_EQ(f.gates, GateNorm::normalize);
  ModelConfig moe_text = load_hf_config(fixture("qwen3.5-35b-a3b-text"));
  moe_text.name = moe.name;
  EXPECT_EQ(to_json(moe_text).dump(), to_json(moe).dump());
}

TEST(HfConfigMapping, Qwen35WrapperErrors) {
  Json j = fixture_json("qwen3.5-0.8b");
  j["text_config"]["model_type"] = "qwen3_5_moe_text";
  EXPECT_NE(import_error(j).find("text_config.model_type"), std::string::npos) << import_error(j);
  j = fixture_json("qwen3.5-0.8b");
  j["text_config"]["attention_bias"] = true;
  EXPECT_NE(import_error(j).find("attention_bias"), std::string::npos) << import_error(j);
  j = fixture_json("qwen3.5-0.8b");
  j["text_config"].erase("linear_num_value_heads");
  EXPECT_NE(import_error(j).find("text_config.linear_num_value_heads"), std::string::npos) << import_error(j);
  // The wrapper's tie_word_embeddings holds where text_config has none.
  j = fixture_json("qwen3.5-0.8b");
  j["text_config"].erase("tie_word_embeddings");
  EXPECT_TRUE(import_hf_config(j, "qwen35").tie_embeddings);
  j["tie_word_embeddings"] = false;
  EXPECT_FALSE(import_hf_config(j, "qwen35").tie_embeddings);
}

// LFM2: short convolutions where layer_types says "conv", GQA attention with QK-norm per head
// elsewhere; the MLP width adjusted from block_ff_dim as Lfm2MLP does.
TEST(HfConfigMapping, Lfm2ShortConvLayers) {
  const ModelConfig c = load_hf_config(fixture("lfm2-1.2b"));
  EXPECT_TRUE(c.tie_embeddings);
  EXPECT_FALSE(c.norm.unit_offset);
  EXPECT_DOUBLE_EQ(c.norm.eps, 1e-5);
  const Json types = fixture_json("lfm2-1.2b")["layer_types"];
  for (int i = 0; i < c.n_layers(); ++i)
    EXPECT_EQ(c.mixer(i).kind, types[size_t(i)] == "conv" ? MixerKind::short_conv : MixerKind::attention) << i;
  EXPECT_EQ(c.mixer(0).conv_kernel, 3);
  EXPECT_EQ(c.mixer(2).qk_norm, QkNorm::head);
  EXPECT_EQ(c.mixer(2).head_dim, 64);
  EXPECT_DOUBLE_EQ(c.mixer(2).rope->theta, 1e6);
  EXPECT_EQ(c.ffn(0).hidden, 8192);
  Json j = fixture_json("lfm2-1.2b");
  j.erase("layer_types");
  j["full_attn_idxs"] = {2, 5};
  const ModelConfig idx = import_hf_config(j, "lfm2");
  for (int i = 0; i < idx.n_layers(); ++i) EXPECT_EQ(idx.mixer(i).kind == MixerKind::attention, i == 2 || i == 5) << i;
  j["conv_bias"] = true;
  EXPECT_NE(import_error(j).find("conv_bias"), std::string::npos) << import_error(j);
  j = fixture_json("lfm2-1.2b");
  j["full_attn_idxs"] = {16};
  j.erase("layer_types");
  EXPECT_NE(import_error(j).find("full_attn_idxs"), std::string::npos) << import_error(j);
}

// LFM2-MoE: the first two layers dense at intermediate_size, the rest 32 experts (top 4) routed
// by sigmoid with selection biases, renormalised.
TEST(HfConfigMapping, Lfm2MoeRouting) {
  const ModelConfig c = load_hf_config(fixture("lfm2-8b-a1b"));
  EXPECT_EQ(c.n_layers(), 24);
  EXPECT_EQ(c.mixer(0).kind, MixerKind::short_conv);
  EXPECT_EQ(c.mixer(2).kind, MixerKind::attention);
  for (int i = 0; i < 2; ++i) EXPECT_EQ(c.ffn(i).kind, FfnKind::dense) << i;
  EXPECT_EQ(c.ffn(0).hidden, 7168);
  const FfnSpec& f = c.ffn(2);
  EXPECT_EQ(f.kind, FfnKind::moe);
  EXPECT_EQ(f.n_experts, 32);
  EXPECT_EQ(f.top_k, 4);
  EXPECT_EQ(f.expert_hidden, 1792);
  EXPECT_EQ(f.score, RouterScore::sigmoid);
  EXPECT_EQ(f.gates, GateNorm::normalize);
  EXPECT_TRUE(f.balance_bias);
}

TEST(HfConfigMapping, DeepSeek) {
  ModelConfig lite = load_hf_config(fixture("deepseek-v2-lite"));
  EXPECT_EQ(lite.ffn(0).kind, FfnKind::dense);
  EXPECT_EQ(lite.ffn(1).kind, FfnKind::moe);
  const MixerSpec& m = lite.mixer(0);
  EXPECT_EQ(m.kind, MixerKind::mla);
  EXPECT_EQ(m.q_lora_rank, 0);
  EXPECT_EQ(m.kv_lora_rank, 512);
  EXPECT_DOUBLE_EQ(m.rope->yarn_mscale_all_dim, 0.707);
  EXPECT_FALSE(lite.ffn(1).balance_bias);
  EXPECT_EQ(lite.ffn(1).n_groups, 1);

  ModelConfig v3 = load_hf_config(fixture("deepseek-v3"));
  EXPECT_EQ(v3.n_layers(), 61);  // the MTP layer is not part of the main model
  for (int i = 0; i < 4; ++i) EXPECT_EQ(v3.ffn(i).kind, i < 3 ? FfnKind::dense : FfnKind::moe);
  const FfnSpec& f = v3.ffn(3);
  EXPECT_EQ(f.score, RouterScore::sigmoid);
  EXPECT_EQ(f.gates, GateNorm::normalize);
  EXPECT_TRUE(f.balance_bias);
  EXPECT_EQ(f.n_groups, 8);
  EXPECT_EQ(f.topk_groups, 4);
  EXPECT_DOUBLE_EQ(f.routed_scale, 2.5);
  EXPECT_EQ(v3.mixer(0).q_lora_rank, 1536);
}

TEST(HfConfigMapping, Names) {
  Json j = fixture_json("qwen3-8b");
  j["_name_or_path"] = "Qwen/Qwen3-8B";
  EXPECT_EQ(import_hf_config(j, "whatever.json").name, "Qwen3-8B");
  // A model directory: config.json named after its directory.
  auto dir = std::filesystem::temp_directory_path() / ("wren_hf_" + std::to_string(::getpid())) / "My-Model";
  std::filesystem::create_directories(dir);
  std::ofstream(dir / "config.json") << fixture_json("mistral-7b-v0.1").dump();
  EXPECT_EQ(load_hf_config(dir.string()).name, "My-Model");
  std::filesystem::remove_all(dir.parent_path());
}

// ---- Errors name the file, the field and what was expected -------------------------------------

TEST(HfConfigErrors, UnknownModelType) {
  std::string e = import_error(Json{{"model_type", "foo"}});
  EXPECT_NE(e.find("test.json"), std::string::npos) << e;
  EXPECT_NE(e.find("unknown model_type \"foo\"; supported: llama"), std::string::npos) << e;
  EXPECT_NE(e.find("gpt_oss"), std::string::npos) << e;
  e = import_error(Json{{"hidden_size", 8}});
  EXPECT_NE(e.find("model_type: missing required field"), std::string::npos) << e;
}

TEST(HfConfigErrors, MissingRequiredField) {
  Json j = fixture_json("llama-3.1-8b");
  j.erase("hidden_size");
  std::string e = import_error(j);
  EXPECT_NE(e.find("test.json: hidden_size: missing required field (expected an integer >= 1)"), std::string::npos) << e;
  j = fixture_json("deepseek-v2-lite");
  j.erase("kv_lora_rank");
  EXPECT_NE(import_error(j).find("kv_lora_rank: missing required field"), std::string::npos);
  j = fixture_json("llama-3.1-8b");
  j["rope_scaling"].erase("factor");
  EXPECT_NE(import_error(j).find("rope_scaling.factor: missing required field"), std::string::npos) << import_error(j);
}

TEST(HfConfigErrors, WrongType) {
  Json j = fixture_json("qwen3-30b-a3b");
  j["num_hidden_layers"] = "48";
  std::string e = import_error(j);
  EXPECT_NE(e.find("num_hidden_layers: expected an integer, got \"48\" (string)"), std::string::npos) << e;
  j = fixture_json("gemma-3-4b-it");
  j["text_config"]["num_hidden_layers"] = 34.5;
  e = import_error(j);
  EXPECT_NE(e.find("text_config.num_hidden_layers: expected an integer"), std::string::npos) << e;
  j["text_config"] = "none";
  EXPECT_NE(import_error(j).find("text_config: expected an object"), std::string::npos) << import_error(j);
  j = fixture_json("gpt-oss-20b");
  j["layer_types"] = Json::array({"sliding_attention"});
  EXPECT_NE(import_error(j).find("layer_types: expected a list of 24 layer types"), std::string::npos) << import_error(j);
}

TEST(HfConfigErrors, UnsupportedFeatures) {
  Json j = fixture_json("llama-3.1-8b");
  j["rope_scaling"]["rope_type"] = "dynamic";
  std::string e = import_error(j);
  EXPECT_NE(e.find("rope_scaling.rope_type: unsupported RoPE scaling \"dynamic\""), std::string::npos) << e;
  j = fixture_json("llama-3.1-8b");
  j["hidden_act"] = "relu";
  EXPECT_NE(import_error(j).find("hidden_act: unsupported activation \"relu\""), std::string::npos);
  j = fixture_json("olmoe-1b-7b-0924");
  j["clip_qkv"] = 8.0;
  EXPECT_NE(import_error(j).find("clip_qkv"), std::string::npos);
  j = fixture_json("mixtral-8x7b-v0.1");
  j["num_experts_per_tok"] = 9;
  EXPECT_NE(import_error(j).find("num_experts_per_tok: value 9 exceeds the 8 experts"), std::string::npos) << import_error(j);
  j = fixture_json("deepseek-v3");
  j["topk_method"] = "random";
  EXPECT_NE(import_error(j).find("topk_method: unknown value \"random\""), std::string::npos) << import_error(j);
}

TEST(HfConfigErrors, UnreadableFile) {
  try {
    load_hf_config("/nonexistent/wren/config.json");
    FAIL() << "no error";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("/nonexistent/wren/config.json"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace wren
