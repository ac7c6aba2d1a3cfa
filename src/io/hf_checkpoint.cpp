// A Hugging Face checkpoint folder: its shards, and the transformers tensor names of each
// mapped family gathered into our weight map (docs/convert.md has the tables).
#include "io/hf_checkpoint.h"

#include <algorithm>
#include <filesystem>
#include <set>
#include <unordered_set>

#include "config/hf_config.h"
#include "config/weight_slots.h"

namespace wren {

namespace fs = std::filesystem;

namespace {

std::string num(int64_t x) { return std::to_string(x); }

// A shard name from the index: a plain *.safetensors file of the folder, never a path.
void check_shard_name(const std::string& index, const std::string& tensor, const std::string& file) {
  const bool plain = !file.empty() && file.find('/') == std::string::npos && file.find('\\') == std::string::npos &&
                     file != "." && file != ".." && file.size() > 12 &&
                     file.compare(file.size() - 12, 12, ".safetensors") == 0;
  if (!plain)
    throw IoError(index + ": weight_map[\"" + tensor + "\"] = " + Json(file).dump() +
                  ": expected the name of a .safetensors file in the same folder");
}

// The shards of the folder: those the index lists (each tensor checked to be where it says),
// else model.safetensors.
void open_shards(const fs::path& root, TensorSet& set) {
  const fs::path index = root / "model.safetensors.index.json";
  std::error_code ec;
  if (!fs::exists(index, ec)) {
    const fs::path single = root / "model.safetensors";
    if (!fs::exists(single, ec))
      throw IoError(root.string() + ": no model.safetensors and no model.safetensors.index.json (not a Hugging Face checkpoint folder?)");
    set.add_file(single.string());
    return;
  }
  const std::string origin = index.string();
  Json j = parse_json_file(origin);
  if (!j.is_object() || !j.contains("weight_map") || !j["weight_map"].is_object())
    throw IoError(origin + ": expected an object with \"weight_map\": {tensor name: shard file}");
  std::set<std::string> files;
  for (auto it = j["weight_map"].begin(); it != j["weight_map"].end(); ++it) {
    if (!it.value().is_string())
      throw IoError(origin + ": weight_map[\"" + it.key() + "\"] = " + json_value_text(it.value()) + ": expected a file name");
    check_shard_name(origin, it.key(), it.value().get<std::string>());
    files.insert(it.value().get<std::string>());
  }
  if (files.empty()) throw IoError(origin + ": weight_map lists no tensors");
  for (const std::string& f : files) set.add_file((root / f).string());
  for (auto it = j["weight_map"].begin(); it != j["weight_map"].end(); ++it) {
    auto [t, file] = set.find(it.key());
    const std::string want = (root / it.value().get<std::string>()).string();
    if (!t) throw IoError(origin + ": tensor " + it.key() + " is listed in " + want + " but is in no shard");
    if (file->path() != want)
      throw IoError(origin + ": tensor " + it.key() + " is listed in " + want + " but is stored in " + file->path());
  }
}

// Gemma 2 / 3: sandwich norms (Gemma 1 names its norms as Llama does).
bool is_gemma(const std::string& type) { return type.rfind("gemma", 0) == 0 && type != "gemma"; }

// Granite MoE: experts and router under their own names.
bool granite_moe(const std::string& type) { return type == "granitemoe"; }

// Qwen3-Next and Qwen3.5: Gated DeltaNet layers under linear_attn, a gated q_proj.
bool qwen_hybrid(const std::string& type) { return type == "qwen3_next" || type.rfind("qwen3_5", 0) == 0; }

}  // namespace

HfCheckpoint::HfCheckpoint(const std::string& dir) : dir_(dir) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) throw IoError(dir + ": not a directory");
  const fs::path root(dir);
  const std::string config_path = (root / "config.json").string();
  if (!fs::exists(config_path, ec)) throw IoError(dir + ": no config.json (not a Hugging Face checkpoint folder?)");
  const Json j = parse_json_file(config_path, kConfigJsonLimits);  // a config's limits, as explore --hf reads it
  config_ = import_hf_config(j, config_path);
  model_type_ = j["model_type"].get<std::string>();
  if (model_type_ == "gpt_oss")
    throw IoError(config_path + ": model_type \"gpt_oss\": the config maps, but converting its weights is not supported "
                  "yet (MXFP4 expert blocks stored [E, in, out])");
  open_shards(root, set_);
  for (const char* p : {"model.", "model.language_model.", "language_model.model."})
    if (has(std::string(p) + "embed_tokens.weight")) prefix_ = p;
  if (prefix_.empty())
    throw IoError(dir + ": no embedding tensor (looked for model.embed_tokens.weight, model.language_model.embed_tokens.weight, "
                  "language_model.model.embed_tokens.weight)");
  head_name_ = has("language_model.lm_head.weight") ? "language_model.lm_head.weight" : "lm_head.weight";
}

const TensorView& HfCheckpoint::source(const std::string& name, const Shape& expect) const {
  auto [t, file] = set_.find(name);
  if (!t) throw IoError(dir_ + ": tensor " + name + " " + shape_text(expect) + " is missing (model_type " + model_type_ + ")");
  if (t->dtype != Dtype::F32 && t->dtype != Dtype::BF16 && t->dtype != Dtype::F16)
    throw IoError(file->path() + ": tensor " + name + " has dtype " + to_string(t->dtype) + ", expected F32, BF16 or F16");
  if (t->shape != expect)
    throw IoError(file->path() + ": tensor " + name + " has shape " + shape_text(t->shape) + ", expected " +
                  shape_text(expect) + " from config.json");
  return *t;
}

std::vector<ElementRun> HfCheckpoint::whole(const std::string& name, const Shape& expect) const {
  const TensorView& t = source(name, expect);
  return {ElementRun{&t, nullptr, &set_.find(name).second->mapping(), 0, uint64_t(t.numel())}};
}

// Rows [first_row, first_row + count) of `name` seen as a matrix [all but the last
// dimension, the last] (a vector as a column: one element per row).
ElementRun HfCheckpoint::rows(const std::string& name, const Shape& expect, int64_t first_row, int64_t count) const {
  const TensorView& t = source(name, expect);
  const int64_t width = expect.size() == 1 ? 1 : expect.back(), total = width ? t.numel() / width : 0;
  if (first_row < 0 || count < 0 || first_row + count > total)
    throw IoError(dir_ + ": tensor " + name + ": rows [" + num(first_row) + ", " + num(first_row + count) +
                  ") are outside its " + num(total) + " rows");
  return ElementRun{&t, nullptr, &set_.find(name).second->mapping(), uint64_t(first_row) * uint64_t(width),
                    uint64_t(count) * uint64_t(width)};
}

std::vector<ElementRun> HfCheckpoint::runs(const TensorInfo& t) const {
  auto [layer, rel] = slots::split_name(t.name);
  if (layer >= 0) return layer_runs(layer, rel, t);
  if (t.name == "embed") return whole(prefix_ + "embed_tokens.weight", t.shape);
  if (t.name == "lm_head") return whole(head_name_, t.shape);
  if (t.name == "final_norm")
    return whole(prefix_ + (model_type_.rfind("lfm2", 0) == 0 ? "embedding_norm.weight" : "norm.weight"), t.shape);
  throw IoError(dir_ + ": tensor " + t.name + " has no Hugging Face source for model_type " + model_type_);
}

std::vector<ElementRun> HfCheckpoint::layer_runs(int layer, const std::string& rel, const TensorInfo& t) const {
  const std::string p = prefix_ + "layers." + num(layer) + ".";
  const bool gemma = is_gemma(model_type_);
  if (model_type_ == "lfm2" || model_type_ == "lfm2_moe") return lfm2_runs(layer, p, rel, t);
  if (rel == "attn_norm") return whole(p + "input_layernorm.weight", t.shape);
  if (rel == "ffn_norm") return whole(p + (gemma ? "pre_feedforward_layernorm.weight" : "post_attention_layernorm.weight"), t.shape);
  if (rel == "attn_post_norm") return whole(p + "post_attention_layernorm.weight", t.shape);
  if (rel == "ffn_post_norm") return whole(p + "post_feedforward_layernorm.weight", t.shape);
  if (rel.rfind("attn.", 0) == 0) {
    const MixerSpec& m = config_.mixer(layer);
    if (m.kind == MixerKind::mla) return mla_runs(p + "self_attn.", rel.substr(5), t, m);
    if (m.kind == MixerKind::gdn) return gdn_runs(p + "linear_attn.", rel.substr(5), t, m);
    if (m.kind == MixerKind::mamba2) return mamba2_runs(p + "mamba.", rel.substr(5), t, m);
    return attention_runs(p + "self_attn.", rel.substr(5), t, m);
  }
  if (rel.rfind("ffn.", 0) == 0 && model_type_ == "granitemoehybrid") return granite_hybrid_ffn_runs(p, rel.substr(4), t);
  if (rel.rfind("ffn.", 0) == 0)
    return ffn_runs(p + (model_type_ == "mixtral" || granite_moe(model_type_) ? "block_sparse_moe." : "mlp."), rel.substr(4),
                    t, config_.ffn(layer));
  throw IoError(dir_ + ": tensor " + t.name + " has no Hugging Face source for model_type " + model_type_);
}

// q, k, v split (q_proj, k_proj, v_proj) or fused (qkv_proj: rows q, then k, then v).
std::vector<ElementRun> HfCheckpoint::attention_runs(const std::string& p, const std::string& rel, const TensorInfo& t,
                                                     const MixerSpec& m) const {
  const int64_t q = int64_t(m.n_heads) * m.head_dim, kv = int64_t(m.n_kv_heads) * m.head_dim, d = config_.d_model;
  auto part = [&](const std::string& proj, const std::string& kind, int64_t first) -> std::vector<ElementRun> {
    if (has(p + proj + "_proj." + kind) || !has(p + "qkv_proj." + kind)) return whole(p + proj + "_proj." + kind, t.shape);
    const Shape fused = kind == "weight" ? Shape{q + 2 * kv, d} : Shape{q + 2 * kv};
    return {rows(p + "qkv_proj." + kind, fused, first, t.shape[0])};
  };
  if ((rel == "wq" || rel == "wg") && m.output_gate && qwen_hybrid(model_type_)) {
    // Qwen3-Next / Qwen3.5's q_proj holds, per head, head_dim query rows and then head_dim gate rows.
    std::vector<ElementRun> out;
    for (int64_t h = 0; h < m.n_heads; ++h)
      out.push_back(rows(p + "q_proj.weight", {2 * q, d}, (2 * h + (rel == "wg")) * m.head_dim, m.head_dim));
    return out;
  }
  if (rel == "wq") return part("q", "weight", 0);
  if (rel == "wk") return part("k", "weight", q);
  if (rel == "wv") return part("v", "weight", q + kv);
  if (rel == "bq") return part("q", "bias", 0);
  if (rel == "bk") return part("k", "bias", q);
  if (rel == "bv") return part("v", "bias", q + kv);
  if (rel == "wo") return whole(p + "o_proj.weight", t.shape);
  if (rel == "bo") return whole(p + "o_proj.bias", t.shape);
  if (rel == "q_norm") return whole(p + "q_norm.weight", t.shape);
  if (rel == "k_norm") return whole(p + "k_norm.weight", t.shape);
  throw IoError(dir_ + ": tensor attn." + rel + " has no Hugging Face source for model_type " + model_type_);
}

// DeepSeek rotates interleaved pairs (2j, 2j+1) of the rope part (transformers de-interleaves
// q_pe and k_pe before rotate_half); we rotate halves (j, j + r/2) of the rows as stored. So
// the rope rows are stored de-interleaved: new row j <- old 2j, new row r/2 + j <- old 2j + 1
// (q.k is unchanged: both sides are permuted alike). kv_b_proj holds, per head, the nope key
// rows then the value rows; we keep them as two matrices so that decode can absorb them.
std::vector<ElementRun> HfCheckpoint::mla_runs(const std::string& p, const std::string& rel, const TensorInfo& t,
                                               const MixerSpec& m) const {
  const int64_t h = m.n_heads, nope = m.qk_nope_dim, rope = m.qk_rope_dim, dqk = nope + rope, v = m.v_head_dim;
  const int64_t lora = m.kv_lora_rank;
  auto rope_rows = [&](std::vector<ElementRun>& out, const std::string& name, const Shape& shape, int64_t first) {
    for (int64_t j = 0; j < rope; ++j) {
      const int64_t src = m.rope ? (j < rope / 2 ? 2 * j : 2 * (j - rope / 2) + 1) : j;
      out.push_back(rows(name, shape, first + src, 1));
    }
  };
  auto per_head_query = [&](const std::string& name, int64_t in) {
    const Shape shape{h * dqk, in};
    std::vector<ElementRun> out;
    for (int64_t hd = 0; hd < h; ++hd) {
      if (nope) out.push_back(rows(name, shape, hd * dqk, nope));
      rope_rows(out, name, shape, hd * dqk + nope);
    }
    return out;
  };
  if (rel == "wq") return per_head_query(p + "q_proj.weight", config_.d_model);
  if (rel == "wq_a") return whole(p + "q_a_proj.weight", t.shape);
  if (rel == "q_a_norm") return whole(p + "q_a_layernorm.weight", t.shape);
  if (rel == "wq_b") return per_head_query(p + "q_b_proj.weight", m.q_lora_rank);
  if (rel == "wkv_a") {
    const std::string name = p + "kv_a_proj_with_mqa.weight";
    std::vector<ElementRun> out{rows(name, t.shape, 0, lora)};
    rope_rows(out, name, t.shape, lora);
    return out;
  }
  if (rel == "kv_a_norm") return whole(p + "kv_a_layernorm.weight", t.shape);
  if (rel == "wk_b" || rel == "wv_b") {
    const Shape shape{h * (nope + v), lora};
    std::vector<ElementRun> out;
    for (int64_t hd = 0; hd < h; ++hd)
      out.push_back(rel == "wk_b" ? rows(p + "kv_b_proj.weight", shape, hd * (nope + v), nope)
                                  : rows(p + "kv_b_proj.weight", shape, hd * (nope + v) + nope, v));
    return out;
  }
  if (rel == "wo") return whole(p + "o_proj.weight", t.shape);
  throw IoError(dir_ + ": tensor attn." + rel + " has no Hugging Face source for model_type " + model_type_);
}

// Gated DeltaNet (Qwen3-Next, Qwen3.5). The conv runs over the channels [q, k, v] (conv1d.weight
// [2 h d_k + h_v d_v, 1, K]); A_log, dt_bias, in_proj_a and in_proj_b give each value head its
// decay and beta, in_proj_z the output gate, and norm.weight a plain gain (transformers'
// RMSNormGated), stored less 1 when the model's norms read their gains as 1 + w. Qwen3.5 keeps
// q, k, v in in_proj_qkv, z in in_proj_z, b and a in in_proj_b and in_proj_a; Qwen3-Next fuses
// them per key head g: in_proj_qkvz holds g's [q (d_k), k (d_k), v (r d_v), z (r d_v)] rows and
// in_proj_ba g's [b (r), a (r)] rows, r = h_v / h value heads per key head.
std::vector<ElementRun> HfCheckpoint::gdn_runs(const std::string& p, const std::string& rel, const TensorInfo& t,
                                               const MixerSpec& m) const {
  const int64_t h = m.n_heads, dk = m.head_dim, hv = m.value_heads(), dv = m.value_dim(), r = hv / h, d = config_.d_model;
  const int64_t key = h * dk, value = hv * dv;
  if (rel == "conv_q" || rel == "conv_k" || rel == "conv_v") {
    const int64_t first = rel == "conv_q" ? 0 : rel == "conv_k" ? key : 2 * key;
    return {rows(p + "conv1d.weight", {2 * key + value, 1, m.conv_kernel}, first, t.shape[0])};
  }
  if (rel == "a_log") return whole(p + "A_log", t.shape);
  if (rel == "decay_bias") return whole(p + "dt_bias", t.shape);
  if (rel == "wo") return whole(p + "out_proj.weight", t.shape);
  if (rel == "o_norm") {
    std::vector<ElementRun> out = whole(p + "norm.weight", t.shape);
    if (config_.norm.unit_offset) out[0].add = -1.0f;
    return out;
  }
  const bool fused = !has(p + "in_proj_qkv.weight") && has(p + "in_proj_qkvz.weight");
  if (!fused) {
    if (rel == "wq" || rel == "wk" || rel == "wv")
      return {rows(p + "in_proj_qkv.weight", {2 * key + value, d}, rel == "wq" ? 0 : rel == "wk" ? key : 2 * key, t.shape[0])};
    if (rel == "wg") return whole(p + "in_proj_z.weight", t.shape);
    if (rel == "w_beta") return whole(p + "in_proj_b.weight", t.shape);
    if (rel == "w_decay") return whole(p + "in_proj_a.weight", t.shape);
  } else {
    const int64_t group = 2 * dk + 2 * r * dv;  // one key head's rows of in_proj_qkvz
    auto per_key_head = [&](const std::string& name, const Shape& shape, int64_t stride, int64_t offset, int64_t count) {
      std::vector<ElementRun> out;
      for (int64_t g = 0; g < h; ++g) out.push_back(rows(name, shape, g * stride + offset, count));
      return out;
    };
    const std::string qkvz = p + "in_proj_qkvz.weight", ba = p + "in_proj_ba.weight";
    if (rel == "wq") return per_key_head(qkvz, {h * group, d}, group, 0, dk);
    if (rel == "wk") return per_key_head(qkvz, {h * group, d}, group, dk, dk);
    if (rel == "wv") return per_key_head(qkvz, {h * group, d}, group, 2 * dk, r * dv);
    if (rel == "wg") return per_key_head(qkvz, {h * group, d}, group, 2 * dk + r * dv, r * dv);
    if (rel == "w_beta") return per_key_head(ba, {2 * hv, d}, 2 * r, 0, r);
    if (rel == "w_decay") return per_key_head(ba, {2 * hv, d}, 2 * r, r, r);
  }
  throw IoError(dir_ + ": tensor attn." + rel + " has no Hugging Face source for model_type " + model_type_);
}

// Mamba-2 (Granite 4.0-H): in_proj [2 inner + 2 G N + h, d] holds the rows of z, x, B, C, dt in
// that order; conv1d.weight [inner + 2 G N, 1, K] and conv1d.bias the conv's over x, B, C; dt_bias,
// A_log, D per head; norm.weight the gated norm's gain; out_proj.
std::vector<ElementRun> HfCheckpoint::mamba2_runs(const std::string& p, const std::string& rel, const TensorInfo& t,
                                                  const MixerSpec& m) const {
  const int64_t inner = int64_t(m.n_heads) * m.head_dim, bc = int64_t(m.ssm_groups()) * m.state_dim, h = m.n_heads;
  const int64_t channels = inner + 2 * bc, d = config_.d_model;
  const Shape in_proj{inner + channels + h, d}, conv{channels, 1, m.conv_kernel}, conv_bias{channels};
  if (rel == "wg") return {rows(p + "in_proj.weight", in_proj, 0, inner)};
  if (rel == "w_x") return {rows(p + "in_proj.weight", in_proj, inner, inner)};
  if (rel == "w_b") return {rows(p + "in_proj.weight", in_proj, 2 * inner, bc)};
  if (rel == "w_c") return {rows(p + "in_proj.weight", in_proj, 2 * inner + bc, bc)};
  if (rel == "w_decay") return {rows(p + "in_proj.weight", in_proj, 2 * inner + 2 * bc, h)};
  if (rel == "conv_x") return {rows(p + "conv1d.weight", conv, 0, inner)};
  if (rel == "conv_b") return {rows(p + "conv1d.weight", conv, inner, bc)};
  if (rel == "conv_c") return {rows(p + "conv1d.weight", conv, inner + bc, bc)};
  if (rel == "conv_x_bias") return {rows(p + "conv1d.bias", conv_bias, 0, inner)};
  if (rel == "conv_b_bias") return {rows(p + "conv1d.bias", conv_bias, inner, bc)};
  if (rel == "conv_c_bias") return {rows(p + "conv1d.bias", conv_bias, inner + bc, bc)};
  if (rel == "decay_bias") return whole(p + "dt_bias", t.shape);
  if (rel == "a_log") return whole(p + "A_log", t.shape);
  if (rel == "d_skip") return whole(p + "D", t.shape);
  if (rel == "o_norm") return whole(p + "norm.weight", t.shape);
  if (rel == "wo") return whole(p + "out_proj.weight", t.shape);
  throw IoError(dir_ + ": tensor attn." + rel + " has no Mamba-2 source");
}

// LFM2: operator_norm and ffn_norm; attention as Llama's with out_proj and q_layernorm /
// k_layernorm; the short convolution's in_proj [3d, d] holds the rows of B, C, x in that order,
// conv.weight [d, 1, K] its taps; the MLP is feed_forward.w1 (gate), w3 (up), w2 (down).
// LFM2-MoE's routed layers: feed_forward.gate (the router), expert_bias (selection only), the
// experts as Mixtral names them (experts.{e}.w1 / w3 / w2) or stacked (transformers 5).
std::vector<ElementRun> HfCheckpoint::lfm2_runs(int layer, const std::string& p, const std::string& rel,
                                                const TensorInfo& t) const {
  const int64_t d = config_.d_model;
  if (rel == "attn_norm") return whole(p + "operator_norm.weight", t.shape);
  if (rel == "ffn_norm") return whole(p + "ffn_norm.weight", t.shape);
  if (rel == "ffn.w_gate") return whole(p + "feed_forward.w1.weight", t.shape);
  if (rel == "ffn.w_up") return whole(p + "feed_forward.w3.weight", t.shape);
  if (rel == "ffn.w_down") return whole(p + "feed_forward.w2.weight", t.shape);
  if (rel == "ffn.balance_bias") return whole(p + "feed_forward.expert_bias", t.shape);  // LFM2-MoE
  if (rel.rfind("ffn.", 0) == 0) return ffn_runs(p + "feed_forward.", rel.substr(4), t, config_.ffn(layer));
  const MixerSpec& m = config_.mixer(layer);
  if (m.kind == MixerKind::short_conv) {
    if (rel == "attn.w_b" || rel == "attn.w_c" || rel == "attn.w_x")
      return {rows(p + "conv.in_proj.weight", {3 * d, d}, (rel == "attn.w_b" ? 0 : rel == "attn.w_c" ? 1 : 2) * d, d)};
    if (rel == "attn.conv") return {rows(p + "conv.conv.weight", {d, 1, m.conv_kernel}, 0, d)};
    if (rel == "attn.wo") return whole(p + "conv.out_proj.weight", t.shape);
  } else {
    if (rel == "attn.wo") return whole(p + "self_attn.out_proj.weight", t.shape);
    if (rel == "attn.q_norm") return whole(p + "self_attn.q_layernorm.weight", t.shape);
    if (rel == "attn.k_norm") return whole(p + "self_attn.k_layernorm.weight", t.shape);
    if (rel.rfind("attn.", 0) == 0) return attention_runs(p + "self_attn.", rel.substr(5), t, m);
  }
  throw IoError(dir_ + ": tensor " + t.name + " has no Hugging Face source for model_type lfm2");
}

// The gate (or up) rows of a fused tensor, [2 hidden, in] for one MLP or [E, 2 hidden, in] for
// stacked experts, where each MLP holds its gate rows, then its up rows (gate_up_proj,
// Granite's input_linear).
std::vector<ElementRun> HfCheckpoint::gate_or_up(const std::string& name, const Shape& fused, bool gate) const {
  const int64_t experts = fused.size() == 3 ? fused[0] : 1, hidden = fused[fused.size() - 2] / 2;
  std::vector<ElementRun> out;
  for (int64_t e = 0; e < experts; ++e) out.push_back(rows(name, fused, e * 2 * hidden + (gate ? 0 : hidden), hidden));
  return out;
}

// Dense MLPs (gate_proj/up_proj split or gate_up_proj fused, gate rows first), the router,
// experts one tensor per expert (Mixtral's w1/w3/w2 too) or stacked ([E, 2h, x] gate_up_proj
// and [E, x, h] down_proj), and shared experts.
std::vector<ElementRun> HfCheckpoint::ffn_runs(const std::string& p, const std::string& rel, const TensorInfo& t,
                                               const FfnSpec& f) const {
  const bool mixtral = model_type_ == "mixtral" || model_type_ == "lfm2_moe";  // experts.{e}.w1 / w3 / w2
  auto mlp = [&](const std::string& q, const std::string& w, const Shape& shape) -> std::vector<ElementRun> {
    const int64_t hidden = w == "w_down" ? shape[1] : shape[0], in = w == "w_down" ? shape[0] : shape[1];
    if (w == "w_down") return whole(q + "down_proj.weight", shape);
    const std::string split = q + (w == "w_gate" ? "gate_proj.weight" : "up_proj.weight");
    if (has(split) || !has(q + "gate_up_proj.weight")) return whole(split, shape);
    return gate_or_up(q + "gate_up_proj.weight", {2 * hidden, in}, w == "w_gate");
  };
  auto bias = [&](const std::string& q, const std::string& b) {
    return whole(q + (b == "b_gate" ? "gate_proj.bias" : b == "b_up" ? "up_proj.bias" : "down_proj.bias"), t.shape);
  };
  if (granite_moe(model_type_)) return granite_moe_runs(p, rel, t);
  if (rel == "w_gate" || rel == "w_up" || rel == "w_down") return mlp(p, rel, t.shape);
  if (rel == "b_gate" || rel == "b_up" || rel == "b_down") return bias(p, rel);
  if (rel == "router") return whole(p + "gate.weight", t.shape);
  if (rel == "balance_bias") return whole(p + "gate.e_score_correction_bias", t.shape);
  if (rel.rfind("shared.", 0) == 0) {
    const std::string q = p + (has(p + "shared_expert.down_proj.weight") ? "shared_expert." : "shared_experts.");
    return mlp(q, rel.substr(7), t.shape);
  }
  if (rel == "shared_gate") return whole(p + "shared_expert_gate.weight", t.shape);
  if (rel.rfind("experts.", 0) == 0) {
    const std::string w = rel.substr(8);
    const int64_t E = t.shape[0], r = t.shape[1], c = t.shape[2];
    if (w != "w_gate" && w != "w_up" && w != "w_down")
      throw IoError(dir_ + ": tensor ffn." + rel + " has no Hugging Face source for model_type " + model_type_);
    const bool stacked = !has(p + "experts.0." + (mixtral ? "w2.weight" : "down_proj.weight")) &&
                         has(p + "experts.down_proj");
    if (stacked) {
      if (w == "w_down") return whole(p + "experts.down_proj", t.shape);
      return gate_or_up(p + "experts.gate_up_proj", {E, 2 * r, c}, w == "w_gate");
    }
    std::vector<ElementRun> out;
    const char* mixtral_name = w == "w_gate" ? "w1.weight" : w == "w_up" ? "w3.weight" : "w2.weight";
    for (int64_t e = 0; e < E; ++e) {
      const std::string q = p + "experts." + num(e) + ".";
      auto one = mixtral ? whole(q + mixtral_name, {r, c}) : mlp(q, w, {r, c});
      out.insert(out.end(), one.begin(), one.end());
    }
    return out;
  }
  (void)f;
  throw IoError(dir_ + ": tensor ffn." + rel + " has no Hugging Face source for model_type " + model_type_);
}

// Granite MoE: router.layer; the experts' input_linear [E, 2 ffn, d] (each expert's gate rows,
// then its up rows) and output_linear [E, d, ffn].
std::vector<ElementRun> HfCheckpoint::granite_moe_runs(const std::string& p, const std::string& rel, const TensorInfo& t) const {
  if (rel == "router") return whole(p + "router.layer.weight", t.shape);
  if (rel == "experts.w_down") return whole(p + "output_linear.weight", t.shape);
  if (rel == "experts.w_gate" || rel == "experts.w_up")
    return gate_or_up(p + "input_linear.weight", {t.shape[0], 2 * t.shape[1], t.shape[2]}, rel == "experts.w_gate");
  throw IoError(dir_ + ": tensor ffn." + rel + " has no Hugging Face source for model_type " + model_type_);
}

// Granite 4: the MLP (dense, or the MoE's one shared expert) is shared_mlp's input_linear [2 s,
// d] (gate rows, then up rows) and output_linear; routed experts as Granite MoE's.
std::vector<ElementRun> HfCheckpoint::granite_hybrid_ffn_runs(const std::string& p, const std::string& rel,
                                                              const TensorInfo& t) const {
  const std::string w = rel.rfind("shared.", 0) == 0 ? rel.substr(7) : rel;
  if (w == "w_gate" || w == "w_up") return gate_or_up(p + "shared_mlp.input_linear.weight", {2 * t.shape[0], t.shape[1]}, w == "w_gate");
  if (w == "w_down") return whole(p + "shared_mlp.output_linear.weight", t.shape);
  return granite_moe_runs(p + "block_sparse_moe.", rel, t);
}

std::vector<std::string> HfCheckpoint::unused(const WeightMap& map) const {
  std::unordered_set<const TensorView*> read;
  for (const TensorInfo& t : map.tensors)
    for (const ElementRun& r : runs(t)) read.insert(r.tensor);
  std::vector<std::string> out;
  for (auto& f : set_.files())
    for (const TensorView& t : f->tensors())
      if (!read.count(&t)) out.push_back(t.name);
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace wren
