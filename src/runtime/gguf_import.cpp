// GGUF -> our model: metadata to an HF-style config.json (mapped by config/hf_config), llama.cpp
// tensor names to the weight map, tokenizer.ggml.* to a tokenizer.json (gguf_import.h).
#include "runtime/gguf_import.h"

#include <algorithm>
#include <cmath>
#include <initializer_list>
#include <set>
#include <unordered_set>

#include "config/hf_config.h"
#include "config/weight_slots.h"
#include "io/gguf_blocks.h"
#include "kernels/ops.h"
#include "text/pretokenize.h"
#include "text/sentencepiece.h"

namespace wren {

namespace {

std::string num(int64_t x) { return std::to_string(x); }

// llama.cpp architecture -> the transformers model_type whose mapping describes it.
const std::vector<std::pair<std::string, std::string>>& architectures() {
  static const std::vector<std::pair<std::string, std::string>> list = {
      {"llama", "llama"}, {"qwen2", "qwen2"}, {"qwen3", "qwen3"}, {"qwen3moe", "qwen3_moe"},
      {"olmoe", "olmoe"}, {"gemma2", "gemma2"}, {"gemma3", "gemma3_text"}, {"deepseek2", "deepseek_v2"},
      {"phi3", "phi3"}, {"smollm3", "smollm3"}, {"gemma", "gemma"}, {"olmo2", "olmo2"},
      {"granite", "granite"}, {"granitemoe", "granitemoe"}, {"exaone4", "exaone4"},
      {"qwen3next", "qwen3_next"}, {"qwen35", "qwen3_5_text"}, {"qwen35moe", "qwen3_5_moe_text"},
      {"lfm2", "lfm2"}, {"lfm2moe", "lfm2_moe"}, {"granitehybrid", "granitemoehybrid"},
  };
  return list;
}

const std::map<std::string, std::string>& layer_names() {
  static const std::map<std::string, std::string> names = {
      {"attn_norm", "attn_norm.weight"}, {"ffn_norm", "ffn_norm.weight"},
      {"attn_post_norm", "post_attention_norm.weight"}, {"ffn_post_norm", "post_ffw_norm.weight"},
      {"attn.wq", "attn_q.weight"}, {"attn.wk", "attn_k.weight"}, {"attn.wv", "attn_v.weight"},
      {"attn.wo", "attn_output.weight"}, {"attn.bq", "attn_q.bias"}, {"attn.bk", "attn_k.bias"},
      {"attn.bv", "attn_v.bias"}, {"attn.bo", "attn_output.bias"}, {"attn.q_norm", "attn_q_norm.weight"},
      {"attn.k_norm", "attn_k_norm.weight"}, {"ffn.w_gate", "ffn_gate.weight"}, {"ffn.w_up", "ffn_up.weight"},
      {"ffn.w_down", "ffn_down.weight"}, {"ffn.router", "ffn_gate_inp.weight"},
      {"ffn.experts.w_gate", "ffn_gate_exps.weight"}, {"ffn.experts.w_up", "ffn_up_exps.weight"},
      {"ffn.experts.w_down", "ffn_down_exps.weight"}, {"ffn.shared.w_gate", "ffn_gate_shexp.weight"},
      {"ffn.shared.w_up", "ffn_up_shexp.weight"}, {"ffn.shared.w_down", "ffn_down_shexp.weight"},
      {"ffn.shared_gate", "ffn_gate_inp_shexp.weight"}, {"ffn.balance_bias", "exp_probs_b.bias"},
      {"attn.wq_a", "attn_q_a.weight"}, {"attn.q_a_norm", "attn_q_a_norm.weight"}, {"attn.wq_b", "attn_q_b.weight"},
      {"attn.wkv_a", "attn_kv_a_mqa.weight"}, {"attn.kv_a_norm", "attn_kv_a_norm.weight"},
      {"attn.wk_b", "attn_k_b.weight"}, {"attn.wv_b", "attn_v_b.weight"},
  };
  return names;
}

// What a tokenizer.ggml.pre name stands for: the split regexes, each cutting the pieces of the
// one before (llama.cpp's regex_exprs; tokenizer.json's Sequence of Split steps), after
// (digits_apart) a first step that isolates every \p{N} character, as Hugging Face's
// Digits(individual_digits) does; ignore_merges as llama.cpp sets it (a piece that is a token
// is not merged up from its bytes).
struct PreSteps {
  std::vector<std::string> regexes;
  bool digits_apart = false, ignore_merges = false;
};

// The regexes of the types without a hand matcher, as their tokenizer.json files write them
// (llama.cpp's llama-vocab.cpp quotes them): PCRE2 runs them (text/pre_tokenizer).
// Mistral's tekken: o200k's cased words without contractions, digits one by one.
constexpr const char* kTekken =
    R"([^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
// DeepSeek-V3 / R1: digits in threes, runs of CJK and kana, then words and punctuation.
const std::vector<std::string> kDeepseekV3 = {
    R"(\p{N}{1,3})", "[\u4e00-\u9fa5\u3040-\u309f\u30a0-\u30ff]+",
    R"([!"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+|[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+| ?[\p{P}\p{S}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)"};
// DeepSeek Coder: line breaks, letters, punctuation, CJK and Hangul runs, single digits.
const std::vector<std::string> kDeepseekCoder = {"[\r\n]", R"(\s?\p{L}+)", R"(\s?\p{P}+)",
                                                 "[\u4e00-\u9fa5\u0800-\u4e00\uac00-\ud7ff]+", R"(\p{N})"};
// GLM-4: cl100k's regex with its contractions spelled out per case.
constexpr const char* kGlm4 =
    R"((?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

// Qwen3.5: qwen2's regex with combining marks (\p{M}) kept inside words and single digits.
constexpr const char* kQwen35 =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

// llama.cpp gives one pre-tokenizer type several names (llama-vocab.cpp); every name of the
// types whose regexes we run is here: LLAMA3, DBRX, SMAUG (cl100k); GPT2, MPT, OLMO, JAIS,
// TRILLION, GRANITE_DOCLING, EXAONE4 (gpt2); QWEN2, STABLELM2, HUNYUAN, SOLAR_OPEN (qwen2);
// GPT4O, MINIMAX_M2 (o200k); SMOLLM's family (\p{N} alone, then GPT-2's regex: SmolLM's own
// tokenizer.json is Digits(individual_digits) then ByteLevel), so DeepSeek-R1's Qwen distills,
// SmolLM2, Falcon3 or Llama 4 files read as their type does; and TEKKEN, DEEPSEEK3_LLM,
// DEEPSEEK_CODER, CHATGLM4, QWEN35 through their regexes.
const std::map<std::string, PreSteps>& pre_steps_table() {
  using text::SplitPattern;
  static const std::map<std::string, PreSteps> table = [] {
    std::map<std::string, PreSteps> t;
    auto add = [&](PreSteps p, std::initializer_list<const char*> names) {
      for (const char* n : names) t.emplace(n, p);
    };
    auto fast = [](SplitPattern p) { return std::vector<std::string>{text::split_pattern_regex(p)}; };
    add({fast(SplitPattern::gpt2)}, {"default", "gpt-2", "gpt2", "olmo", "phi-2", "jina-es", "jina-de", "gigachat", "jina-v2-es",
                                     "jina-v2-de", "a.x-4.0", "mellum", "modern-bert", "jina-v1-en", "jina-v2-code", "roberta-bpe",
                                     "mpt", "jais", "trillion", "granite-docling", "exaone4"});
    add({fast(SplitPattern::cl100k), false, true}, {"llama3", "llama-bpe", "llama-v3", "falcon3", "falcon-h1", "pixtral",
                                                    "midm-2.0", "lfm2", "jina-v5-nano"});
    add({fast(SplitPattern::cl100k)}, {"dbrx", "smaug-bpe"});
    add({fast(SplitPattern::qwen2)}, {"qwen2", "deepseek-r1-qwen", "kormo", "f2llmv2", "stablelm2", "hunyuan", "solar-open"});
    add({fast(SplitPattern::o200k)}, {"gpt-4o", "llama4", "kanana2", "talkie", "minimax-m2"});
    add({fast(SplitPattern::gpt2), true}, {"smollm", "starcoder", "refact", "command-r", "codeshell", "exaone", "minerva-7b",
                                           "mellum2"});
    add({{kTekken}, false, true}, {"tekken"});
    add({kDeepseekV3}, {"deepseek-v3"});
    add({kDeepseekCoder}, {"deepseek-coder"});
    add({{kGlm4}}, {"glm4", "chatglm-bpe"});
    add({{kQwen35}}, {"qwen35"});
    return t;
  }();
  return table;
}

std::optional<PreSteps> pre_steps(const std::string& pre) {
  auto it = pre_steps_table().find(pre);
  if (it == pre_steps_table().end()) return std::nullopt;
  return it->second;
}

std::string known_pres() {
  std::string s;
  for (const auto& [name, steps] : pre_steps_table()) s += (s.empty() ? "" : ", ") + name;
  return s;
}

// Llama 3's RoPE scaling as llama.cpp writes it: not its parameters but the divisor of every
// frequency, rope_freqs.weight[i] = f_i / f'_i (convert_hf_to_gguf.py, from transformers'
// llama3 rule). The divisor is 1 where the wavelength 2 pi / f_i is below L / high, `factor`
// above L / low, and between them 1 / ((1 - s_i) / factor + s_i) with
// s_i = (L / wavelength_i - low) / (high - low): linear in 1 / wavelength_i, with only
// L / (high - low) and low / (high - low) to find. So `factor` is the largest divisor, two
// divisors in between give the line, and L = 8192 (every Llama 3.x) gives low and high, which
// are rounded to integers when within 1e-4 of one (Llama's 1 and 4). Every divisor is then
// recomputed through the engine's own rule (kernels::rope_inv_freq) and must agree to 1e-5.
// The parameters as transformers' rope_scaling, or null when every divisor is 1.
Json llama3_rope_scaling(const GgufTensor& t, double theta, int64_t rotary_dim, const std::string& path) {
  const std::string what = path + ": tensor rope_freqs.weight";
  if (rotary_dim < 2 || rotary_dim % 2 || rotary_dim > (1 << 16) || t.ne.size() != 1 || t.ne[0] != rotary_dim / 2)
    throw IoError(what + " has shape " + shape_text(t.shape()) + ", expected [" + std::to_string(rotary_dim / 2) +
                  "] (half the rotary dimension)");
  const int64_t n = rotary_dim / 2;
  std::vector<float> divisor(static_cast<size_t>(n));
  gguf_blocks::dequantize_row(t.type, t.data, n, divisor.data());
  double factor = 1;
  for (float d : divisor) {
    if (!(d >= 1.0f - 1e-6f && d < 1e6f)) throw IoError(what + ": divisor " + std::to_string(d) + " (expected >= 1)");
    factor = std::max(factor, double(d));
  }
  if (factor < 1 + 1e-6) return nullptr;
  constexpr double kPi = 3.14159265358979323846, kContext = 8192;
  std::vector<std::pair<double, double>> line;  // (1 / wavelength, s)
  for (int64_t i = 0; i < n; ++i) {
    const double d = divisor[size_t(i)];
    if (d < 1 + 1e-5 || d > factor * (1 - 1e-5)) continue;
    const double inv_wavelength = std::pow(theta, -2.0 * double(i) / double(rotary_dim)) / (2 * kPi);
    line.emplace_back(inv_wavelength, (1 / d - 1 / factor) / (1 - 1 / factor));
  }
  if (line.size() < 2)
    throw IoError(what + ": " + std::to_string(line.size()) + " divisors between 1 and " + std::to_string(factor) +
                  "; Llama-3 scaling is read from at least two");
  const auto [x0, s0] = line.front();
  const auto [x1, s1] = line.back();
  const double slope = (s1 - s0) / (x1 - x0), intercept = s0 - slope * x0;  // s = slope / wavelength + intercept
  auto tidy = [](double v) { return std::fabs(v - std::round(v)) < 1e-4 ? std::round(v) : v; };
  const double width = kContext / slope, low = tidy(-intercept * width), high = tidy(low + width);
  kernels::RopeScaling scaling{factor, low, high, int(kContext)};
  if (!(low > 0 && high > low)) throw IoError(what + ": the divisors are not Llama-3's curve");
  const std::vector<float> expected = llama3_divisors(int(rotary_dim), theta, scaling);
  for (int64_t i = 0; i < n; ++i) {
    const double want = divisor[size_t(i)], got = expected[size_t(i)];
    if (std::fabs(got - want) > 1e-5 * want)
      throw IoError(what + ": divisor " + std::to_string(i) + " is " + std::to_string(want) + ", Llama-3 scaling (factor " +
                    std::to_string(factor) + ", low " + std::to_string(low) + ", high " + std::to_string(high) +
                    ") gives " + std::to_string(got) + ": not Llama-3's curve");
  }
  return {{"rope_type", "llama3"}, {"factor", factor}, {"low_freq_factor", low}, {"high_freq_factor", high},
          {"original_max_position_embeddings", int64_t(kContext)}};
}

// deepseek2's metadata as the deepseek_v2 config.json keys config/hf_config maps: MLA's widths
// (key_length_mla / value_length_mla in files with split k_b / v_b, else key_length and
// value_length), the leading dense layers, shared experts, the routing (gating function 1 =
// softmax, 2 = sigmoid; expert_weights_norm, expert_weights_scale; group-limited when
// expert_group_count > 1; selection biases when exp_probs_b tensors exist) and YaRN
// (yarn_log_multiplier = 0.1 mscale_all_dim, as llama.cpp's converter writes it).
void deepseek2_config(const GgufFile& f, Json& hf) {
  const std::string a = "deepseek2.";
  auto opt = [&](const std::string& k) { return f.integer_or_none(a + k); };
  const int64_t rope = f.integer(a + "rope.dimension_count");
  auto mla_or = [&](const char* mla, const char* legacy) {
    if (auto v = opt(mla)) return *v;
    return f.integer(a + legacy);
  };
  const int64_t key = mla_or("attention.key_length_mla", "attention.key_length");
  if (key < rope)
    throw IoError(f.path() + ": metadata " + a + "attention.key_length = " + num(key) + " is below rope.dimension_count " + num(rope));
  const int64_t q_lora = opt("attention.q_lora_rank").value_or(0);
  hf["q_lora_rank"] = q_lora ? Json(q_lora) : Json(nullptr);
  hf["kv_lora_rank"] = f.integer(a + "attention.kv_lora_rank");
  hf["qk_rope_head_dim"] = rope, hf["qk_nope_head_dim"] = key - rope;
  hf["v_head_dim"] = mla_or("attention.value_length_mla", "attention.value_length");
  hf["first_k_dense_replace"] = opt("leading_dense_block_count").value_or(0);
  hf.erase("head_dim"), hf.erase("num_experts");
  if (auto e = opt("expert_count"); e && *e > 0) {
    hf["n_routed_experts"] = *e;
    hf["n_shared_experts"] = opt("expert_shared_count").value_or(0);
    hf["routed_scaling_factor"] = f.number_or_none(a + "expert_weights_scale").value_or(1.0);
    const GgufValue* norm = f.value(a + "expert_weights_norm");
    hf["norm_topk_prob"] = norm && norm->type == GgufType::boolean && norm->i != 0;
    const int64_t gating = opt("expert_gating_func").value_or(1);
    if (gating != 1 && gating != 2)
      throw IoError(f.path() + ": metadata " + a + "expert_gating_func = " + num(gating) + ": expected 1 (softmax) or 2 (sigmoid)");
    hf["scoring_func"] = gating == 2 ? "sigmoid" : "softmax";
    const int64_t groups = opt("expert_group_count").value_or(1);
    const bool bias = f.find("blk." + num(hf["first_k_dense_replace"].get<int64_t>()) + ".exp_probs_b.bias") != nullptr;
    hf["topk_method"] = bias ? "noaux_tc" : groups > 1 ? "group_limited_greedy" : "greedy";
    hf["n_group"] = groups, hf["topk_group"] = opt("expert_group_used_count").value_or(groups);
  }
  const GgufValue* type = f.value(a + "rope.scaling.type");
  if (type && (type->type != GgufType::string || (type->s != "none" && type->s != "yarn")))
    throw IoError(f.path() + ": metadata " + a + "rope.scaling.type: expected \"none\" or \"yarn\"");
  if (type && type->s == "yarn") {
    const double mscale = f.number_or_none(a + "rope.scaling.yarn_log_multiplier").value_or(0.0) / 0.1;
    hf["rope_scaling"] = {{"type", "yarn"}, {"factor", f.number_or_none(a + "rope.scaling.factor").value_or(1.0)},
                          {"original_max_position_embeddings",
                           opt("rope.scaling.original_context_length").value_or(hf["max_position_embeddings"].get<int64_t>())},
                          {"mscale", mscale}, {"mscale_all_dim", mscale}};
  }
}

// Phi-3's LongRoPE as llama.cpp's converter writes it: the factors as the tensors
// rope_factors_short / rope_factors_long (half the rotary dimension each), the original context
// and the attention factor as metadata; as the config.json keys config/hf_config maps (which
// checks every factor).
void phi3_longrope(const GgufFile& f, int64_t rotary_dim, Json& hf) {
  const GgufTensor* shorter = f.find("rope_factors_short.weight");
  const GgufTensor* longer = f.find("rope_factors_long.weight");
  if (!shorter && !longer) return;
  if (!shorter || !longer)
    throw IoError(f.path() + ": LongRoPE needs both rope_factors_short.weight and rope_factors_long.weight");
  auto factors = [&](const GgufTensor& t) {
    if (rotary_dim < 2 || rotary_dim % 2 || rotary_dim > (1 << 16) || t.ne.size() != 1 || t.ne[0] != rotary_dim / 2)
      throw IoError(f.path() + ": tensor " + t.name + " has shape " + shape_text(t.shape()) + ", expected [" +
                    num(rotary_dim / 2) + "] (half the rotary dimension)");
    std::vector<float> v(static_cast<size_t>(rotary_dim / 2));
    gguf_blocks::dequantize_row(t.type, t.data, int64_t(v.size()), v.data());
    return Json(std::vector<double>(v.begin(), v.end()));
  };
  Json scaling = {{"rope_type", "longrope"}, {"short_factor", factors(*shorter)}, {"long_factor", factors(*longer)}};
  if (auto a = f.number_or_none("phi3.rope.scaling.attn_factor")) scaling["attention_factor"] = *a;
  if (auto o = f.integer_or_none("phi3.rope.scaling.original_context_length")) hf["original_max_position_embeddings"] = *o;
  hf["rope_scaling"] = scaling;
}

// llama.cpp's attention.sliding_window_pattern as HF's layer_types: a flag per layer (true:
// sliding), or a count n whose groups of n layers end in one full layer (0: every layer
// sliding), `fallback` when the key is absent (llama_hparams::set_swa_pattern).
Json sliding_layer_types(const GgufFile& f, const std::string& key, int64_t n_layers, int64_t fallback) {
  if (n_layers < 1 || n_layers > kMaxLayers)
    throw IoError(f.path() + ": block_count " + num(n_layers) + ": expected 1 to " + num(kMaxLayers) + " layers");
  const GgufValue* v = f.value(key);
  std::vector<bool> sliding(static_cast<size_t>(n_layers));
  if (v && v->type == GgufType::array) {
    if (v->elem != GgufType::boolean || int64_t(v->ints.size()) != n_layers)
      throw IoError(f.path() + ": metadata " + key + ": expected " + num(n_layers) + " booleans, one per layer");
    for (int64_t i = 0; i < n_layers; ++i) sliding[size_t(i)] = v->ints[size_t(i)] != 0;
  } else {
    const int64_t n = v ? f.integer(key) : fallback;
    if (n < 0) throw IoError(f.path() + ": metadata " + key + ": expected a layer count >= 0, got " + num(n));
    for (int64_t i = 0; i < n_layers; ++i) sliding[size_t(i)] = n == 0 || i % n < n - 1;
  }
  Json types = Json::array();
  for (bool b : sliding) types.push_back(b ? "sliding_attention" : "full_attention");
  return types;
}

// A hybrid's attention.head_count_kv: one count per layer, 0 for its recurrent layers (the
// others' counts must agree), or one count for all. Sets num_key_value_heads and layer_types
// (`attention` / `recurrent` per layer, as transformers names them).
void hybrid_layer_types(const GgufFile& f, const std::string& a, const char* attention, const char* recurrent, Json& hf) {
  const int64_t n = hf["num_hidden_layers"].get<int64_t>();
  const GgufValue* kv = f.value(a + "attention.head_count_kv");
  if (!kv) throw IoError(f.path() + ": metadata " + a + "attention.head_count_kv: missing (one count per layer, 0 for " + recurrent + " layers)");
  Json types = Json::array();
  int64_t heads = 0;
  for (int64_t i = 0; i < n; ++i) {
    int64_t h = 0;
    if (kv->type == GgufType::array) {
      GgufValue element;
      element.type = kv->elem;
      if (!element.is_int() || int64_t(kv->ints.size()) != n)
        throw IoError(f.path() + ": metadata " + a + "attention.head_count_kv: expected " + num(n) + " integers, one per layer");
      h = kv->ints[size_t(i)];
    } else {
      h = f.integer(a + "attention.head_count_kv");
    }
    if (h < 0 || (h > 0 && heads > 0 && h != heads))
      throw IoError(f.path() + ": metadata " + a + "attention.head_count_kv[" + num(i) + "] = " + num(h) + ": expected 0 (a " +
                    recurrent + " layer) or the attention layers' common count");
    if (h > 0) heads = h;
    types.push_back(h > 0 ? attention : recurrent);
  }
  if (heads > 0) hf["num_key_value_heads"] = heads;
  hf["layer_types"] = types;
}

// Granite 4.0-H (granitehybrid): attention.head_count_kv per layer (hybrid_layer_types); the
// Mamba-2 widths under ssm.* (time_step_rank heads, inner_size channels, state_size, group_count,
// conv_kernel), the conv's bias where the first Mamba-2 layer has one; attention rotates only
// where rope.scaling.finetuned is true or absent (llama.cpp's converter writes false for
// position_embedding_type "nope"); feed_forward_length is the shared MLP's width, or with
// experts an expert's (the shared one's is expert_shared_feed_forward_length).
void granite_hybrid_config(const GgufFile& f, const std::string& a, Json& hf) {
  hybrid_layer_types(f, a, "attention", "mamba", hf);
  const int64_t d = hf["hidden_size"].get<int64_t>(), inner = f.integer(a + "ssm.inner_size");
  const int64_t heads = f.integer(a + "ssm.time_step_rank");
  if (d <= 0 || inner % d || heads <= 0 || inner % heads)
    throw IoError(f.path() + ": metadata " + a + "ssm.inner_size = " + num(inner) + ": expected a multiple of embedding_length " +
                  num(d) + " split into ssm.time_step_rank = " + num(heads) + " heads");
  hf["mamba_expand"] = inner / d, hf["mamba_n_heads"] = heads, hf["mamba_d_head"] = inner / heads;
  hf["mamba_d_state"] = f.integer(a + "ssm.state_size");
  hf["mamba_n_groups"] = f.integer(a + "ssm.group_count");
  hf["mamba_d_conv"] = f.integer(a + "ssm.conv_kernel");
  const auto& types = hf["layer_types"];
  const auto first = std::find(types.begin(), types.end(), "mamba");
  hf["mamba_conv_bias"] = first != types.end() && f.find("blk." + num(first - types.begin()) + ".ssm_conv1d.bias") != nullptr;
  const GgufValue* rope = f.value(a + "rope.scaling.finetuned");
  hf["position_embedding_type"] = rope && rope->type == GgufType::boolean && rope->i == 0 ? "nope" : "rope";
  // With experts, feed_forward_length is an expert's width and the shared MLP's has its own key.
  if (f.integer_or_none(a + "expert_count").value_or(0) > 0) {
    if (auto shared = f.integer_or_none(a + "expert_shared_feed_forward_length")) hf["shared_intermediate_size"] = *shared;
  } else if (hf.contains("intermediate_size")) {
    hf["shared_intermediate_size"] = hf["intermediate_size"];
  }
}

// LFM2: attention.head_count_kv per layer (hybrid_layer_types); shortconv.l_cache is the conv's
// taps; feed_forward_length is the MLP width as llama.cpp's converter already adjusted it;
// norm_eps is the RMSNorm's.
void lfm2_config(const GgufFile& f, const std::string& a, Json& hf) {
  hybrid_layer_types(f, a, "full_attention", "conv", hf);
  hf["conv_L_cache"] = f.integer(a + "shortconv.l_cache");
  hf["block_auto_adjust_ff_dim"] = false;
  if (auto eps = f.number_or_none(a + "attention.layer_norm_rms_epsilon")) hf["norm_eps"] = *eps;
  if (a != "lfm2moe.") return;
  // LFM2-MoE: sigmoid routing (expert_gating_func 2), the chosen weights renormalised and scaled
  // by expert_weights_scale where set; the selection biases are exp_probs_b.
  const int64_t dense = f.integer_or_none(a + "leading_dense_block_count").value_or(0);
  if (const int64_t gating = f.integer_or_none(a + "expert_gating_func").value_or(2); gating != 2)
    throw IoError(f.path() + ": metadata " + a + "expert_gating_func = " + num(gating) + ": LFM2-MoE routes by sigmoid (2)");
  hf["num_dense_layers"] = dense;
  hf["norm_topk_prob"] = true;
  if (auto scale = f.number_or_none(a + "expert_weights_scale"); scale && *scale != 0.0) hf["routed_scaling_factor"] = *scale;
  hf["use_expert_bias"] = f.find("blk." + num(dense) + ".exp_probs_b.bias") != nullptr;
}

// Qwen3-Next and Qwen3.5 (qwen3next, qwen35, qwen35moe): the Gated DeltaNet widths under
// ssm.* (state_size d_k, group_count key heads, time_step_rank value heads, inner_size value
// heads x d_v); the recurrent layers as flags or, without them, every full_attention_interval-th
// layer full. block_count also counts the multi-token-prediction layers (nextn_predict_layers)
// that follow the model's own: they are not part of its forward pass and are left out.
void qwen_hybrid_config(const GgufFile& f, const std::string& a, Json& hf) {
  const int64_t all = hf["num_hidden_layers"].get<int64_t>(), mtp = f.integer_or_none(a + "nextn_predict_layers").value_or(0);
  if (mtp < 0 || mtp >= all)
    throw IoError(f.path() + ": metadata " + a + "nextn_predict_layers = " + num(mtp) + ": expected 0 to " + num(all - 1) +
                  " (block_count " + num(all) + " includes them)");
  const int64_t n = all - mtp;
  hf["num_hidden_layers"] = n;
  hf["linear_conv_kernel_dim"] = f.integer(a + "ssm.conv_kernel");
  hf["linear_key_head_dim"] = f.integer(a + "ssm.state_size");
  hf["linear_num_key_heads"] = f.integer(a + "ssm.group_count");
  const int64_t hv = f.integer(a + "ssm.time_step_rank"), inner = f.integer(a + "ssm.inner_size");
  if (hv < 1 || inner < 1 || inner % hv)
    throw IoError(f.path() + ": metadata " + a + "ssm.inner_size = " + num(inner) + ": expected a positive multiple of " +
                  a + "ssm.time_step_rank = " + num(hv) + " (value heads x value head width)");
  hf["linear_num_value_heads"] = hv, hf["linear_value_head_dim"] = inner / hv;
  if (const GgufValue* v = f.value(a + "attention.recurrent_layers")) {
    if (v->type != GgufType::array || v->elem != GgufType::boolean || int64_t(v->ints.size()) != all)
      throw IoError(f.path() + ": metadata " + a + "attention.recurrent_layers: expected " + num(all) + " booleans, one per block");
    Json types = Json::array();
    for (int64_t i = 0; i < n; ++i) types.push_back(v->ints[size_t(i)] ? "linear_attention" : "full_attention");
    hf["layer_types"] = types;
  } else if (auto interval = f.integer_or_none(a + "full_attention_interval")) {
    hf["full_attention_interval"] = *interval;
  }
  if (auto shared = f.integer_or_none(a + "expert_shared_feed_forward_length")) hf["shared_expert_intermediate_size"] = *shared;
  hf["norm_topk_prob"] = true;  // llama.cpp renormalises the chosen experts' weights
}

}  // namespace

std::vector<float> llama3_divisors(int rotary_dim, double theta, const kernels::RopeScaling& scaling) {
  const std::vector<float> plain = kernels::rope_inv_freq(rotary_dim, theta), scaled = kernels::rope_inv_freq(rotary_dim, theta, scaling);
  std::vector<float> d(plain.size());
  for (size_t i = 0; i < d.size(); ++i) d[i] = float(double(plain[i]) / double(scaled[i]));
  return d;
}

std::string gguf_tensor_name(const std::string& wren_name, bool gemma) {
  (void)gemma;
  auto [layer, rel] = slots::split_name(wren_name);
  if (layer < 0) {
    if (rel == "embed") return "token_embd.weight";
    if (rel == "lm_head") return "output.weight";
    if (rel == "final_norm") return "output_norm.weight";
    return "";
  }
  auto it = layer_names().find(rel);
  return it == layer_names().end() ? "" : "blk." + num(layer) + "." + it->second;
}

namespace {

// The metadata of a GGUF of architecture `arch` (keys under "arch."), under transformers'
// config.json names: the shapes every architecture has, then each architecture's own. RoPE
// is added after (gguf_rope_config).
Json gguf_hf_metadata(const GgufFile& f, const std::string& arch, const std::string& model_type, int64_t vocab) {
  const std::string a = arch + ".";
  Json hf = {{"model_type", model_type},
             {"hidden_size", f.integer(a + "embedding_length")},
             {"num_hidden_layers", f.integer(a + "block_count")},
             {"max_position_embeddings", f.integer(a + "context_length")},
             {"num_attention_heads", f.integer(a + "attention.head_count")},
             {"vocab_size", vocab},
             {"tie_word_embeddings", f.find("output.weight") == nullptr}};
  auto copy_int = [&](const std::string& key, const char* name) {
    if (auto v = f.integer_or_none(a + key)) hf[name] = *v;
  };
  auto copy_num = [&](const std::string& key, const char* name) {
    if (auto v = f.number_or_none(a + key)) hf[name] = *v;
  };
  copy_int("feed_forward_length", "intermediate_size");
  if (arch == "lfm2" || arch == "lfm2moe") lfm2_config(f, a, hf);
  else if (arch == "granitehybrid") granite_hybrid_config(f, a, hf);
  else copy_int("attention.head_count_kv", "num_key_value_heads");
  copy_int("attention.key_length", "head_dim");
  copy_num("attention.layer_norm_rms_epsilon", "rms_norm_eps");
  copy_num("rope.freq_base", "rope_theta");
  copy_int("expert_count", "num_experts");
  copy_int("expert_used_count", "num_experts_per_tok");
  copy_int("expert_feed_forward_length", "moe_intermediate_size");
  copy_int("attention.sliding_window", "sliding_window");
  copy_num("attn_logit_softcapping", "attn_logit_softcapping");
  copy_num("final_logit_softcapping", "final_logit_softcapping");
  if (arch.rfind("granite", 0) == 0) {  // the multipliers under llama.cpp's names
    copy_num("embedding_scale", "embedding_multiplier");
    copy_num("residual_scale", "residual_multiplier");
    copy_num("attention.scale", "attention_multiplier");
    copy_num("logit_scale", "logits_scaling");  // a divisor, as transformers' logits_scaling
    if (hf.contains("num_experts")) hf["num_local_experts"] = hf["num_experts"];
  }
  if (arch == "qwen3moe") hf["norm_topk_prob"] = true;  // llama.cpp renormalises Qwen3-MoE's chosen weights
  if (arch == "qwen3next" || arch == "qwen35" || arch == "qwen35moe") qwen_hybrid_config(f, a, hf);
  if (arch == "olmoe" && !hf.contains("intermediate_size")) copy_int("expert_feed_forward_length", "intermediate_size");
  const int64_t layers = hf["num_hidden_layers"].get<int64_t>();
  if (arch == "gemma3") {
    hf["rope_local_base_freq"] = 10000.0;  // llama.cpp's fixed base for the local layers
    hf["layer_types"] = sliding_layer_types(f, a + "attention.sliding_window_pattern", layers, 6);
  }
  if (arch == "exaone4" && hf.value("sliding_window", int64_t(0)) > 0)
    hf["layer_types"] = sliding_layer_types(f, a + "attention.sliding_window_pattern", layers, 4);
  if (arch == "olmo2" && hf.value("sliding_window", int64_t(0)) > 0) {  // Olmo 3 (llama.cpp's olmo2 with windows)
    hf["model_type"] = "olmo3";
    hf["layer_types"] = sliding_layer_types(f, a + "attention.sliding_window_pattern", layers, 4);
  }
  return hf;
}

// RoPE's settings into hf: DeepSeek-V2's own, or rope.scaling.type (linear, YaRN), or
// rope_freqs.weight (Llama 3's per-frequency divisors), Phi-3's LongRoPE, SmolLM3's layers
// without RoPE, and a rotary part narrower than the head.
void gguf_rope_config(const GgufFile& f, const std::string& arch, const std::string& path, Json& hf) {
  const std::string a = arch + ".";
  if (arch == "deepseek2") {
    deepseek2_config(f, hf);
  } else if (auto type = f.value(a + "rope.scaling.type")) {
    if (type->type != GgufType::string) throw IoError(path + ": metadata " + a + "rope.scaling.type: expected a string");
    if (type->s == "linear") {
      hf["rope_scaling"] = {{"rope_type", "linear"}, {"factor", f.number_or_none(a + "rope.scaling.factor").value_or(1.0)}};
    } else if (type->s == "yarn") {  // as llama.cpp's converter transcribes transformers' rope_parameters
      Json scaling = {{"rope_type", "yarn"}, {"factor", f.number_or_none(a + "rope.scaling.factor").value_or(1.0)}};
      if (auto o = f.integer_or_none(a + "rope.scaling.original_context_length")) scaling["original_max_position_embeddings"] = *o;
      if (auto v = f.number_or_none(a + "rope.scaling.yarn_beta_fast")) scaling["beta_fast"] = *v;
      if (auto v = f.number_or_none(a + "rope.scaling.yarn_beta_slow")) scaling["beta_slow"] = *v;
      if (auto v = f.number_or_none(a + "rope.scaling.yarn_attn_factor")) scaling["attention_factor"] = *v;
      hf["rope_scaling"] = scaling;
    } else if (type->s != "none") {
      throw IoError(path + ": metadata " + a + "rope.scaling.type \"" + type->s + "\": supported are none, linear and yarn");
    }
  }
  const int64_t head = hf.contains("head_dim") ? hf["head_dim"].get<int64_t>()
                                               : hf["hidden_size"].get<int64_t>() / std::max<int64_t>(1, hf["num_attention_heads"].get<int64_t>());
  const std::optional<int64_t> rope_dims = f.integer_or_none(a + "rope.dimension_count");
  if (const GgufTensor* divisors = f.find("rope_freqs.weight")) {
    if (hf.contains("rope_scaling"))
      throw IoError(path + ": both rope.scaling.type and rope_freqs.weight (per-frequency RoPE divisors) are given");
    const double theta = hf.contains("rope_theta") ? hf["rope_theta"].get<double>() : 10000.0;
    if (!(theta > 1 && theta < 1e12)) throw IoError(path + ": metadata " + a + "rope.freq_base: expected a number above 1");
    Json scaling = llama3_rope_scaling(*divisors, theta, rope_dims.value_or(head), path);
    if (!scaling.is_null()) hf["rope_scaling"] = scaling;
  }
  if (arch == "phi3") phi3_longrope(f, rope_dims.value_or(head), hf);
  if (arch == "smollm3") hf["no_rope_layer_interval"] = 4;  // fixed in llama.cpp (llama_model_smollm3)
  if (rope_dims && arch != "deepseek2" && *rope_dims != head && head > 0)
    hf["partial_rotary_factor"] = double(*rope_dims) / double(head);
}

}  // namespace

GgufModel::GgufModel(const std::string& path) : file_(path) {
  arch_ = file_.string("general.architecture");
  auto it = std::find_if(architectures().begin(), architectures().end(), [&](auto& a) { return a.first == arch_; });
  if (it == architectures().end()) {
    std::string list;
    for (auto& a : architectures()) list += (list.empty() ? "" : ", ") + a.first;
    throw IoError(path + ": general.architecture \"" + arch_ + "\" is not supported; supported: " + list);
  }
  const GgufTensor* embed = file_.find("token_embd.weight");
  if (!embed || embed->ne.size() != 2) throw IoError(path + ": no 2-D tensor token_embd.weight (the token embedding)");
  hf_ = gguf_hf_metadata(file_, arch_, it->second, embed->ne[1]);
  gguf_rope_config(file_, arch_, path, hf_);
  config_ = import_hf_config(hf_, path);
}

// A shape without its leading 1s: llama-quantize writes a tensor's dimensions up to its last one
// above 1 (ggml_n_dims), so [1, n] as gguf-py wrote it (Granite 4.0-H's ssm_norm for one group)
// comes back as [n]. The elements and their order are the same.
static Shape without_leading_ones(Shape s) {
  while (s.size() > 1 && s.front() == 1) s.erase(s.begin());
  return s;
}

const GgufTensor& GgufModel::source(const std::string& name, const Shape& expect) const {
  const GgufTensor* t = file_.find(name);
  if (!t) throw IoError(file_.path() + ": tensor " + name + " " + shape_text(expect) + " is missing (architecture " + arch_ + ")");
  if (without_leading_ones(t->shape()) != without_leading_ones(expect))
    throw IoError(file_.path() + ": tensor " + name + " has shape " + shape_text(t->shape()) + ", expected " +
                  shape_text(expect) + " from the metadata");
  return *t;
}

ElementRun GgufModel::rows(const GgufTensor& t, int64_t first, int64_t count, float add) const {
  const uint64_t width = uint64_t(t.row_values());
  return ElementRun{nullptr, &t, &file_.mapping(), uint64_t(first) * width, uint64_t(count) * width, add};
}

// Per head of d rows: llama.cpp's row 2i + a becomes our row a d/2 + i.
std::vector<ElementRun> GgufModel::permuted_rows(const std::string& name, const Shape& expect, int heads) const {
  const GgufTensor& t = source(name, expect);
  const int64_t d = expect[0] / heads;
  std::vector<ElementRun> out;
  for (int64_t h = 0; h < heads; ++h)
    for (int64_t a = 0; a < 2; ++a)
      for (int64_t i = 0; i < d / 2; ++i) out.push_back(rows(t, h * d + 2 * i + a, 1));
  return out;
}

std::string GgufModel::gguf_name(const TensorInfo& t) const {
  std::string name = gguf_tensor_name(t.name, arch_.rfind("gemma", 0) == 0);
  if (name.empty()) throw IoError(file_.path() + ": tensor " + t.name + " has no GGUF counterpart for architecture " + arch_);
  return name;
}

// MLA (deepseek2): llama.cpp's converter keeps Hugging Face's rows, so the rope rows are
// de-interleaved as for an HF folder (io/hf_checkpoint.cpp: our row j <- 2j, r/2 + j <- 2j + 1).
// wk_b / wv_b are, per head, the nope-key rows and the value rows of attn_kv_b, or come from
// the split tensors of newer files: attn_v_b [heads, v, lora] as it is, attn_k_b stored
// transposed per head ([heads, lora, nope]: our row (h, e), column c <- element h lora nope +
// c nope + e, a strided run).
std::vector<ElementRun> GgufModel::mla_runs(const std::string& rel, const std::string& name, const TensorInfo& t,
                                            const MixerSpec& m) const {
  const int64_t h = m.n_heads, nope = m.qk_nope_dim, rope = m.qk_rope_dim, dqk = nope + rope, v = m.v_head_dim;
  const int64_t lora = m.kv_lora_rank;
  auto rope_rows = [&](std::vector<ElementRun>& out, const GgufTensor& g, int64_t first) {
    for (int64_t j = 0; j < rope; ++j) out.push_back(rows(g, first + (j < rope / 2 ? 2 * j : 2 * (j - rope / 2) + 1), 1));
  };
  std::vector<ElementRun> out;
  if (rel == "wq" || rel == "wq_b") {
    const GgufTensor& g = source(name, t.shape);
    for (int64_t hd = 0; hd < h; ++hd) {
      if (nope) out.push_back(rows(g, hd * dqk, nope));
      rope_rows(out, g, hd * dqk + nope);
    }
    return out;
  }
  if (rel == "wkv_a") {
    const GgufTensor& g = source(name, t.shape);
    out.push_back(rows(g, 0, lora));
    rope_rows(out, g, lora);
    return out;
  }
  const std::string kv_b = name.substr(0, name.find(".attn_") + 1) + "attn_kv_b.weight";
  if (file_.find(kv_b)) {
    const GgufTensor& g = source(kv_b, {h * (nope + v), lora});
    for (int64_t hd = 0; hd < h; ++hd)
      out.push_back(rel == "wk_b" ? rows(g, hd * (nope + v), nope) : rows(g, hd * (nope + v) + nope, v));
    return out;
  }
  if (rel == "wv_b") return {rows(source(name, {h, v, lora}), 0, h * v)};
  const GgufTensor& g = source(name, {h, lora, nope});
  if (ggml_block_values(g.type) != 1)
    throw IoError(file_.path() + ": tensor " + name + " is " + to_string(g.type) + ": the transposed split key tensor is read "
                  "only from F32, F16 or BF16 (convert the Hugging Face folder, or a file with attn_kv_b)");
  for (int64_t hd = 0; hd < h; ++hd)
    for (int64_t e = 0; e < nope; ++e)
      out.push_back(ElementRun{nullptr, &g, &file_.mapping(), uint64_t(hd * lora * nope + e), uint64_t(lora), 0.0f,
                               uint64_t(nope)});
  return out;
}

// Phi-3's fused tensors, read where the split ones are absent: attn_qkv holds the rows of q,
// then k, then v; ffn_up the gate rows, then the up rows (llama.cpp's SwiGLU of one tensor
// takes silu of its first half times its second).
std::optional<std::vector<ElementRun>> GgufModel::fused_runs(int layer, const std::string& rel, const std::string& name,
                                                             const TensorInfo& t) const {
  if (layer < 0) return std::nullopt;
  const std::string blk = "blk." + num(layer) + ".";
  if ((rel == "attn.wq" || rel == "attn.wk" || rel == "attn.wv") && !file_.find(name) && file_.find(blk + "attn_qkv.weight")) {
    const MixerSpec& m = config_.mixer(layer);
    const int64_t q = int64_t(m.n_heads) * m.head_dim, kv = int64_t(m.n_kv_heads) * m.head_dim;
    const GgufTensor& g = source(blk + "attn_qkv.weight", {q + 2 * kv, config_.d_model});
    return std::vector<ElementRun>{rows(g, rel == "attn.wq" ? 0 : rel == "attn.wk" ? q : q + kv, t.shape[0])};
  }
  if ((rel == "ffn.w_gate" || rel == "ffn.w_up") && !file_.find(blk + "ffn_gate.weight") && file_.find(blk + "ffn_up.weight")) {
    const int64_t hidden = t.shape[0];
    const GgufTensor& g = source(blk + "ffn_up.weight", {2 * hidden, t.shape[1]});
    return std::vector<ElementRun>{rows(g, rel == "ffn.w_gate" ? 0 : hidden, hidden)};
  }
  return std::nullopt;
}

// Qwen3-Next and Qwen3.5. Full attention: attn_q holds, per head, head_dim query rows and then
// head_dim gate rows (as q_proj does). Gated DeltaNet: attn_qkv the rows of q, k, v; ssm_conv1d
// the conv taps of the same channels; attn_gate z, ssm_beta b, ssm_alpha a, ssm_dt.bias dt_bias,
// ssm_out out_proj; ssm_a is -e^{A_log}, read back as A_log; every norm gain is stored as the
// gain the forward pass multiplies by (1 + w for the zero-centred ones), so 1 is taken off.
// llama.cpp's Qwen3.5 converter lays the value heads out tiled over the key heads (file head
// j h + g is value head j of key head g) where transformers groups them (head g r + j, r value
// heads per key head): every per-value-head row, conv channel and out_proj column is read
// from its tiled place. Qwen3-Next files keep transformers' order.
std::optional<std::vector<ElementRun>> GgufModel::qwen_hybrid_runs(int layer, const std::string& rel, const TensorInfo& t) const {
  if (layer < 0 || (arch_ != "qwen3next" && arch_ != "qwen35" && arch_ != "qwen35moe")) return std::nullopt;
  const std::string blk = "blk." + num(layer) + ".";
  const MixerSpec& m = config_.mixer(layer);
  if (rel == "ffn_norm")  // the FFN's pre-norm keeps transformers' name, post_attention_layernorm
    return std::vector<ElementRun>{rows(source(blk + "post_attention_norm.weight", t.shape), 0, 1, -1.0f)};
  if (rel == "ffn.shared_gate" && file_.find(blk + "ffn_gate_inp_shexp.weight") &&
      file_.find(blk + "ffn_gate_inp_shexp.weight")->ne.size() == 1)  // stored [d]: our [1, d] row
    return std::vector<ElementRun>{rows(source(blk + "ffn_gate_inp_shexp.weight", {t.shape[1]}), 0, 1)};
  if (m.kind == MixerKind::attention && m.output_gate && (rel == "attn.wq" || rel == "attn.wg")) {
    const GgufTensor& g = source(blk + "attn_q.weight", {2 * t.shape[0], t.shape[1]});
    std::vector<ElementRun> out;
    for (int64_t h = 0; h < m.n_heads; ++h) out.push_back(rows(g, (2 * h + (rel == "attn.wg")) * m.head_dim, m.head_dim));
    return out;
  }
  if (m.kind != MixerKind::gdn || rel.rfind("attn.", 0) != 0) return std::nullopt;
  const std::string r = rel.substr(5);
  const int64_t hk = m.n_heads, dk = m.head_dim, hv = m.value_heads(), dv = m.value_dim(), per_key = hv / hk;
  const int64_t key = hk * dk, value = hv * dv, d = config_.d_model;
  const bool tiled = arch_ != "qwen3next" && per_key > 1;
  auto file_head = [&](int64_t h) { return tiled ? (h % per_key) * hk + h / per_key : h; };
  // Rows [base, base + hv width) read value head by value head, `width` rows each (of a vector:
  // elements).
  auto value_rows = [&](const GgufTensor& g, int64_t base, int64_t width) {
    const uint64_t row = g.ne.size() == 1 ? 1 : uint64_t(g.row_values());
    std::vector<ElementRun> out;
    for (int64_t h = 0; h < hv; ++h)
      out.push_back(ElementRun{nullptr, &g, &file_.mapping(), uint64_t(base + file_head(h) * width) * row, uint64_t(width) * row});
    return out;
  };
  if (r == "wq" || r == "wk" || r == "wv" || r == "conv_q" || r == "conv_k" || r == "conv_v") {
    const bool conv = r[0] == 'c';
    const GgufTensor& g = conv ? source(blk + "ssm_conv1d.weight", {2 * key + value, m.conv_kernel})
                               : source(blk + "attn_qkv.weight", {2 * key + value, d});
    if (r.back() == 'v') return value_rows(g, 2 * key, dv);
    return std::vector<ElementRun>{rows(g, r.back() == 'q' ? 0 : key, key)};
  }
  if (r == "wg") return value_rows(source(blk + "attn_gate.weight", t.shape), 0, dv);
  if ((r == "w_beta" || r == "w_decay") && file_.find(blk + "ssm_ba.weight")) {
    // Qwen3-Next's fused ssm_ba keeps in_proj_ba's rows: per key head, its r b rows, then its r a rows.
    const GgufTensor& g = source(blk + "ssm_ba.weight", {2 * hv, d});
    std::vector<ElementRun> out;
    for (int64_t k = 0; k < hk; ++k) out.push_back(rows(g, 2 * k * per_key + (r == "w_decay" ? per_key : 0), per_key));
    return out;
  }
  if (r == "w_beta") return value_rows(source(blk + "ssm_beta.weight", t.shape), 0, 1);
  if (r == "w_decay") return value_rows(source(blk + "ssm_alpha.weight", t.shape), 0, 1);
  if (r == "decay_bias") return value_rows(source(blk + "ssm_dt.bias", t.shape), 0, 1);
  if (r == "a_log") {
    std::vector<ElementRun> out = value_rows(source(blk + "ssm_a", t.shape), 0, 1);
    for (ElementRun& e : out) e.log_of_negated = true;
    return out;
  }
  if (r == "o_norm") return std::vector<ElementRun>{rows(source(blk + "ssm_norm.weight", t.shape), 0, 1, -1.0f)};
  if (r == "wo") {
    const GgufTensor& g = source(blk + "ssm_out.weight", t.shape);
    if (!tiled) return std::vector<ElementRun>{rows(g, 0, d)};
    std::vector<ElementRun> out;
    for (int64_t row = 0; row < d; ++row)
      for (int64_t h = 0; h < hv; ++h)
        out.push_back(ElementRun{nullptr, &g, &file_.mapping(), uint64_t(row * value + file_head(h) * dv), uint64_t(dv)});
    return out;
  }
  throw IoError(file_.path() + ": tensor " + t.name + " has no GGUF counterpart for architecture " + arch_);
}

// LFM2: the final norm is token_embd_norm (llama.cpp's name for embedding_norm); a short-conv
// layer's shortconv.in_proj [3d, d] holds the rows of B, C, x, shortconv.conv [d, K] its taps,
// shortconv.out_proj its output projection. Attention is NEOX-style: no permutation.
std::optional<std::vector<ElementRun>> GgufModel::lfm2_runs(int layer, const std::string& rel, const TensorInfo& t) const {
  if (arch_ != "lfm2" && arch_ != "lfm2moe") return std::nullopt;
  if (layer < 0) {
    if (rel != "final_norm") return std::nullopt;
    return std::vector<ElementRun>{rows(source("token_embd_norm.weight", t.shape), 0, 1)};
  }
  if (config_.mixer(layer).kind != MixerKind::short_conv || rel.rfind("attn.", 0) != 0) return std::nullopt;
  const std::string blk = "blk." + num(layer) + ".shortconv.";
  const int64_t d = config_.d_model;
  if (rel == "attn.w_b" || rel == "attn.w_c" || rel == "attn.w_x")
    return std::vector<ElementRun>{rows(source(blk + "in_proj.weight", {3 * d, d}), rel == "attn.w_b" ? 0 : rel == "attn.w_c" ? d : 2 * d, d)};
  if (rel == "attn.conv") return std::vector<ElementRun>{rows(source(blk + "conv.weight", t.shape), 0, d)};
  if (rel == "attn.wo") return std::vector<ElementRun>{rows(source(blk + "out_proj.weight", t.shape), 0, d)};
  throw IoError(file_.path() + ": tensor " + t.name + " has no GGUF counterpart for architecture " + arch_);
}

// Granite 4.0-H's Mamba-2 layers: ssm_in [z, x, B, C, dt rows, d], ssm_conv1d [channels, K] and
// its bias, ssm_dt.bias, ssm_a (-e^{A_log}, read back as A_log), ssm_d, ssm_norm [G, inner / G]
// (the gain in order), ssm_out.
std::optional<std::vector<ElementRun>> GgufModel::mamba2_runs(int layer, const std::string& rel, const TensorInfo& t) const {
  if (layer < 0 || rel.rfind("attn.", 0) != 0 || config_.mixer(layer).kind != MixerKind::mamba2) return std::nullopt;
  const MixerSpec& m = config_.mixer(layer);
  const int64_t h = m.n_heads, inner = h * m.head_dim, G = m.ssm_groups(), bc = G * m.state_dim, d = config_.d_model;
  const int64_t channels = inner + 2 * bc;
  const std::string blk = "blk." + num(layer) + ".", r = rel.substr(5);
  auto in_rows = [&](int64_t first, int64_t count) {
    return std::vector<ElementRun>{rows(source(blk + "ssm_in.weight", {inner + channels + h, d}), first, count)};
  };
  auto conv_rows = [&](const char* name, const Shape& shape, int64_t first, int64_t count) {
    return std::vector<ElementRun>{rows(source(blk + name, shape), first, count)};
  };
  auto bias = [&](const char* name, int64_t size, int64_t first, int64_t count) {  // a slice of a vector
    return std::vector<ElementRun>{ElementRun{nullptr, &source(blk + name, {size}), &file_.mapping(), uint64_t(first), uint64_t(count)}};
  };
  auto per_head = [&](const std::string& name) { return std::vector<ElementRun>{rows(source(blk + name, {h, 1}), 0, h)}; };
  const int64_t K = m.conv_kernel;
  if (r == "wg") return in_rows(0, inner);
  if (r == "w_x") return in_rows(inner, inner);
  if (r == "w_b") return in_rows(2 * inner, bc);
  if (r == "w_c") return in_rows(2 * inner + bc, bc);
  if (r == "w_decay") return in_rows(2 * inner + 2 * bc, h);
  if (r == "conv_x") return conv_rows("ssm_conv1d.weight", {channels, K}, 0, inner);
  if (r == "conv_b") return conv_rows("ssm_conv1d.weight", {channels, K}, inner, bc);
  if (r == "conv_c") return conv_rows("ssm_conv1d.weight", {channels, K}, inner + bc, bc);
  if (r == "conv_x_bias") return bias("ssm_conv1d.bias", channels, 0, inner);
  if (r == "conv_b_bias") return bias("ssm_conv1d.bias", channels, inner, bc);
  if (r == "conv_c_bias") return bias("ssm_conv1d.bias", channels, inner + bc, bc);
  if (r == "decay_bias") return bias("ssm_dt.bias", h, 0, h);
  if (r == "a_log") {
    std::vector<ElementRun> out = per_head("ssm_a");
    out[0].log_of_negated = true;
    return out;
  }
  if (r == "d_skip") return per_head("ssm_d");
  if (r == "o_norm") return std::vector<ElementRun>{rows(source(blk + "ssm_norm.weight", {G, inner / G}), 0, G)};
  if (r == "wo") return std::vector<ElementRun>{rows(source(blk + "ssm_out.weight", {d, inner}), 0, d)};
  throw IoError(file_.path() + ": tensor " + t.name + " has no GGUF counterpart for architecture " + arch_);
}

std::vector<ElementRun> GgufModel::runs(const TensorInfo& t) const {
  auto [layer, rel] = slots::split_name(t.name);
  if (auto hybrid = qwen_hybrid_runs(layer, rel, t)) return *hybrid;
  if (auto mamba2 = mamba2_runs(layer, rel, t)) return *mamba2;
  if (auto lfm2 = lfm2_runs(layer, rel, t)) return *lfm2;
  const std::string name = gguf_name(t);
  if (layer >= 0 && rel.rfind("attn.", 0) == 0 && config_.mixer(layer).kind == MixerKind::mla) {
    const std::string r = rel.substr(5);
    if (r == "wq" || r == "wq_b" || r == "wkv_a" || r == "wk_b" || r == "wv_b") return mla_runs(r, name, t, config_.mixer(layer));
  }
  if ((arch_ == "llama" || arch_ == "smollm3" || arch_.rfind("granite", 0) == 0) && (rel == "attn.wq" || rel == "attn.wk")) {
    const MixerSpec& m = config_.mixer(layer);
    return permuted_rows(name, t.shape, rel == "attn.wq" ? m.n_heads : m.n_kv_heads);
  }
  if (auto fused = fused_runs(layer, rel, name, t)) return *fused;
  const GgufTensor& g = source(name, t.shape);
  const bool offset_norms = arch_.rfind("gemma", 0) == 0 || arch_ == "qwen3next" || arch_.rfind("qwen35", 0) == 0;
  const bool gemma_norm = offset_norms && name.size() > 11 && name.compare(name.size() - 11, 11, "norm.weight") == 0;
  return {rows(g, 0, g.rows(), gemma_norm ? -1.0f : 0.0f)};
}

std::vector<std::string> GgufModel::unused(const WeightMap& map) const {
  std::unordered_set<const GgufTensor*> read;
  for (const TensorInfo& t : map.tensors)
    for (const ElementRun& r : runs(t)) read.insert(r.gguf);
  // Read into the config, not the weights: Llama 3's divisors, Phi-3's LongRoPE factors.
  static const std::set<std::string> config_tensors = {"rope_freqs.weight", "rope_factors_short.weight",
                                                        "rope_factors_long.weight"};
  std::vector<std::string> out;
  for (const GgufTensor& t : file_.tensors())
    if (!read.count(&t) && !config_tensors.count(t.name)) out.push_back(t.name);
  return out;
}

namespace {

// The vocabulary as a tokenizer.json "vocab" object and the added tokens (control and
// user-defined tokens, and the unknown token, are matched before splitting, as Hugging Face's
// converters write them). The entries are appended to the object's storage directly:
// ordered_json's own insert searches the keys linearly, quadratic over 10^5 tokens.
void vocab_json(const GgufFile& file, const GgufValue& tokens, const GgufValue* types, bool unk_is_added, Json& vocab,
                Json& added) {
  vocab = Json::object();
  added = Json::array();
  auto& entries = static_cast<std::vector<std::pair<const std::string, Json>>&>(vocab.get_ref<Json::object_t&>());
  std::unordered_set<std::string_view> seen;
  for (size_t id = 0; id < tokens.strings.size(); ++id) {
    const std::string& s = tokens.strings[id];
    if (!seen.insert(s).second)
      throw IoError(file.path() + ": tokenizer.ggml.tokens: token " + Json(s).dump() + " appears twice");
    entries.emplace_back(s, id);
    const int64_t type = types ? types->ints[id] : 1;
    if (type == 3 || type == 4 || (unk_is_added && type == 2))
      added.push_back({{"id", id}, {"content", s}, {"special", type != 4}, {"single_word", false}, {"lstrip", false},
                       {"rstrip", false}, {"normalized", false}});
  }
}

}  // namespace

std::string GgufModel::tokenizer_json() const {
  const std::string kind = file_.string("tokenizer.ggml.model");
  if (kind != "gpt2" && kind != "llama")
    throw IoError(file_.path() + ": tokenizer.ggml.model \"" + kind + "\"" +
                  " is not supported; \"gpt2\" (byte-level BPE) and \"llama\" (SentencePiece BPE) convert to a tokenizer Wren runs");
  const GgufValue* tokens = file_.value("tokenizer.ggml.tokens");
  const GgufValue* types = file_.value("tokenizer.ggml.token_type");
  if (!tokens || tokens->type != GgufType::array || tokens->elem != GgufType::string)
    throw IoError(file_.path() + ": metadata tokenizer.ggml.tokens: expected an array of strings");
  if (types && (types->type != GgufType::array || types->ints.size() != tokens->strings.size()))
    throw IoError(file_.path() + ": metadata tokenizer.ggml.token_type: expected " + num(int64_t(tokens->strings.size())) +
                  " integers, one per token");
  return kind == "llama" ? sentencepiece_tokenizer_json(*tokens, types) : byte_level_tokenizer_json(*tokens, types);
}

namespace {

// The tokenizer.json pre-tokenizers of a byte-level vocabulary: [Digits,] Split, ByteLevel.
Json pre_tokenizer_steps(const PreSteps& p) {
  Json steps = Json::array();
  if (p.digits_apart) steps.push_back({{"type", "Digits"}, {"individual_digits", true}});
  for (const std::string& regex : p.regexes)
    steps.push_back({{"type", "Split"}, {"pattern", {{"Regex", regex}}}, {"behavior", "Isolated"}, {"invert", false}});
  steps.push_back({{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true}, {"use_regex", false}});
  return steps;
}

}  // namespace

std::string GgufModel::byte_level_tokenizer_json(const GgufValue& tokens, const GgufValue* types) const {
  const GgufValue* merges = file_.value("tokenizer.ggml.merges");
  if (!merges || merges->type != GgufType::array || merges->elem != GgufType::string)
    throw IoError(file_.path() + ": metadata tokenizer.ggml.merges: expected an array of strings");
  const std::string pre = file_.value("tokenizer.ggml.pre") ? file_.string("tokenizer.ggml.pre") : "default";
  auto steps = pre_steps(pre);
  if (!steps)
    throw IoError(file_.path() + ": tokenizer.ggml.pre \"" + pre + "\" is not a pre-tokenizer Wren knows (known: " +
                  known_pres() + ")");
  Json vocab, added;
  vocab_json(file_, tokens, types, false, vocab, added);
  Json j = {{"version", "1.0"}, {"truncation", nullptr}, {"padding", nullptr}, {"added_tokens", added},
            {"normalizer", nullptr},
            {"pre_tokenizer",
             {{"type", "Sequence"},
              {"pretokenizers",
               pre_tokenizer_steps(*steps)}}},
            {"post_processor", nullptr},
            {"decoder", {{"type", "ByteLevel"}, {"add_prefix_space", true}, {"trim_offsets", true}, {"use_regex", true}}},
            {"model", {{"type", "BPE"}, {"dropout", nullptr}, {"unk_token", nullptr}, {"byte_fallback", false},
                       {"ignore_merges", steps->ignore_merges}, {"vocab", vocab}, {"merges", merges->strings}}}};
  return j.dump();
}

// SentencePiece BPE (Llama 2, Mistral, Gemma GGUFs) as the tokenizer.json Hugging Face's
// converter writes for it: spaces as U+2581 with one in front (unless add_space_prefix is
// false, as in Gemma), merges ranked by score (text/sentencepiece.h), unknown characters as
// their "<0xNN>" byte tokens, and the decoder that undoes all of it.
std::string GgufModel::sentencepiece_tokenizer_json(const GgufValue& tokens, const GgufValue* types) const {
  const GgufValue* scores = file_.value("tokenizer.ggml.scores");
  if (!scores || scores->type != GgufType::array || scores->floats.size() != tokens.strings.size())
    throw IoError(file_.path() + ": metadata tokenizer.ggml.scores: expected " + num(int64_t(tokens.strings.size())) +
                  " floats, one per token (a SentencePiece vocabulary merges by score)");
  std::vector<bool> mergeable(tokens.strings.size(), true);
  std::string unk;
  for (size_t id = 0; id < tokens.strings.size(); ++id) {
    const int64_t type = types ? types->ints[id] : 1;
    mergeable[id] = type != 5;  // unused
    if (type == 2 && unk.empty()) unk = tokens.strings[id];
  }
  if (auto id = file_.integer_or_none("tokenizer.ggml.unknown_token_id")) {
    if (*id < 0 || size_t(*id) >= tokens.strings.size())
      throw IoError(file_.path() + ": metadata tokenizer.ggml.unknown_token_id = " + num(*id) + " is not a token id");
    unk = tokens.strings[size_t(*id)];
  }
  bool space_prefix = true;
  if (const GgufValue* v = file_.value("tokenizer.ggml.add_space_prefix"); v && v->type == GgufType::boolean)
    space_prefix = v->i != 0;
  Json vocab, added;
  vocab_json(file_, tokens, types, true, vocab, added);
  Json merges = Json::array();
  for (auto& [l, r] : text::merges_from_scores(tokens.strings, scores->floats, mergeable)) merges.push_back({l, r});
  const std::string meta = "\u2581";
  Json normalizers = Json::array();
  if (space_prefix) normalizers.push_back({{"type", "Prepend"}, {"prepend", meta}});
  normalizers.push_back({{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", meta}});
  Json decoders = Json::array({{{"type", "Replace"}, {"pattern", {{"String", meta}}}, {"content", " "}},
                               {{"type", "ByteFallback"}}, {{"type", "Fuse"}}});
  if (space_prefix) decoders.push_back({{"type", "Strip"}, {"content", " "}, {"start", 1}, {"stop", 0}});
  Json j = {{"version", "1.0"}, {"truncation", nullptr}, {"padding", nullptr}, {"added_tokens", added},
            {"normalizer", {{"type", "Sequence"}, {"normalizers", normalizers}}},
            {"pre_tokenizer", nullptr},
            {"post_processor", nullptr},
            {"decoder", {{"type", "Sequence"}, {"decoders", decoders}}},
            {"model", {{"type", "BPE"}, {"dropout", nullptr}, {"unk_token", unk.empty() ? Json(nullptr) : Json(unk)},
                       {"fuse_unk", true}, {"byte_fallback", true}, {"vocab", vocab}, {"merges", merges}}}};
  return j.dump();
}

std::string GgufModel::tokenizer_config_json() const {
  Json j = Json::object();
  const GgufValue* tokens = file_.value("tokenizer.ggml.tokens");
  auto token = [&](const char* key, const char* out) {
    auto id = file_.integer_or_none(key);
    if (!id) return;
    if (!tokens || *id < 0 || size_t(*id) >= tokens->strings.size())
      throw IoError(file_.path() + ": metadata " + key + " = " + num(*id) + " is not a token id");
    j[out] = tokens->strings[size_t(*id)];
  };
  token("tokenizer.ggml.bos_token_id", "bos_token");
  token("tokenizer.ggml.eos_token_id", "eos_token");
  if (const GgufValue* v = file_.value("tokenizer.ggml.add_bos_token"); v && v->type == GgufType::boolean)
    j["add_bos_token"] = v->i != 0;
  if (file_.value("tokenizer.chat_template")) j["chat_template"] = file_.string("tokenizer.chat_template");
  return j.dump(2);
}

}  // namespace wren
