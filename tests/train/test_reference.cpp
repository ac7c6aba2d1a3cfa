// The libtorch reference against the engine: a train::Model exported to a model directory
// and run by the engine token by token gives the torch forward's logits at every position
// (embla-mini and small Llama / OLMoE / Gemma / DeepSeek / Phi-3-style configs); document masking
// makes each document of a packed row what it is alone; export writes exactly the weight map
// and the reference starts from `wren init`'s values.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>
#include <set>

#include "config/parse.h"
#include "io/model_dir.h"
#include "kernels/ops.h"
#include "model/weights.h"
#include "runtime/model_files.h"
#include "train/export.h"
#include "train/model.h"
#include "train_test_util.h"

namespace wren {
namespace {

using namespace train_test;

// Agreement of torch's batched f32 forward and the engine's per-token one on logits of O(1):
// both are f32 with different summation orders, through <= 8 layers.
constexpr float kTolerance = 1e-4f;

const char* kLlama = R"({"name": "llama-tiny", "d_model": 48, "vocab_size": 300, "vocab_pad": 4, "context_length": 512,
  "norm": {"eps": 1e-5},
  "mixers": {"a": {"kind": "attention", "n_heads": 4, "n_kv_heads": 2, "head_dim": 12,
                   "rope": {"theta": 500000, "llama3_factor": 8, "llama3_original_context": 64}}},
  "ffns": {"f": {"kind": "dense", "activation": "swiglu", "hidden": 96}},
  "layers": [{"mixer": "a", "ffn": "f", "repeat": 3}]})";

const char* kOlmoe = R"({"name": "olmoe-tiny", "d_model": 48, "vocab_size": 300, "context_length": 512,
  "mixers": {"a": {"kind": "attention", "n_heads": 4, "n_kv_heads": 4, "head_dim": 12, "qk_norm": "full",
                   "rope": {"theta": 10000}}},
  "ffns": {"moe": {"kind": "moe", "activation": "swiglu", "n_experts": 8, "top_k": 3, "expert_hidden": 24,
                   "score": "softmax", "gates": "none"}},
  "layers": [{"mixer": "a", "ffn": "moe", "repeat": 3}]})";

// Sandwich norms, unit-offset gains, tied embeddings, embedding scale, soft caps, sinks, a
// window, GeGLU.
const char* kGemma = R"({"name": "gemma-tiny", "d_model": 48, "vocab_size": 300, "context_length": 512,
  "tie_embeddings": true, "embedding_scale": 6.93, "logit_softcap": 30,
  "norm": {"placement": "sandwich", "unit_offset": true},
  "mixers": {"local": {"kind": "attention", "n_heads": 4, "n_kv_heads": 2, "head_dim": 12, "window": 6,
                       "softcap": 50, "sinks": true, "rope": {"theta": 10000, "rotary_dim": 8}},
             "global": {"kind": "attention", "n_heads": 4, "n_kv_heads": 2, "head_dim": 12, "softcap": 50,
                        "qkv_bias": true, "o_bias": true, "output_gate": true, "rope": {"theta": 10000}}},
  "ffns": {"f": {"kind": "dense", "activation": "geglu", "hidden": 96, "bias": true}},
  "layers": [{"mixer": "local", "ffn": "f"}, {"mixer": "global", "ffn": "f"}, {"mixer": "local", "ffn": "f"}]})";

// Group-limited routing, softmax over the chosen logits, a latent MoE, shared experts with a
// gate, routed scale, expert biases, YaRN.
const char* kDeepseek = R"({"name": "routing-tiny", "d_model": 48, "vocab_size": 300, "context_length": 512,
  "mixers": {"a": {"kind": "attention", "n_heads": 4, "n_kv_heads": 1, "head_dim": 12,
                   "rope": {"theta": 10000, "yarn_factor": 40, "yarn_mscale": 0.707, "yarn_mscale_all_dim": 0.707,
                            "yarn_original_context": 64}}},
  "ffns": {"moe": {"kind": "moe", "activation": "swiglu", "n_experts": 8, "top_k": 2, "expert_hidden": 16,
                   "latent_dim": 24, "n_shared": 2, "shared_hidden": 16, "shared_gate": true, "bias": true,
                   "score": "softmax", "gates": "softmax_topk", "routed_scale": 2.5, "router_bias": true,
                   "n_groups": 4, "topk_groups": 2, "balance_bias": true}},
  "layers": [{"mixer": "a", "ffn": "moe", "repeat": 2}]})";

// Phi-3: partial rotation with LongRoPE, short factors below position 64, long ones from there.
const char* kPhi3 = R"({"name": "phi3-tiny", "d_model": 48, "vocab_size": 300, "context_length": 512,
  "mixers": {"a": {"kind": "attention", "n_heads": 4, "n_kv_heads": 2, "head_dim": 12, "window": 40,
                   "rope": {"theta": 10000, "rotary_dim": 8, "longrope_short": [1.0, 1.3, 1.9, 2.4],
                            "longrope_long": [1.5, 6.0, 21.0, 48.0], "longrope_original_context": 64,
                            "longrope_attention": 1.19}}},
  "ffns": {"f": {"kind": "dense", "activation": "swiglu", "hidden": 96}},
  "layers": [{"mixer": "a", "ffn": "f", "repeat": 2}]})";

// OLMo 2's post norms (x + norm(f(x)), no pre-norm) and QK-norm over all heads; Granite's
// multipliers (embedding scale, softmax scale, residual scale, logit divisor) on an MoE whose
// router takes the softmax over its top-k logits.
const char* kOlmo2 = R"({"name": "olmo2-tiny", "d_model": 48, "vocab_size": 300, "context_length": 512,
  "norm": {"placement": "post"},
  "mixers": {"a": {"kind": "attention", "n_heads": 4, "n_kv_heads": 2, "head_dim": 12, "qk_norm": "full",
                   "rope": {"theta": 500000}}},
  "ffns": {"f": {"kind": "dense", "activation": "swiglu", "hidden": 96}},
  "layers": [{"mixer": "a", "ffn": "f", "repeat": 3}]})";
const char* kGranite = R"({"name": "granite-tiny", "d_model": 48, "vocab_size": 300, "context_length": 512,
  "tie_embeddings": true, "embedding_scale": 12, "residual_scale": 0.22, "logit_divisor": 8,
  "mixers": {"a": {"kind": "attention", "n_heads": 4, "n_kv_heads": 2, "head_dim": 12, "scale": 0.015625,
                   "rope": {"theta": 10000000}}},
  "ffns": {"moe": {"kind": "moe", "activation": "swiglu", "n_experts": 8, "top_k": 3, "expert_hidden": 24,
                   "score": "softmax", "gates": "softmax_topk"}},
  "layers": [{"mixer": "a", "ffn": "moe", "repeat": 2}]})";

// LFM2's short convolutions beside GQA attention with QK-norm per head.
const char* kLfm2 = R"({"name": "lfm2-tiny", "d_model": 48, "vocab_size": 300, "context_length": 512,
  "norm": {"eps": 1e-5}, "tie_embeddings": true,
  "mixers": {"conv": {"kind": "short_conv", "conv_kernel": 3},
             "a": {"kind": "attention", "n_heads": 4, "n_kv_heads": 2, "head_dim": 12, "qk_norm": "head",
                   "rope": {"theta": 1000000}}},
  "ffns": {"f": {"kind": "dense", "activation": "swiglu", "hidden": 64}},
  "layers": [{"mixer": "conv", "ffn": "f"}, {"mixer": "a", "ffn": "f"}, {"mixer": "conv", "ffn": "f"}]})";

// Granite 4.0-H: Mamba-2 (two groups of B and C, conv biases) beside attention without positions.
const char* kGranite4H = R"({"name": "granite4h-tiny", "d_model": 48, "vocab_size": 300, "context_length": 512,
  "tie_embeddings": true, "embedding_scale": 12, "residual_scale": 0.22, "logit_divisor": 8,
  "mixers": {"ssm": {"kind": "mamba2", "n_heads": 6, "n_kv_heads": 2, "head_dim": 16, "state_dim": 8,
                     "conv_kernel": 4, "conv_bias": true},
             "a": {"kind": "attention", "n_heads": 4, "n_kv_heads": 2, "head_dim": 12, "scale": 0.015625}},
  "ffns": {"f": {"kind": "dense", "activation": "swiglu", "hidden": 64}},
  "layers": [{"mixer": "ssm", "ffn": "f"}, {"mixer": "a", "ffn": "f"}, {"mixer": "ssm", "ffn": "f"}]})";

ModelConfig config_from(const char* json) { return parse_model_config(Json::parse(json), "test config"); }

TEST(TrainReference, EmblaMiniMatchesTheEngineAtEveryPosition) {
  train::Model model(load_preset("embla-mini"), 7);
  perturb_small_tensors(model, 1);
  // 140 tokens: past the window (8) and the sparse selection (16 + 8) many times over.
  expect_engine_agrees(model, random_tokens(140, 512, 3), "embla", kTolerance);
  EXPECT_EQ(model.routing().size(), 7u);  // layers 1-7 are MoE
}

TEST(TrainReference, OrdinaryModelsMatchTheEngine) {
  for (const char* json : {kLlama, kOlmoe, kGemma, kDeepseek, kPhi3, kOlmo2, kGranite, kLfm2, kGranite4H}) {
    const ModelConfig c = config_from(json);
    SCOPED_TRACE(c.name);
    train::Model model(c, 11);
    perturb_small_tensors(model, 2);
    expect_engine_agrees(model, random_tokens(110, c.vocab_size, 4), c.name, kTolerance);
  }
}

TEST(TrainReference, BatchRowsAreIndependent) {
  train::Model model(load_preset("embla-mini"), 5);
  perturb_small_tensors(model, 3);
  torch::NoGradGuard no_grad;
  const torch::Tensor a = as_tensor(random_tokens(50, 512, 8)), b = as_tensor(random_tokens(50, 512, 9));
  const torch::Tensor both = model.forward(torch::cat({a, b}, 0));
  EXPECT_LE((both[0] - model.forward(a)[0]).abs().max().item<float>(), kTolerance);
  EXPECT_LE((both[1] - model.forward(b)[0]).abs().max().item<float>(), kTolerance);
  EXPECT_GT((both[0] - both[1]).abs().max().item<float>(), 0.1f);
}

// "A EOT B": B's positions equal B run alone, A's (with its EOT) are untouched by B; without
// document masking B's positions would differ.
TEST(TrainReference, DocumentMaskingMakesEachDocumentIndependent) {
  const int32_t eot = 3;
  for (const ModelConfig& config : {load_preset("embla-mini"), config_from(kGemma), config_from(kLfm2),
                                     config_from(kGranite4H)}) {
    SCOPED_TRACE(config.name);
    MaskingCase m(config, eot);
    const int64_t na = m.na, nb = m.nb;
    torch::NoGradGuard no_grad;
    const torch::Tensor all = m.masked.forward(as_tensor(m.joined))[0];
    auto worst = [](const torch::Tensor& x, const torch::Tensor& y) {
      return (x - y).nan_to_num(0, 0, 0).abs().max().item<float>();  // padding rows are -inf in both
    };
    EXPECT_LE(worst(all.narrow(0, na, nb), m.masked.forward(as_tensor(m.b))[0]), kTolerance);
    EXPECT_LE(worst(all.narrow(0, 0, na), m.masked.forward(as_tensor(m.a))[0]), kTolerance);
    // The same weights without an end-of-text id read across the boundary.
    EXPECT_GT(worst(m.unmasked.forward(as_tensor(m.joined))[0].narrow(0, na, nb), all.narrow(0, na, nb)), 1e-2f);
    // A document after the end of text is routed as it is alone.
    m.masked.forward(as_tensor(m.joined));
    const std::vector<train::Routing> joined_routing = m.masked.routing();
    m.masked.forward(as_tensor(m.b));
    ASSERT_EQ(joined_routing.size(), m.masked.routing().size());
    for (size_t k = 0; k < joined_routing.size(); ++k)
      EXPECT_TRUE(torch::equal(joined_routing[k].chosen.narrow(0, na, nb), m.masked.routing()[k].chosen));
  }
}

TEST(TrainReference, ExportWritesExactlyTheWeightMap) {
  const ModelConfig c = load_preset("embla-mini");
  train::Model model(c, 7);
  perturb_small_tensors(model, 5);
  TempDir dir("export");
  train::export_model_dir(model, c, dir.str(), tokenizer_text(c.vocab_size), kernels::DType::f32);
  const ModelFiles files(dir.str());  // validates: every weight-map tensor once, nothing else
  ASSERT_EQ(files.weight_map().tensors.size(), model.params().size());
  for (const train::Param& p : model.params()) {
    const WeightView& w = files.weight(p.info.name);
    ASSERT_EQ(w.storage, kernels::DType::f32) << p.info.name;
    const torch::Tensor stored = torch::from_blob(const_cast<uint8_t*>(w.data), p.info.shape, torch::kFloat32);
    EXPECT_TRUE(torch::equal(stored, p.tensor.detach())) << p.info.name;
  }
  // named_parameters() and buffers carry the weight-map names.
  std::set<std::string> names;
  for (auto& item : model.named_parameters()) names.insert(item.key());
  for (auto& item : model.named_buffers()) names.insert(item.key());
  for (const TensorInfo& t : model.weight_map().tensors) EXPECT_TRUE(names.count(t.name)) << t.name;
  EXPECT_EQ(names.size(), model.weight_map().tensors.size());

  // 8-bit export: matrices and tables quantised (each value within half a step of its group's
  // scale max|x| / 127), routers / norms / vectors exact; loaded back, the reference computes
  // what the engine computes from the same 8-bit directory.
  TempDir q8("export_q8");
  train::export_model_dir(model, c, q8.str(), tokenizer_text(c.vocab_size), kernels::DType::q8);
  train::Model dequantised(c, 99);
  train::load_model_dir_into(dequantised, q8.str());
  int quantised = 0;
  for (const train::Param& p : model.params()) {
    const torch::Tensor error = (dequantised.tensor(p.info.name) - p.tensor).abs().max();
    if (storage_type(p.info, kernels::DType::q8) == kernels::DType::f32) {
      EXPECT_EQ(error.item<float>(), 0.0f) << p.info.name;
    } else {
      EXPECT_LE(error.item<float>(), p.tensor.abs().max().item<float>() / 254 * 1.01f) << p.info.name;
      EXPECT_GT(error.item<float>(), 0.0f) << p.info.name;
      ++quantised;
    }
  }
  EXPECT_GT(quantised, 30);
  // The reference multiplies f32 inputs by the dequantised weights; the engine's integer path
  // rounds each input to 8 bits first (and a rounded router input can flip an expert), so the
  // engine runs in its f32-activation parity mode here.
  kernels::set_f32_activations(true);
  const Comparison r = compare_with_engine(dequantised, random_tokens(40, c.vocab_size, 12), "export_q8_run",
                                           kernels::DType::q8);
  kernels::set_f32_activations(false);
  EXPECT_LE(r.worst, kTolerance);

  // And back: a model of another seed loaded from the directory holds the same values.
  train::Model other(c, 99);
  train::load_model_dir_into(other, dir.str());
  for (const train::Param& p : other.params())
    EXPECT_TRUE(torch::equal(p.tensor, model.tensor(p.info.name))) << p.info.name;
  train::Model olmoe(config_from(kOlmoe), 1);
  EXPECT_THROW(train::load_model_dir_into(olmoe, dir.str()), std::runtime_error);
}

TEST(TrainReference, InitialValuesAreWrenInits) {
  const ModelConfig c = load_preset("embla-mini");
  const uint64_t seed = 42;
  TempDir dir("init");
  write_random_model(dir.str(), c, seed, kernels::DType::f32, kernels::kDefaultGroup, tokenizer_text(c.vocab_size),
                     false, 1);  // what `wren init --seed 42 --dtype f32` writes
  const ModelFiles files(dir.str());
  train::Model model(c, seed), other(c, seed + 1);
  int compared = 0;
  for (const char* name : {"embed", "lm_head", "engram.tables", "final_res.query", "layers.0.ffn.w_down",
                           "layers.1.attn.wq", "layers.1.attn.k_norm", "layers.3.ffn.experts.w_up",
                           "layers.6.kv_bridge.norm", "layers.7.ffn.balance_bias"}) {
    const TensorInfo* t = model.weight_map().find(name);
    ASSERT_NE(t, nullptr) << name;
    const torch::Tensor stored =
        torch::from_blob(const_cast<uint8_t*>(files.weight(name).data), t->shape, torch::kFloat32);
    EXPECT_TRUE(torch::equal(stored, model.tensor(name).detach())) << name;
    if (t->role == TensorRole::matrix) {
      EXPECT_FALSE(torch::equal(stored, other.tensor(name).detach())) << name;  // the seed matters
    }
    ++compared;
  }
  EXPECT_EQ(compared, 10);
  EXPECT_TRUE(model.tensor("embed").requires_grad());
  EXPECT_FALSE(model.tensor("layers.7.ffn.balance_bias").requires_grad());
}

TEST(TrainReference, GradientsReachEveryTrainedTensor) {
  train::Model model(load_preset("embla-mini"), 3);
  perturb_small_tensors(model, 6);
  EXPECT_TRUE(std::isfinite(backward_next_token_loss(model, random_tokens(65, 512, 13))));
  // Layer 0's attention reads one source (e): a softmax over one score has no gradient.
  expect_gradients_reach_trained_tensors(model, "layers.0.attn_res.");
  // The routing record: one per MoE layer, its chosen experts ranked best first by score + bias.
  ASSERT_EQ(model.routing().size(), 7u);
  const train::Routing& r = model.routing()[0];
  EXPECT_EQ(r.layer, 1);
  EXPECT_EQ(r.scores.sizes(), (std::vector<int64_t>{65, 8}));
  EXPECT_EQ(r.chosen.sizes(), (std::vector<int64_t>{65, 2}));
  const torch::Tensor biased = r.scores + model.tensor("layers.1.ffn.balance_bias");
  EXPECT_TRUE(torch::equal(std::get<1>(biased.topk(2, -1)), r.chosen));
}

TEST(TrainReference, RefusesWhatItCannotRun) {
  std::string oai = kLlama;  // gpt-oss's clamped SwiGLU: the engine refuses it too
  oai.replace(oai.find("\"swiglu\""), 8, "\"swiglu_oai\"");
  EXPECT_THROW(train::Model(config_from(oai.c_str()), 1), std::runtime_error);
  const ModelConfig c = load_preset("embla-mini");
  EXPECT_THROW(train::Model(c, 1, c.rows()), std::invalid_argument);
  train::Model model(c, 1);
  EXPECT_THROW(model.forward(torch::full({1, 4}, 512, torch::kInt64)), std::out_of_range);
  EXPECT_THROW(model.forward(torch::zeros({4}, torch::kInt64)), std::invalid_argument);
  TempDir dir("refuse");
  EXPECT_THROW(train::export_model_dir(model, config_from(kLlama), dir.str(), tokenizer_text(300), kernels::DType::f32),
               std::runtime_error);
}

}  // namespace
}  // namespace wren
