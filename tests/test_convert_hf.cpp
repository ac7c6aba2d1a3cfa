// wren convert from Hugging Face folders: for each mapped family a small checkpoint in the
// exact transformers layout (bf16, sharded with an index), converted to f32 and run by the
// engine, against the plain HF-semantics forward of hf_fixture.h over the same tensors.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>

#include "config/read_file.h"
#include "hf_fixture.h"
#include "io/hf_checkpoint.h"
#include "model/weights.h"
#include "runtime/convert.h"
#include "runtime/model_files.h"
#include "runtime/session.h"
#include "test_util.h"
#include "text/bpe_train.h"

namespace wren {
namespace {

using namespace hf_fixture;
using testing_util::TempDir;

// ---- The comparison ----------------------------------------------------------------------------

// Converts `m` (written with `shards` files) at f32 and compares the engine's logits with the
// oracle's at every position of a short sequence.
void expect_logits_match(const HfModel& m, int shards) {
  TempDir dir;
  const std::string src = dir / "hf", dst = dir / "wren";
  std::filesystem::create_directories(src);
  m.write(src, shards, tokenizer_json());
  ConvertOptions o;
  o.dtype = kernels::DType::f32;
  const std::vector<std::string> unused = convert_hf_checkpoint(src, dst, o);
  // Left out by design: old rotary caches, multi-token-prediction blocks, vision towers.
  for (const std::string& u : unused)
    EXPECT_TRUE(u.find("rotary_emb") != std::string::npos || u.rfind("mtp.", 0) == 0 || u.rfind("model.visual.", 0) == 0)
        << "unread tensor " << u;

  Session s(open_model(dst), {.kv = KvType::f32});  // the oracle's f32, not the default f16 cache
  HfOracle oracle(m);
  const std::vector<int32_t> tokens = testing_util::random_tokens(7, kVocab, 3);
  std::vector<float> logits(static_cast<size_t>(s.vocab_rows()));
  for (int32_t t : tokens) {
    s.decode(t, logits.data());
    const Vec want = oracle.step(t);
    float scale = 0;
    for (float v : want) scale = std::max(scale, std::fabs(v));
    ASSERT_EQ(logits.size(), want.size());
    EXPECT_LE(testing_util::max_abs_diff(logits, want), 2e-4f * scale + 1e-5f) << "at position " << s.position() - 1;
  }
}

TEST(ConvertHf, LlamaShardedMatchesHfForward) { expect_logits_match(make_dense_or_moe({.type = "llama"}), 3); }
TEST(ConvertHf, LlamaFusedQkvMatchesHfForward) {
  expect_logits_match(make_dense_or_moe({.type = "llama", .fused_qkv = true}), 1);
}
TEST(ConvertHf, MistralMatchesHfForward) { expect_logits_match(make_dense_or_moe({.type = "mistral"}), 2); }
TEST(ConvertHf, Qwen2BiasesMatchHfForward) { expect_logits_match(make_dense_or_moe({.type = "qwen2"}), 2); }
TEST(ConvertHf, Qwen3QkNormMatchesHfForward) { expect_logits_match(make_dense_or_moe({.type = "qwen3"}), 2); }
TEST(ConvertHf, GemmaMatchesHfForward) { expect_logits_match(make_dense_or_moe({.type = "gemma"}), 2); }
TEST(ConvertHf, Gemma2MatchesHfForward) { expect_logits_match(make_dense_or_moe({.type = "gemma2"}), 2); }
TEST(ConvertHf, Gemma3MatchesHfForward) { expect_logits_match(make_dense_or_moe({.type = "gemma3_text"}), 2); }
TEST(ConvertHf, OlmoeMatchesHfForward) { expect_logits_match(make_dense_or_moe({.type = "olmoe", .moe = true}), 2); }
TEST(ConvertHf, Olmo2PostNormMatchesHfForward) { expect_logits_match(make_dense_or_moe({.type = "olmo2"}), 2); }
// Olmo 3: a sliding layer (window 3) rotating without the config's scaling, then a full one with it.
TEST(ConvertHf, Olmo3SlidingLayersRotateUnscaled) {
  HfModel m = make_dense_or_moe({.type = "olmo3"});
  m.config["sliding_window"] = 3;
  m.config["layer_types"] = {"sliding_attention", "full_attention"};
  m.config["rope_scaling"] = {{"rope_type", "linear"}, {"factor", 4.0}};
  expect_logits_match(m, 1);
}
// EXAONE 4 with windows: a sliding layer with RoPE (window 3), then a full one without.
TEST(ConvertHf, Exaone4SlidingRotatesGlobalDoesNot) {
  HfModel m = make_dense_or_moe({.type = "exaone4"});
  m.config["sliding_window"] = 3;
  m.config["layer_types"] = {"sliding_attention", "full_attention"};
  expect_logits_match(m, 1);
}
TEST(ConvertHf, GraniteMultipliersMatchHfForward) { expect_logits_match(make_granite(false), 2); }
TEST(ConvertHf, Granite4RopeMatchesHfForward) { expect_logits_match(make_granite4("rope"), 1); }
TEST(ConvertHf, Granite4NopeMatchesHfForward) { expect_logits_match(make_granite4("nope"), 1); }
TEST(ConvertHf, Granite4HybridMamba2MatchesHfForward) { expect_logits_match(make_granite4h(), 1); }
TEST(ConvertHf, Granite4HybridExpertsBesideTheSharedMlpMatchHfForward) { expect_logits_match(make_granite4h(true), 2); }
TEST(ConvertHf, GraniteMoeMatchesHfForward) { expect_logits_match(make_granite(true), 2); }
TEST(ConvertHf, MixtralMatchesHfForward) { expect_logits_match(make_dense_or_moe({.type = "mixtral", .moe = true}), 2); }
TEST(ConvertHf, Qwen3MoePerExpertMatchesHfForward) {
  expect_logits_match(make_dense_or_moe({.type = "qwen3_moe", .moe = true}), 3);
}
TEST(ConvertHf, Qwen3MoeStackedExpertsMatchHfForward) {
  expect_logits_match(make_dense_or_moe({.type = "qwen3_moe", .moe = true, .stacked_experts = true}), 1);
}
TEST(ConvertHf, DeepseekV2MlaMatchesHfForward) { expect_logits_match(make_deepseek(), 2); }
// Seven positions: 0-3 rotate by the short factors, 4-6 by the long ones, 5 and 6 see five keys.
// Qwen3.5: DeltaNet and gated-attention layers, zero-centred gains, the text model inside the
// multimodal wrapper; Qwen3.5-MoE's routed and shared experts; Qwen3-Next's fused projections.
TEST(ConvertHf, Qwen35MatchesHfForward) { expect_logits_match(make_qwen_hybrid("qwen3_5"), 2); }
TEST(ConvertHf, Qwen35MoeMatchesHfForward) { expect_logits_match(make_qwen_hybrid("qwen3_5_moe"), 2); }
TEST(ConvertHf, Qwen3NextFusedProjectionsMatchHfForward) { expect_logits_match(make_qwen_hybrid("qwen3_next"), 3); }

// LFM2: gated short convolutions beside GQA attention, its own tensor names.
TEST(ConvertHf, Lfm2ShortConvMatchesHfForward) { expect_logits_match(make_lfm2(), 2); }
TEST(ConvertHf, Lfm2MoeSigmoidRoutingMatchesHfForward) { expect_logits_match(make_lfm2_moe(), 2); }

TEST(ConvertHf, Phi3LongRopeMatchesHfForward) { expect_logits_match(make_phi3(), 2); }
TEST(ConvertHf, Smollm3NoRopeLayerMatchesHfForward) {
  HfModel m = make_dense_or_moe({.type = "smollm3"});
  m.config["no_rope_layers"] = {1, 0};  // layer 1 attends without RoPE
  expect_logits_match(m, 1);
}

// q8 and q4 are written in one pass (each block's values and scales together, the values at
// their offset: SafetensorsWriter::add_pair). Every quantised weight holds exactly what
// encoding the whole f32 tensor at once gives, by convert from the HF folder, by quantize from
// f32, and by quantize into the same storage (copied as stored).
TEST(ConvertHf, QuantizedWeightsEqualWholeTensorEncoding) {
  TempDir dir;
  const std::string src = dir / "hf", f32 = dir / "f32";
  std::filesystem::create_directories(src);
  make_dense_or_moe({.type = "llama"}).write(src, 2, tokenizer_json());
  ConvertOptions o;
  o.dtype = kernels::DType::f32;
  convert_hf_checkpoint(src, f32, o);
  const ModelFiles ref(f32);
  for (const kernels::DType type : {kernels::DType::q8, kernels::DType::q4}) {
    o.dtype = type;
    const std::string tag = kernels::to_string(type);
    const std::string converted = dir / ("convert-" + tag),
                      quantized = dir / ("quantize-" + tag), copied = dir / ("copy-" + tag);
    convert_hf_checkpoint(src, converted, o);
    quantize_model_dir(f32, quantized, o);
    quantize_model_dir(converted, copied, o);
    for (const std::string& out : {converted, quantized, copied}) {
      const ModelFiles got(out);
      int checked = 0;
      for (const TensorInfo& t : ref.weight_map().tensors) {
        const WeightView& w = got.weight(t.name);
        if (!is_quantized(w.storage)) continue;  // norms stay f32
        ++checked;
        const WeightView& x = ref.weight(t.name);
        ASSERT_EQ(x.storage, kernels::DType::f32) << t.name;
        const kernels::Matrix want = kernels::encode_matrix(reinterpret_cast<const float*>(x.data), matrix_rows(t),
                                                            matrix_cols(t), w.storage, int(w.group));
        ASSERT_EQ(w.stored->nbytes, want.values.size()) << out << " " << t.name;
        EXPECT_EQ(std::memcmp(w.data, want.values.data(), want.values.size()), 0) << out << " " << t.name;
        ASSERT_EQ(w.stored_scales->nbytes, want.scales.size() * sizeof(kernels::F16)) << out << " " << t.name;
        EXPECT_EQ(std::memcmp(w.scales, want.scales.data(), w.stored_scales->nbytes), 0) << out << " " << t.name;
      }
      EXPECT_GE(checked, 7 * 2) << out;  // q, k, v, o, gate, up, down of both layers at least
    }
  }
}

}  // namespace
}  // namespace wren
