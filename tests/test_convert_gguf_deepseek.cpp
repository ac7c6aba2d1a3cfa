// deepseek2 GGUF files (MLA with a query LoRA or a direct query, attn_kv_b whole or split into
// k_b / v_b, a leading dense layer, routed and shared experts) written as llama.cpp's converter
// writes them, converted and run against the HF-semantics oracle over the same tensors; and a
// Wren MLA model exported to deepseek2 and converted back bit for bit.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>

#include "gguf_fixture.h"
#include "hf_fixture.h"
#include "io/gguf.h"
#include "io/hf_checkpoint.h"
#include "runtime/convert.h"
#include "runtime/gguf_export.h"
#include "runtime/model_files.h"
#include "runtime/session.h"
#include "test_util.h"

namespace wren {
namespace {

using namespace hf_fixture;
using namespace gguf_fixture;
using testing_util::TempDir;

// The DeepSeek-V2 fixture without the query LoRA: q_proj straight from x.
HfModel deepseek_without_q_lora() {
  HfModel m = make_deepseek();
  m.config["q_lora_rank"] = nullptr;
  for (int i = 0; i < kLayers; ++i) {
    const std::string a = "model.layers." + std::to_string(i) + ".self_attn.";
    for (const char* n : {"q_a_proj.weight", "q_a_layernorm.weight", "q_b_proj.weight"}) m.tensors.erase(a + n);
    m.add(a + "q_proj.weight", {kHeads * (kNope + kRope), kD}, 0.1f);
  }
  return m;
}

// A deepseek2 file as llama.cpp's converter writes one: HF's rows unpermuted (llama.cpp rotates
// the rope part's pairs, as HF does after its de-interleave), experts stacked [E, rows, cols],
// kv_b whole or (newer files, split_kv_b) split per head into k_b transposed [h, lora, nope]
// and v_b [h, v, lora]. Each tensor in types' type (default F16; 1-D F32); the oracle's tensors
// are replaced by what the blocks hold.
void write_deepseek_gguf(HfModel& m, const std::string& path, const std::map<std::string, GgmlType>& types, bool split_kv_b) {
  GgufWriter w;
  const std::string a = "deepseek2.";
  w.set_string("general.architecture", "deepseek2");
  w.set_u32(a + "context_length", 64), w.set_u32(a + "embedding_length", kD), w.set_u32(a + "block_count", kLayers);
  w.set_u32(a + "feed_forward_length", kInter), w.set_u32(a + "attention.head_count", kHeads);
  w.set_u32(a + "attention.head_count_kv", split_kv_b ? 1 : kHeads);
  w.set_f32(a + "attention.layer_norm_rms_epsilon", 1e-6f), w.set_f32(a + "rope.freq_base", 300.0f);
  w.set_u32(a + "rope.dimension_count", kRope), w.set_u32(a + "attention.kv_lora_rank", kLora);
  if (!m.config["q_lora_rank"].is_null()) w.set_u32(a + "attention.q_lora_rank", kQLora);
  if (split_kv_b) {  // the absorbed (MQA) view llama.cpp runs, and the per-head MLA widths
    w.set_u32(a + "attention.key_length", kLora + kRope), w.set_u32(a + "attention.value_length", kLora);
    w.set_u32(a + "attention.key_length_mla", kNope + kRope), w.set_u32(a + "attention.value_length_mla", kV);
  } else {
    w.set_u32(a + "attention.key_length", kNope + kRope), w.set_u32(a + "attention.value_length", kV);
  }
  w.set_u32(a + "leading_dense_block_count", 1), w.set_u32(a + "expert_count", kExperts);
  w.set_u32(a + "expert_used_count", kTopK), w.set_u32(a + "expert_feed_forward_length", kExpertHidden);
  w.set_u32(a + "expert_shared_count", 1), w.set_f32(a + "expert_weights_scale", 1.0f);
  w.set_bool(a + "expert_weights_norm", false), w.set_u32(a + "expert_gating_func", 1);
  set_tokenizer(w, "gpt2");

  static const std::map<std::string, std::string> layer = {
      {"input_layernorm.weight", "attn_norm"}, {"post_attention_layernorm.weight", "ffn_norm"},
      {"self_attn.q_proj.weight", "attn_q"}, {"self_attn.q_a_proj.weight", "attn_q_a"},
      {"self_attn.q_a_layernorm.weight", "attn_q_a_norm"}, {"self_attn.q_b_proj.weight", "attn_q_b"},
      {"self_attn.kv_a_proj_with_mqa.weight", "attn_kv_a_mqa"}, {"self_attn.kv_a_layernorm.weight", "attn_kv_a_norm"},
      {"self_attn.kv_b_proj.weight", "attn_kv_b"}, {"self_attn.o_proj.weight", "attn_output"},
      {"mlp.gate_proj.weight", "ffn_gate"}, {"mlp.up_proj.weight", "ffn_up"}, {"mlp.down_proj.weight", "ffn_down"},
      {"mlp.gate.weight", "ffn_gate_inp"}, {"mlp.shared_experts.gate_proj.weight", "ffn_gate_shexp"},
      {"mlp.shared_experts.up_proj.weight", "ffn_up_shexp"}, {"mlp.shared_experts.down_proj.weight", "ffn_down_shexp"}};
  uint32_t seed = 300;
  // Encodes `values` [rows, cols] as the GGUF tensor `name` and returns what the blocks hold.
  auto put = [&](const std::string& name, Shape shape, std::vector<float> values) {
    const std::string kind = name.substr(name.find('.', 4) + 1);
    GgmlType type = shape.size() == 1 ? GgmlType::F32 : GgmlType::F16;
    if (auto it = types.find(kind); it != types.end()) type = it->second;
    auto held = std::make_shared<std::vector<uint8_t>>(encode_for_test(type, values, shape.back(), seed++));
    w.add_tensor(name + ".weight", type, shape, [held](const ByteSink& sink) { sink(held->data(), held->size()); });
    return values;
  };
  m.tensors["model.embed_tokens.weight"].values = put("token_embd", {kVocab, kD}, m.at("model.embed_tokens.weight"));
  m.tensors["model.norm.weight"].values = put("output_norm", {kD}, m.at("model.norm.weight"));
  m.tensors["lm_head.weight"].values = put("output", {kVocab, kD}, m.at("lm_head.weight"));
  for (int i = 0; i < kLayers; ++i) {
    const std::string p = "model.layers." + std::to_string(i) + ".", blk = "blk." + std::to_string(i) + ".";
    for (auto& [hf, g] : layer) {
      if (!m.has(p + hf) || (split_kv_b && g == "attn_kv_b")) continue;
      HfTensor& t = m.tensors[p + hf];
      t.values = put(blk + g, t.shape, t.values);
    }
    if (split_kv_b) {  // k_b[h][c][e] = kv_b[h (nope + v) + e][c], v_b[h][e][c] = kv_b[h (nope + v) + nope + e][c]
      std::vector<float>& kv = m.tensors[p + "self_attn.kv_b_proj.weight"].values;
      std::vector<float> kb(size_t(kHeads * kLora * kNope)), vb(size_t(kHeads * kV * kLora));
      for (int h = 0; h < kHeads; ++h)
        for (int c = 0; c < kLora; ++c) {
          for (int e = 0; e < kNope; ++e) kb[size_t((h * kLora + c) * kNope + e)] = kv[size_t((h * (kNope + kV) + e) * kLora + c)];
          for (int e = 0; e < kV; ++e) vb[size_t((h * kV + e) * kLora + c)] = kv[size_t((h * (kNope + kV) + kNope + e) * kLora + c)];
        }
      kb = put(blk + "attn_k_b", {kHeads, kLora, kNope}, kb), vb = put(blk + "attn_v_b", {kHeads, kV, kLora}, vb);
      for (int h = 0; h < kHeads; ++h)
        for (int c = 0; c < kLora; ++c) {
          for (int e = 0; e < kNope; ++e) kv[size_t((h * (kNope + kV) + e) * kLora + c)] = kb[size_t((h * kLora + c) * kNope + e)];
          for (int e = 0; e < kV; ++e) kv[size_t((h * (kNope + kV) + kNope + e) * kLora + c)] = vb[size_t((h * kV + e) * kLora + c)];
        }
    }
    if (!m.has(p + "mlp.experts.0.gate_proj.weight")) continue;
    for (const char* proj : {"gate_proj", "up_proj", "down_proj"}) {
      const std::string one = p + "mlp.experts.0." + proj + ".weight";
      const Shape s = m.tensors[one].shape;
      const size_t n = m.at(one).size();
      std::vector<float> stacked;
      for (int e = 0; e < kExperts; ++e) {
        const auto& v = m.at(p + "mlp.experts." + std::to_string(e) + "." + proj + ".weight");
        stacked.insert(stacked.end(), v.begin(), v.end());
      }
      const std::string g = std::string(proj) == "gate_proj" ? "ffn_gate_exps" : std::string(proj) == "up_proj" ? "ffn_up_exps" : "ffn_down_exps";
      stacked = put(blk + g, {kExperts, s[0], s[1]}, stacked);
      for (int e = 0; e < kExperts; ++e)
        std::copy_n(stacked.begin() + int64_t(e * n), n, m.tensors[p + "mlp.experts." + std::to_string(e) + "." + proj + ".weight"].values.begin());
    }
  }
  w.write(path);
}

TEST(ConvertGguf, Deepseek2QueryLoraAndKvBMatchHfForward) {
  TempDir dir;
  HfModel m = make_deepseek();
  write_deepseek_gguf(m, dir / "m.gguf",
                      {{"attn_q_b", GgmlType::Q8_0}, {"attn_kv_a_mqa", GgmlType::Q4_K}, {"attn_output", GgmlType::Q8_0},
                       {"ffn_gate_exps", GgmlType::Q5_K}, {"ffn_down_exps", GgmlType::Q4_0}, {"ffn_up_shexp", GgmlType::Q6_K},
                       {"ffn_gate", GgmlType::BF16}, {"attn_kv_b", GgmlType::F32}},
                      false);
  expect_converted_matches(m, dir);
}

TEST(ConvertGguf, Deepseek2DirectQueryAndSplitKvBMatchHfForward) {
  TempDir dir;
  HfModel m = deepseek_without_q_lora();
  write_deepseek_gguf(m, dir / "m.gguf", {{"attn_q", GgmlType::Q8_0}, {"attn_k_b", GgmlType::BF16}, {"attn_v_b", GgmlType::F16}}, true);
  expect_converted_matches(m, dir);
}

// A model directory of the DeepSeek fixture's config (q8 at group 32, random values) through
// deepseek2 GGUF and back: the rope rows re-interleaved and kv_b gathered on the way out, undone
// on the way in, so every tensor is bit for bit what it was and the logits are identical (with
// YaRN, whose mscale passes through an f32 key, within 1e-5).
TEST(ConvertGguf, Deepseek2ExportRoundTripIsBitIdentical) {
  for (bool q_lora : {true, false}) {
    SCOPED_TRACE(q_lora ? "query LoRA" : "direct query");
    TempDir dir;
    HfModel m = q_lora ? make_deepseek() : deepseek_without_q_lora();
    if (!q_lora)  // YaRN goes out as rope.scaling.* and yarn_log_multiplier = 0.1 mscale_all_dim
      m.config["rope_scaling"] = {{"type", "yarn"}, {"factor", 4.0}, {"original_max_position_embeddings", 16},
                                  {"mscale", 0.707}, {"mscale_all_dim", 0.707}};
    m.write(dir.path.string(), 1, tokenizer_json());
    const ModelConfig c = HfCheckpoint(dir.path.string()).config();
    write_random_model(dir / "a", c, 7, kernels::DType::q8, 32, tokenizer_json(), false, 1);
    EXPECT_EQ(export_gguf(dir / "a", dir / "a.gguf"), "deepseek2");
    const GgufFile g(dir / "a.gguf");
    EXPECT_NE(g.find("blk.0.attn_kv_b.weight"), nullptr);
    EXPECT_EQ(g.find("blk.0.attn_k_b.weight"), nullptr);
    EXPECT_EQ(g.integer("deepseek2.leading_dense_block_count"), 1);
    EXPECT_EQ(g.integer("deepseek2.expert_shared_count"), 1);
    ConvertOptions o;
    o.dtype = kernels::DType::q8;
    convert_gguf_file(dir / "a.gguf", dir / "b", o);
    const ModelFiles a(dir / "a"), b(dir / "b");
    const Rope &ra = *a.config().mixer(0).rope, &rb = *b.config().mixer(0).rope;
    EXPECT_EQ(rb.yarn_factor, ra.yarn_factor);
    EXPECT_EQ(rb.yarn_original_context, ra.yarn_original_context);
    EXPECT_NEAR(rb.yarn_mscale_all_dim, ra.yarn_mscale_all_dim, 1e-6);  // through an f32 key
    EXPECT_EQ(b.config().ffn(0).kind, FfnKind::dense);
    EXPECT_EQ(b.config().ffn(1).n_shared, a.config().ffn(1).n_shared);
    for (const TensorInfo& t : a.weight_map().tensors) {
      const WeightView &x = a.weight(t.name), &y = b.weight(t.name);
      ASSERT_EQ(x.storage, y.storage) << t.name;
      ASSERT_EQ(std::memcmp(x.data, y.data, x.stored->nbytes), 0) << t.name;
      if (x.scales) {
        ASSERT_EQ(std::memcmp(x.scales, y.scales, x.stored_scales->nbytes), 0) << t.name;
      }
    }
    Session sa(open_model(dir / "a")), sb(open_model(dir / "b"));
    std::vector<float> la(static_cast<size_t>(sa.vocab_rows())), lb(la.size());
    for (int32_t t : testing_util::random_tokens(5, kVocab, 6)) {
      sa.decode(t, la.data()), sb.decode(t, lb.data());
      if (q_lora) ASSERT_EQ(la, lb);
      else EXPECT_LE(testing_util::max_abs_diff(la, lb), 1e-5f);  // mscale went through f32: ~1e-8 apart
    }
  }
}

}  // namespace
}  // namespace wren
