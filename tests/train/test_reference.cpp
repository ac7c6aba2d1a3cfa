// The libtorch reference against the engine: a train::Model exported to a model directory
// and run by the engine token by token gives the torch forward's logits at every position
// (embla-mini and small Llama / OLMoE / Gemma / DeepSeek-style configs); document masking
// makes each document of a packed row what it is alone; export writes exactly the weight map
// and the reference starts from `wren init`'s values.
#include <gtest/gtest.h>
#include <torch/torch.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <random>
#include <set>

#include "config/parse.h"
#include "io/model_dir.h"
#include "model/weights.h"
#include "runtime/model_files.h"
#include "runtime/session.h"
#include "train/export.h"
#include "train/model.h"

namespace wren {
namespace {

namespace fs = std::filesystem;

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

ModelConfig config_from(const char* json) { return parse_model_config(Json::parse(json), "test config"); }

std::string tokenizer_text(int tokens) {
  Json vocab = Json::object();
  for (int i = 0; i < tokens; ++i) vocab["tok" + std::to_string(i)] = i;
  return Json{{"model", {{"type", "BPE"}, {"vocab", vocab}}}}.dump();
}

// A fresh directory path under the temporary directory, removed with the object.
struct TempDir {
  fs::path path;
  explicit TempDir(const std::string& name)
      : path(fs::temp_directory_path() / ("wren_train_" + std::to_string(::getpid()) + "_" + name)) {
    fs::remove_all(path);
  }
  ~TempDir() { fs::remove_all(path); }
  std::string str() const { return path.string(); }
};

std::vector<int32_t> random_tokens(int n, int vocab, uint32_t seed, int32_t avoid = -1) {
  std::mt19937 rng(seed);
  std::vector<int32_t> t;
  while (int(t.size()) < n) {
    const int32_t x = int32_t(rng() % uint32_t(vocab));
    if (x != avoid) t.push_back(x);
  }
  return t;
}

torch::Tensor as_tensor(const std::vector<int32_t>& tokens) {
  return torch::tensor(std::vector<int64_t>(tokens.begin(), tokens.end()), torch::kInt64).unsqueeze(0);
}

// Moves the small tensors (norm gains, biases, pseudo-queries, sinks, balancing biases) off
// their initial constants, so the mixes, gains and biases are exercised with non-trivial values.
void perturb_small_tensors(train::Model& m, uint64_t seed) {
  torch::NoGradGuard no_grad;
  torch::manual_seed(seed);
  for (const train::Param& p : m.params())
    if (p.info.shape.size() == 1) p.tensor.add_(0.3 * torch::randn_like(p.tensor));
}

// The largest |a - b| over entries finite in either; -inf must match -inf.
float max_diff(const float* a, const float* b, int64_t n) {
  float worst = 0;
  for (int64_t i = 0; i < n; ++i) {
    if (std::isinf(a[i]) || std::isinf(b[i])) {
      if (a[i] != b[i]) return INFINITY;
      continue;
    }
    worst = std::max(worst, std::fabs(a[i] - b[i]));
  }
  return worst;
}

struct Comparison {
  float worst = 0;     // largest logit difference over all positions
  float scale = 0;     // largest |logit|, to show the logits are not trivially small
  int expert_mismatches = 0;
};

// Exports `model`, runs the engine token by token over `tokens`, and compares every step's
// logits (and chosen experts) with the torch forward's row.
Comparison compare_with_engine(train::Model& model, const std::vector<int32_t>& tokens, const std::string& name,
                               kernels::DType matrices = kernels::DType::f32) {
  const ModelConfig& c = model.config();
  TempDir dir(name);
  train::export_model_dir(model, c, dir.str(), tokenizer_text(c.vocab_size), matrices);
  torch::Tensor logits;
  {
    torch::NoGradGuard no_grad;
    logits = model.forward(as_tensor(tokens)).contiguous();
  }
  const int64_t rows = c.rows();
  EXPECT_EQ(logits.sizes(), (std::vector<int64_t>{1, int64_t(tokens.size()), rows}));
  const float* expected = logits.data_ptr<float>();
  Session session(open_model(dir.str()));
  std::vector<float> step(static_cast<size_t>(rows));
  Comparison out;
  for (size_t t = 0; t < tokens.size(); ++t) {
    session.decode(tokens[t], step.data());
    out.worst = std::max(out.worst, max_diff(step.data(), expected + t * rows, rows));
    for (int64_t v = 0; v < c.vocab_size; ++v) out.scale = std::max(out.scale, std::fabs(step[size_t(v)]));
    for (const train::Routing& r : model.routing()) {
      const std::vector<int32_t>& engine = session.last_experts()[size_t(r.layer)];
      std::set<int64_t> a(engine.begin(), engine.end()), b;
      for (int64_t k = 0; k < r.chosen.size(1); ++k) b.insert(r.chosen[int64_t(t)][k].item<int64_t>());
      out.expert_mismatches += a != b;
    }
  }
  std::printf("  %s: max |engine - torch| = %.2e over %zu positions, max |logit| = %.2f\n", name.c_str(), out.worst,
              tokens.size(), out.scale);
  return out;
}

TEST(TrainReference, EmblaMiniMatchesTheEngineAtEveryPosition) {
  train::Model model(load_preset("embla-mini"), 7);
  perturb_small_tensors(model, 1);
  // 140 tokens: past the window (8) and the sparse selection (16 + 8) many times over.
  const Comparison r = compare_with_engine(model, random_tokens(140, 512, 3), "embla");
  EXPECT_LE(r.worst, kTolerance);
  EXPECT_GT(r.scale, 0.5f);
  EXPECT_EQ(r.expert_mismatches, 0);
  EXPECT_EQ(model.routing().size(), 7u);  // layers 1-7 are MoE
}

TEST(TrainReference, OrdinaryModelsMatchTheEngine) {
  for (const char* json : {kLlama, kOlmoe, kGemma, kDeepseek}) {
    const ModelConfig c = config_from(json);
    SCOPED_TRACE(c.name);
    train::Model model(c, 11);
    perturb_small_tensors(model, 2);
    const Comparison r = compare_with_engine(model, random_tokens(110, c.vocab_size, 4), c.name);
    EXPECT_LE(r.worst, kTolerance);
    EXPECT_GT(r.scale, 0.5f);
    EXPECT_EQ(r.expert_mismatches, 0);
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
  const ModelConfig c = load_preset("embla-mini");
  for (const ModelConfig& config : {c, config_from(kGemma)}) {
    SCOPED_TRACE(config.name);
    train::Model masked(config, 5, eot), unmasked(config, 5);
    perturb_small_tensors(masked, 4);
    perturb_small_tensors(unmasked, 4);
    std::vector<int32_t> a = random_tokens(37, config.vocab_size, 10, eot), b = random_tokens(70, config.vocab_size, 11, eot);
    a.push_back(eot);
    std::vector<int32_t> joined = a;
    joined.insert(joined.end(), b.begin(), b.end());
    torch::NoGradGuard no_grad;
    const torch::Tensor all = masked.forward(as_tensor(joined))[0];
    const int64_t na = int64_t(a.size()), nb = int64_t(b.size());
    auto worst = [](const torch::Tensor& x, const torch::Tensor& y) {
      return (x - y).nan_to_num(0, 0, 0).abs().max().item<float>();  // padding rows are -inf in both
    };
    EXPECT_LE(worst(all.narrow(0, na, nb), masked.forward(as_tensor(b))[0]), kTolerance);
    EXPECT_LE(worst(all.narrow(0, 0, na), masked.forward(as_tensor(a))[0]), kTolerance);
    // The same weights without an end-of-text id read across the boundary.
    EXPECT_GT(worst(unmasked.forward(as_tensor(joined))[0].narrow(0, na, nb), all.narrow(0, na, nb)), 1e-2f);
    // A document after the end of text is routed as it is alone.
    masked.forward(as_tensor(joined));
    const std::vector<train::Routing> joined_routing = masked.routing();
    masked.forward(as_tensor(b));
    ASSERT_EQ(joined_routing.size(), masked.routing().size());
    for (size_t k = 0; k < joined_routing.size(); ++k)
      EXPECT_TRUE(torch::equal(joined_routing[k].chosen.narrow(0, na, nb), masked.routing()[k].chosen));
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
    ASSERT_EQ(w.storage, StorageType::f32) << p.info.name;
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
  const Comparison r = compare_with_engine(dequantised, random_tokens(40, c.vocab_size, 12), "export_q8_run",
                                           kernels::DType::q8);
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
  const torch::Tensor tokens = as_tensor(random_tokens(65, 512, 13));
  const torch::Tensor logits = model.forward(tokens);
  const torch::Tensor loss = torch::nn::functional::cross_entropy(
      logits.narrow(1, 0, 64).reshape({-1, logits.size(-1)}), tokens.narrow(1, 1, 64).reshape({-1}));
  loss.backward();
  EXPECT_TRUE(std::isfinite(loss.item<float>()));
  for (const train::Param& p : model.params()) {
    // Layer 0's attention reads one source (e): a softmax over one score has no gradient.
    if (p.info.name.rfind("layers.0.attn_res.", 0) == 0) continue;
    if (p.info.role == TensorRole::buffer) {
      EXPECT_FALSE(p.tensor.grad().defined()) << p.info.name;
      continue;
    }
    ASSERT_TRUE(p.tensor.grad().defined()) << p.info.name;
    EXPECT_TRUE(torch::isfinite(p.tensor.grad()).all().item<bool>()) << p.info.name;
    EXPECT_GT(p.tensor.grad().abs().sum().item<float>(), 0.0f) << p.info.name;
  }
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
  EXPECT_THROW(train::Model(load_preset("nenya-mini"), 1), std::runtime_error);
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
