// Model directory -> GGUF (gguf_export.h): check that llama.cpp can express the config, pick
// its architecture, write the metadata, the tokenizer and the tensors row by row.
#include "runtime/gguf_export.h"

#include <cmath>
#include <cstring>
#include <filesystem>
#include <functional>
#include <optional>
#include <set>

#include "config/read_file.h"
#include "config/weight_slots.h"
#include "io/gguf.h"
#include "io/gguf_blocks.h"
#include "io/model_dir.h"
#include "kernels/ops.h"
#include "runtime/gguf_import.h"
#include "text/pretokenize.h"

namespace wren {

namespace fs = std::filesystem;

namespace {

using kernels::DType;

std::string num(int64_t x) { return std::to_string(x); }

struct Arch {
  std::string name;
  bool gemma = false, permute_qk = false, deepseek = false;
};

// What llama.cpp's deepseek2 cannot say of an MLA model: one MLA spec throughout (rope on, a
// nope part, YaRN only with mscale = mscale_all_dim), leading dense layers then MoE, shared
// experts of the routed width without a gate.
std::string deepseek2_unexpressible(const ModelConfig& c) {
  std::set<std::string> why;
  if (c.residual.kind != ResidualKind::plain || c.engram) why.insert("attention residuals, mHC or engrams");
  if (c.norm.placement != NormPlacement::pre || c.norm.unit_offset || c.embedding_scale != 1.0 || c.logit_softcap)
    why.insert("sandwich or post norms, 1 + w gains, embedding scaling or logit soft-capping");
  if (c.residual_scale != 1.0 || c.logit_divisor != 1.0) why.insert("residual scales or logit divisors (Granite)");
  const MixerSpec& m0 = c.mixer(0);
  bool moe_seen = false;
  for (int i = 0; i < c.n_layers(); ++i) {
    const MixerSpec& m = c.mixer(i);
    const FfnSpec& f = c.ffn(i);
    if (m.kind != MixerKind::mla) why.insert("MLA mixed with other mixers");
    if (c.layers[size_t(i)].kv.kind != KvSourceKind::own) why.insert("bridged or reused K/V");
    if (m.q_lora_rank != m0.q_lora_rank || m.kv_lora_rank != m0.kv_lora_rank || m.qk_nope_dim != m0.qk_nope_dim ||
        m.qk_rope_dim != m0.qk_rope_dim || m.v_head_dim != m0.v_head_dim || m.n_heads != m0.n_heads)
      why.insert("MLA widths that differ between layers");
    if (!m.rope || !m.qk_nope_dim) why.insert("MLA without RoPE or without a nope part");
    if (m.rope && (m.rope->llama3_factor || m.rope->linear_factor != 1.0 ||
                   (m.rope->yarn_factor && m.rope->yarn_mscale != m.rope->yarn_mscale_all_dim)))
      why.insert("RoPE scaling other than YaRN with mscale = mscale_all_dim");
    if (m.output_gate || m.sinks || m.window || m.softcap || m.scale) why.insert("output gates, sinks, windows, soft-caps or scales");
    if (f.activation != Activation::swiglu || f.bias) why.insert("FFNs other than SwiGLU without biases");
    if (f.kind == FfnKind::moe) {
      moe_seen = true;
      if (f.latent_dim) why.insert("latent MoE");
      if (f.shared_gate || f.router_bias) why.insert("shared-expert gates or router biases");
      if (f.n_shared && f.shared_hidden != f.expert_hidden) why.insert("shared experts of another width than the routed ones");
      if (f.gates == GateNorm::softmax_topk) why.insert("softmax over the chosen logits");
    } else if (moe_seen) {
      why.insert("dense layers after MoE layers");
    }
  }
  std::string out;
  for (auto& w : why) out += (out.empty() ? "" : ", ") + w;
  return out;
}

// Layer i's RoPE is layer 0's (GGUF's rope keys and rope_freqs.weight are one per model).
bool same_rope_as_layer_0(const ModelConfig& c, int i) {
  const auto& a = c.mixer(0).rope;
  const auto& b = c.mixer(i).rope;
  return a && b && a->theta == b->theta && a->rotary_dim == b->rotary_dim && a->llama3_factor == b->llama3_factor &&
         a->llama3_low_freq == b->llama3_low_freq && a->llama3_high_freq == b->llama3_high_freq &&
         a->llama3_original_context == b->llama3_original_context;
}

// What in `c` GGUF cannot say, as a list of mechanisms ("" when everything is expressible).
std::string unexpressible(const ModelConfig& c, bool gemma) {
  std::set<std::string> why;
  if (c.mixer(0).kind == MixerKind::mla) return deepseek2_unexpressible(c);
  if (c.residual.kind == ResidualKind::attn_residuals) why.insert("attention residuals (Embla)");
  if (c.residual.kind == ResidualKind::mhc) why.insert("mHC hyper-connections");
  if (c.engram) why.insert("engram tables");
  if (c.vocab_pad && gemma) why.insert("padded vocabulary rows with tied Gemma embeddings");
  for (int i = 0; i < c.n_layers(); ++i) {
    const MixerSpec& m = c.mixer(i);
    const FfnSpec& f = c.ffn(i);
    if (m.kind != MixerKind::attention) why.insert(std::string(to_string(m.kind)) + " mixers");
    if (c.layers[size_t(i)].kv.kind != KvSourceKind::own) why.insert("bridged or reused K/V");
    if (m.output_gate) why.insert("attention output gates");
    if (m.sinks) why.insert("attention sinks");
    if (!gemma && (m.window || m.softcap || m.scale)) why.insert("sliding windows, soft-capping or a custom attention scale outside Gemma");
    if (m.rope && m.rope->yarn_factor) why.insert("YaRN RoPE scaling outside deepseek2");
    if (m.rope && !m.rope->longrope_short.empty()) why.insert("LongRoPE scaling (Phi-3)");
    if (m.rope.has_value() != c.mixer(0).rope.has_value()) why.insert("layers without RoPE beside layers with it (SmolLM3)");
    if (m.rope && m.rope->llama3_factor && !same_rope_as_layer_0(c, i)) why.insert("Llama-3 RoPE scaling that differs between layers");
    if (m.o_bias && !m.qkv_bias) why.insert("an output bias without q/k/v biases");
    if (f.activation == Activation::relu2) why.insert("ReLU^2 FFNs");
    if (f.activation == Activation::swiglu_oai) why.insert("the clamped SwiGLU of gpt-oss");
    if (f.bias) why.insert("FFN biases");
    if (f.kind == FfnKind::moe) {
      if (f.latent_dim) why.insert("latent MoE");
      if (f.n_shared) why.insert("shared experts");
      if (f.score != RouterScore::softmax || f.gates == GateNorm::softmax_topk || f.router_bias || f.balance_bias ||
          f.n_groups > 1 || f.routed_scale != 1.0)
        why.insert("routing other than softmax top-k");
    }
    if (f.kind != c.ffn(0).kind) why.insert("a mix of dense and MoE layers");
  }
  // Gemma's sandwich norms, or plain gains before (llama and the rest) or after (olmo2) each sublayer.
  const bool plain_gains = !c.norm.unit_offset && c.embedding_scale == 1.0 && !c.logit_softcap;
  if (!gemma && (c.norm.placement == NormPlacement::sandwich || !plain_gains))
    why.insert("sandwich norms, 1 + w gains, embedding scaling or logit soft-capping outside Gemma");
  if (c.residual_scale != 1.0 || c.logit_divisor != 1.0) why.insert("residual scales or logit divisors (Granite)");
  std::string out;
  for (auto& w : why) out += (out.empty() ? "" : ", ") + w;
  return out;
}

Arch choose_arch(const ModelConfig& c, const std::string& dir) {
  const MixerSpec& m = c.mixer(0);
  const FfnSpec& f = c.ffn(0);
  const bool gemma = c.norm.placement == NormPlacement::sandwich && c.norm.unit_offset;
  if (std::string why = unexpressible(c, gemma); !why.empty())
    throw IoError(dir + ": cannot export to GGUF: " + why + " cannot be expressed in llama.cpp's architectures");
  if (m.kind == MixerKind::mla) return {"deepseek2", false, false, true};
  auto refuse = [&](const std::string& what) { throw IoError(dir + ": cannot export to GGUF: " + what); };
  if (gemma) {
    if (f.kind == FfnKind::moe || f.activation != Activation::geglu) refuse("a Gemma-style model must be dense GeGLU");
    return {m.qk_norm == QkNorm::head ? "gemma3" : "gemma2", true, false};
  }
  if (c.norm.placement == NormPlacement::post) {  // OLMo 2: llama.cpp's olmo2 graph, NEOX rotation
    if (f.kind != FfnKind::dense || f.activation != Activation::swiglu || m.qk_norm != QkNorm::full || m.qkv_bias || !m.rope)
      refuse("post norms are llama.cpp's olmo2: dense SwiGLU, QK-norm over all heads, no biases, RoPE");
    if (int64_t(m.n_heads) * m.head_dim != c.d_model)
      refuse("llama.cpp's olmo2 takes head_dim = d_model / heads, here " + num(m.head_dim) + " x " + num(m.n_heads) +
             " != " + num(c.d_model));
    if (c.tie_embeddings) refuse("llama.cpp's olmo2 needs its own output.weight; this model ties its embeddings");
    return {"olmo2", false, false};
  }
  if (f.activation != Activation::swiglu) refuse("llama.cpp's llama / Qwen / OLMoE architectures use SwiGLU");
  if (f.kind == FfnKind::moe) {
    if (m.qk_norm == QkNorm::full) {
      if (f.gates != GateNorm::none) refuse("olmoe does not renormalise the chosen experts' weights");
      if (int64_t(m.n_heads) * m.head_dim != c.d_model)
        refuse("llama.cpp's olmoe takes head_dim = d_model / heads, here " + num(m.head_dim) + " x " + num(m.n_heads) +
               " != " + num(c.d_model));
      return {"olmoe", false, false};
    }
    if (f.gates != GateNorm::normalize) refuse("qwen3moe and llama (Mixtral) renormalise the chosen experts' weights");
    return m.qk_norm == QkNorm::head ? Arch{"qwen3moe", false, false} : Arch{"llama", false, true};
  }
  if (m.qk_norm == QkNorm::full) refuse("full-width QK-norm in a dense model (OLMo 2) is not exported");
  if (m.qkv_bias && m.qk_norm == QkNorm::none && int64_t(m.n_heads) * m.head_dim != c.d_model)
    refuse("llama.cpp's qwen2 takes head_dim = d_model / heads, here " + num(m.head_dim) + " x " + num(m.n_heads) +
           " != " + num(c.d_model));
  if (m.qk_norm == QkNorm::head) return {"qwen3", false, false};
  if (m.qkv_bias) return {"qwen2", false, false};
  return {"llama", false, true};
}

// deepseek2's keys (the inverse of gguf_import.cpp's deepseek2_config), as a legacy file with
// attn_kv_b whole: key_length / value_length are the per-head MLA widths.
void deepseek2_metadata(GgufWriter& w, const ModelConfig& c) {
  const std::string a = "deepseek2.";
  const MixerSpec& m = c.mixer(0);
  int dense = 0;
  while (dense < c.n_layers() && c.ffn(dense).kind == FfnKind::dense) ++dense;
  w.set_u32(a + "feed_forward_length", uint32_t(dense ? c.ffn(0).hidden : c.ffn(0).expert_hidden));
  w.set_u32(a + "attention.head_count_kv", uint32_t(m.n_heads));
  w.set_u32(a + "attention.key_length", uint32_t(m.qk_nope_dim + m.qk_rope_dim));
  w.set_u32(a + "attention.value_length", uint32_t(m.v_head_dim));
  w.set_u32(a + "attention.q_lora_rank", uint32_t(m.q_lora_rank));  // 0: attn_q straight from x
  w.set_u32(a + "attention.kv_lora_rank", uint32_t(m.kv_lora_rank));
  w.set_u32(a + "rope.dimension_count", uint32_t(m.qk_rope_dim));
  w.set_u32(a + "leading_dense_block_count", uint32_t(dense));
  if (m.rope->yarn_factor) {
    w.set_string(a + "rope.scaling.type", "yarn");
    w.set_f32(a + "rope.scaling.factor", float(m.rope->yarn_factor));
    w.set_u32(a + "rope.scaling.original_context_length", uint32_t(m.rope->yarn_original_context));
    w.set_f32(a + "rope.scaling.yarn_log_multiplier", float(0.1 * m.rope->yarn_mscale_all_dim));
  }
  w.set_u32(a + "expert_shared_count", 0);
  if (dense == c.n_layers()) return;
  const FfnSpec& f = c.ffn(dense);
  w.set_u32(a + "expert_count", uint32_t(f.n_experts));
  w.set_u32(a + "expert_used_count", uint32_t(f.top_k));
  w.set_u32(a + "expert_feed_forward_length", uint32_t(f.expert_hidden));
  w.set_u32(a + "expert_shared_count", uint32_t(f.n_shared));
  w.set_f32(a + "expert_weights_scale", float(f.routed_scale));
  w.set_bool(a + "expert_weights_norm", f.gates == GateNorm::normalize);
  w.set_u32(a + "expert_gating_func", f.score == RouterScore::sigmoid ? 2 : 1);
  if (f.n_groups > 1) {
    w.set_u32(a + "expert_group_count", uint32_t(f.n_groups));
    w.set_u32(a + "expert_group_used_count", uint32_t(f.topk_groups));
  }
}

void metadata(GgufWriter& w, const ModelConfig& c, const Arch& arch) {
  const std::string a = arch.name + ".";
  const MixerSpec& m = c.mixer(0);
  const FfnSpec& f = c.ffn(0);
  w.set_string("general.architecture", arch.name);
  w.set_string("general.name", c.name);
  w.set_u32("general.alignment", 32);
  w.set_u32(a + "context_length", uint32_t(c.context_length));
  w.set_u32(a + "embedding_length", uint32_t(c.d_model));
  w.set_u32(a + "block_count", uint32_t(c.n_layers()));
  w.set_u32(a + "attention.head_count", uint32_t(m.n_heads));
  w.set_f32(a + "attention.layer_norm_rms_epsilon", float(c.norm.eps));
  w.set_u32(a + "vocab_size", uint32_t(c.rows()));
  if (arch.deepseek) {
    w.set_f32(a + "rope.freq_base", float(m.rope->theta));
    return deepseek2_metadata(w, c);
  }
  w.set_u32(a + "feed_forward_length", uint32_t(f.kind == FfnKind::moe ? f.expert_hidden : f.hidden));
  w.set_u32(a + "attention.head_count_kv", uint32_t(m.n_kv_heads));
  w.set_u32(a + "attention.key_length", uint32_t(m.head_dim));
  w.set_u32(a + "attention.value_length", uint32_t(m.head_dim));
  if (m.rope) {
    w.set_f32(a + "rope.freq_base", float(m.rope->theta));
    w.set_u32(a + "rope.dimension_count", uint32_t(m.rope->rotary_dim ? m.rope->rotary_dim : m.head_dim));
    if (m.rope->linear_factor != 1.0) {
      w.set_string(a + "rope.scaling.type", "linear");
      w.set_f32(a + "rope.scaling.factor", float(m.rope->linear_factor));
    }
  }
  if (f.kind == FfnKind::moe) {
    w.set_u32(a + "expert_count", uint32_t(f.n_experts));
    w.set_u32(a + "expert_used_count", uint32_t(f.top_k));
    w.set_u32(a + "expert_feed_forward_length", uint32_t(f.expert_hidden));
  }
  if (arch.gemma) {
    int window = 0;
    for (int i = 0; i < c.n_layers(); ++i) window = std::max(window, c.mixer(i).window);
    if (window) w.set_u32(a + "attention.sliding_window", uint32_t(window));
    if (m.softcap) w.set_f32(a + "attn_logit_softcapping", float(m.softcap));
    if (c.logit_softcap) w.set_f32(a + "final_logit_softcapping", float(c.logit_softcap));
  }
}

// The BOS / EOS token text from tokenizer_config.json ("x" or {"content": "x"}), if any.
std::optional<std::string> config_token(const Json& j, const char* key) {
  if (!j.contains(key)) return std::nullopt;
  const Json& v = j[key];
  if (v.is_string()) return v.get<std::string>();
  if (v.is_object() && v.contains("content") && v["content"].is_string()) return v["content"].get<std::string>();
  return std::nullopt;
}

// tokenizer.ggml.*: tokens by id (ids the file does not use become unused padding tokens),
// their types, merges, the pre-tokenizer name, BOS / EOS and the chat template.
void tokenizer_metadata(GgufWriter& w, const ModelFiles& files) {
  const std::string path = files.tokenizer_path();
  const Json tok = parse_json_file(path);
  const int64_t rows = files.config().rows();
  GgufValue tokens, types, merges;
  tokens.type = types.type = merges.type = GgufType::array;
  tokens.elem = merges.elem = GgufType::string;
  types.elem = GgufType::i32;
  tokens.strings.assign(size_t(rows), "");
  types.ints.assign(size_t(rows), 5);  // unused
  for (auto it = tok["model"]["vocab"].begin(); it != tok["model"]["vocab"].end(); ++it) {
    const int64_t id = it.value().get<int64_t>();
    tokens.strings[size_t(id)] = it.key(), types.ints[size_t(id)] = 1;
  }
  if (tok.contains("added_tokens") && tok["added_tokens"].is_array())
    for (const Json& a : tok["added_tokens"]) {
      const int64_t id = a.value("id", int64_t(-1));
      if (id < 0 || id >= rows) throw IoError(path + ": added token id " + num(id) + " is outside the " + num(rows) + " rows");
      tokens.strings[size_t(id)] = a.value("content", std::string());
      types.ints[size_t(id)] = a.value("special", false) ? 3 : 4;
    }
  for (int64_t id = 0; id < rows; ++id)
    if (types.ints[size_t(id)] == 5) tokens.strings[size_t(id)] = "[PAD" + num(id) + "]";
  for (const Json& m : tok["model"]["merges"])
    merges.strings.push_back(m.is_string() ? m.get<std::string>() : m[0].get<std::string>() + " " + m[1].get<std::string>());

  // The pre-tokenizer regex (a Split inside a Sequence, or ByteLevel's own GPT-2 regex).
  std::string pre = "gpt-2";
  const Json& p = tok.contains("pre_tokenizer") ? tok["pre_tokenizer"] : Json();
  std::vector<Json> steps = p.is_object() && p.value("type", "") == "Sequence" ? p["pretokenizers"].get<std::vector<Json>>()
                                                                                 : std::vector<Json>{p};
  for (const Json& s : steps)
    if (s.is_object() && s.value("type", "") == "Split" && s.contains("pattern") && s["pattern"].contains("Regex")) {
      auto pattern = text::recognise_split_pattern(s["pattern"]["Regex"].get<std::string>());
      if (!pattern) throw IoError(path + ": the pre-tokenizer regex has no llama.cpp name");
      pre = *pattern == text::SplitPattern::cl100k ? "llama-bpe"
            : *pattern == text::SplitPattern::qwen2 ? "qwen2"
            : *pattern == text::SplitPattern::o200k ? "gpt-4o" : "gpt-2";
    }
  w.set_string("tokenizer.ggml.model", "gpt2");
  w.set_string("tokenizer.ggml.pre", pre);
  auto id_of = [&](const std::string& s) -> std::optional<int64_t> {
    for (int64_t id = 0; id < rows; ++id)
      if (tokens.strings[size_t(id)] == s) return id;
    return std::nullopt;
  };
  Json config = Json::object();
  const fs::path cfg = fs::path(files.dir()) / "tokenizer_config.json";
  if (auto text = try_read_file(cfg.string())) config = Json::parse(*text, nullptr, false);
  if (config.is_discarded()) throw IoError(cfg.string() + ": invalid JSON");
  auto bos = config_token(config, "bos_token"), eos = config_token(config, "eos_token");
  if (!eos) eos = "<|endoftext|>";
  if (bos)
    if (auto id = id_of(*bos)) w.set_u32("tokenizer.ggml.bos_token_id", uint32_t(*id));
  if (auto id = id_of(*eos)) w.set_u32("tokenizer.ggml.eos_token_id", uint32_t(*id));
  w.set_bool("tokenizer.ggml.add_bos_token", bos.has_value() && config.value("add_bos_token", true));
  if (config.contains("chat_template") && config["chat_template"].is_string())
    w.set_string("tokenizer.chat_template", config["chat_template"].get<std::string>());
  w.set("tokenizer.ggml.tokens", std::move(tokens));
  w.set("tokenizer.ggml.token_type", std::move(types));
  w.set("tokenizer.ggml.merges", std::move(merges));
}

// One GGUF tensor's rows: GGUF row r is row source(r).second of parts[source(r).first] (q/k
// rows permuted for interleaved RoPE, MLA's kv_b gathered from wk_b and wv_b), Gemma norms + 1.
struct TensorPlan {
  std::vector<const WeightView*> parts;
  GgmlType type;
  int64_t rows = 0;
  std::function<std::pair<size_t, int64_t>(int64_t)> source = [](int64_t r) { return std::pair<size_t, int64_t>{0, r}; };
  float add = 0.0f;
};

GgmlType ggml_storage(const WeightView& w) {
  if (w.storage == DType::bf16) return GgmlType::BF16;
  if (w.storage == DType::q8 && w.group == 32) return GgmlType::Q8_0;
  if (w.storage == DType::q4 && w.group == 32) return GgmlType::Q4_0;
  return GgmlType::F32;
}

// Within a block of `d` rows: GGUF row 2i + a holds our row a d/2 + i (we rotate halves,
// llama.cpp interleaved pairs).
int64_t interleaved(int64_t k, int64_t d) { return (k % 2) * (d / 2) + k / 2; }

void stream_rows(const TensorPlan& p, const GgufExportOptions& o, const ByteSink& sink) {
  std::vector<kernels::MatrixView> views;
  for (const WeightView* w : p.parts) views.push_back(matrix_view(*w));
  const int64_t cols = views[0].cols;
  const int64_t row_bytes = cols / ggml_block_values(p.type) * ggml_block_bytes(p.type);
  std::vector<uint8_t> out(static_cast<size_t>(row_bytes));
  std::vector<float> f(static_cast<size_t>(cols));
  for (int64_t r = 0; r < p.rows; ++r) {
    if (o.stop && o.stop->load()) throw IoError("tensor " + p.parts[0]->name + ": interrupted; nothing was written");
    const auto [part, src] = p.source(r);
    const kernels::MatrixView& v = views[part];
    switch (p.type) {
      case GgmlType::Q8_0: gguf_blocks::q8_to_q8_0(v.q8_row(src), v.row_scales(src), v.cols, out.data()); break;
      case GgmlType::Q4_0: gguf_blocks::q4_to_q4_0(v.q4_row(src), v.row_scales(src), v.cols, out.data()); break;
      case GgmlType::BF16: std::memcpy(out.data(), v.bf16_row(src), size_t(row_bytes)); break;
      default:
        kernels::decode_row(v, src, f.data());
        for (float& x : f) x += p.add;
        std::memcpy(out.data(), f.data(), size_t(row_bytes));
    }
    sink(out.data(), out.size());
  }
}

// The plan of weight `t` (whose GGUF name is `name`), or none when another tensor's plan
// covers it (MLA's wv_b goes into attn_kv_b with wk_b).
std::optional<TensorPlan> plan_tensor(const ModelFiles& files, const TensorInfo& t, const Arch& arch, std::string& name) {
  const ModelConfig& c = files.config();
  TensorPlan p{{&files.weight(t.name)}, GgmlType::F32, matrix_view(files.weight(t.name)).rows};
  p.type = ggml_storage(*p.parts[0]);
  auto [layer, rel] = slots::split_name(t.name);
  if (arch.permute_qk && (rel == "attn.wq" || rel == "attn.wk")) {
    const int64_t d = p.rows / (rel == "attn.wq" ? c.mixer(layer).n_heads : c.mixer(layer).n_kv_heads);
    p.source = [d](int64_t r) { return std::pair<size_t, int64_t>{0, r / d * d + interleaved(r % d, d)}; };
  }
  if (arch.gemma && name.size() > 11 && name.compare(name.size() - 11, 11, "norm.weight") == 0) p.add = 1.0f;
  if (!arch.deepseek || rel.rfind("attn.", 0) != 0) return p;
  const MixerSpec& m = c.mixer(layer);
  const int64_t nope = m.qk_nope_dim, rope = m.qk_rope_dim, v = m.v_head_dim, lora = m.kv_lora_rank;
  if (rel == "attn.wq" || rel == "attn.wq_b") {  // per head: nope rows, then the rope rows interleaved
    p.source = [nope, rope](int64_t r) {
      const int64_t h = r / (nope + rope), k = r % (nope + rope);
      return std::pair<size_t, int64_t>{0, h * (nope + rope) + (k < nope ? k : nope + interleaved(k - nope, rope))};
    };
  } else if (rel == "attn.wkv_a") {
    p.source = [lora, rope](int64_t r) { return std::pair<size_t, int64_t>{0, r < lora ? r : lora + interleaved(r - lora, rope)}; };
  } else if (rel == "attn.wv_b") {
    return std::nullopt;
  } else if (rel == "attn.wk_b") {  // attn_kv_b: per head the nope-key rows, then the value rows
    name = "blk." + std::to_string(layer) + ".attn_kv_b.weight";
    p.parts.push_back(&files.weight("layers." + std::to_string(layer) + ".attn.wv_b"));
    if (ggml_storage(*p.parts[1]) != p.type || p.parts[0]->group != p.parts[1]->group) p.type = GgmlType::F32;
    p.rows = int64_t(m.n_heads) * (nope + v);
    p.source = [nope, v](int64_t r) {
      const int64_t h = r / (nope + v), k = r % (nope + v);
      return k < nope ? std::pair<size_t, int64_t>{0, h * nope + k} : std::pair<size_t, int64_t>{1, h * v + k - nope};
    };
  }
  return p;
}

// Llama 3's RoPE scaling as llama.cpp reads it: rope_freqs.weight, each frequency's divisor
// f_i / f'_i (the inverse of gguf_import.cpp's llama3_rope_scaling), which only its llama
// architecture applies.
void add_llama3_divisors(GgufWriter& w, const ModelConfig& c, const Arch& arch, const std::string& dir) {
  if (arch.name != "llama")
    throw IoError(dir + ": cannot export to GGUF: Llama-3 RoPE scaling is applied by llama.cpp's llama architecture only, "
                  "and this model maps to " + arch.name);
  const Rope& r = *c.mixer(0).rope;
  const int dim = r.rotary_dim ? r.rotary_dim : c.mixer(0).head_dim;
  auto divisors = std::make_shared<std::vector<float>>(llama3_divisors(
      dim, r.theta, {r.llama3_factor, r.llama3_low_freq, r.llama3_high_freq, r.llama3_original_context}));
  w.add_tensor("rope_freqs.weight", GgmlType::F32, {int64_t(divisors->size())},
               [divisors](const ByteSink& sink) { sink(divisors->data(), divisors->size() * sizeof(float)); });
}

}  // namespace

std::string export_gguf(const std::string& model_dir, const std::string& path, const GgufExportOptions& o) {
  const ModelFiles files(model_dir);
  const ModelConfig& c = files.config();
  const Arch arch = choose_arch(c, model_dir);
  std::error_code ec;
  if (fs::exists(path, ec) && !o.overwrite) throw IoError(path + ": exists (pass overwrite to replace it)");
  GgufWriter w;
  metadata(w, c, arch);
  tokenizer_metadata(w, files);
  if (c.mixer(0).rope && c.mixer(0).rope->llama3_factor) add_llama3_divisors(w, c, arch, model_dir);
  for (const TensorInfo& t : files.weight_map().tensors) {
    std::string name = gguf_tensor_name(t.name, arch.gemma);
    if (name.empty()) throw IoError(model_dir + ": tensor " + t.name + " has no GGUF name");
    std::optional<TensorPlan> p = plan_tensor(files, t, arch, name);
    if (!p) continue;
    const Shape shape = p->parts.size() == 1 ? t.shape : Shape{p->rows, t.shape.back()};
    w.add_tensor(name, p->type, shape, [p = *p, &o](const ByteSink& sink) { stream_rows(p, o, sink); });
  }
  w.write(path);
  return arch.name;
}

}  // namespace wren
