// The libtorch reference of the Nenya family against the engine: mHC residual streams, MLA,
// the gated engram and Gated DeltaNet. A train::Model exported to a model directory and run
// by the engine token by token (and prefill then decode) gives the torch forward's logits at
// every position; each document of a packed row is what it is alone; gradients reach every
// trained tensor; the Sinkhorn projection agrees with the engine's; `wren train nenya-mini`
// trains and exports a model the engine runs.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <functional>

#include "config/parse.h"
#include "model/mhc.h"
#include "runtime/model_files.h"
#include "runtime/session.h"
#include "train/mhc.h"
#include "train/model.h"
#include "train/trainer.h"
#include "train_test_util.h"

namespace wren {
namespace {

using namespace train_test;

// Torch's batched f32 forward against the engine's per-token one, logits of O(1) through 8
// layers of 4 streams; the two differ only in f32 summation order (and the engine's absorbed
// MLA form and double-precision Sinkhorn sums).
constexpr float kTolerance = 1e-4f;

// nenya-mini with its mixers renamed: "gdn2" layers made "mla" (to test without GDN), etc.
ModelConfig variant(const std::string& name, const std::function<void(Json&)>& edit) {
  Json j = to_json(load_preset("nenya-mini"));
  j["name"] = name;
  edit(j);
  return parse_model_config(j, name);
}

void gdn_to_mla(Json& j) {
  for (Json& layer : j["layers"])
    if (layer["mixer"] == "gdn2") layer["mixer"] = "mla";
}

TEST(TrainReferenceNenya, SinkhornAndBoundaryMatchTheEngine) {
  // Logits of spread ~2, where 20 rounds leave the rows visibly off 1: both must stop at the
  // same approximately doubly stochastic matrix.
  torch::manual_seed(1);
  const int n = 4, d = 16, iters = 20;
  const torch::Tensor logits = 2.0 * torch::randn({n, n});
  std::vector<float> M(logits.data_ptr<float>(), logits.data_ptr<float>() + n * n);
  sinkhorn(M.data(), n, iters);
  const torch::Tensor C = train::sinkhorn(logits, iters);
  EXPECT_LE((C - torch::from_blob(M.data(), {n, n})).abs().max().item<float>(), 1e-6f);
  EXPECT_LE((C.sum(0) - 1).abs().max().item<float>(), 1e-5f);  // columns exact after the last step

  // One boundary's pre / post / C from streams, against mhc_coefficients.
  ModelConfig c = load_preset("nenya-mini");
  train::MhcParams w{0.1 * torch::randn({n * d, n * n + 2 * n}), torch::randn({3}), torch::randn({n * n + 2 * n})};
  const torch::Tensor x = torch::randn({1, 1, n, d});
  const train::MhcBoundary b = train::mhc_coefficients(w, x, c);
  MhcWeights ew{MatrixView::f32(w.phi.data_ptr<float>(), n * d, n * n + 2 * n),
                Vec(w.alpha.data_ptr<float>(), w.alpha.data_ptr<float>() + 3),
                Vec(w.bias.data_ptr<float>(), w.bias.data_ptr<float>() + n * n + 2 * n)};
  MhcBoundary eb;
  MhcScratch s;
  mhc_coefficients(ew, n, d, float(c.norm.eps), c.residual.sinkhorn_iters, x.data_ptr<float>(), eb, s);
  EXPECT_LE((b.pre.flatten() - torch::from_blob(eb.pre.data(), {n})).abs().max().item<float>(), 1e-6f);
  EXPECT_LE((b.post.flatten() - torch::from_blob(eb.post.data(), {n})).abs().max().item<float>(), 1e-6f);
  EXPECT_LE((b.C.flatten() - torch::from_blob(eb.C.data(), {n * n})).abs().max().item<float>(), 1e-6f);
}

TEST(TrainReferenceNenya, NenyaMiniMatchesTheEngineAtEveryPosition) {
  const ModelConfig c = load_preset("nenya-mini");
  train::Model model(c, 7);
  perturb_small_tensors(model, 1);
  const Comparison r = expect_engine_agrees(model, random_tokens(100, c.vocab_size, 3), "nenya", kTolerance);
  EXPECT_EQ(r.steps, 100);
  EXPECT_EQ(model.routing().size(), 6u);  // layers 2-7 are MoE
}

// The MLA and mHC options nenya-mini does not use, and MLA under the other residual kinds:
// a low-rank query, RoPE on part of the shared key (YaRN), no output gate and a summed
// read-out; the gated engram on a plain residual (one stream); MLA taking bridged K/V.
TEST(TrainReferenceNenya, MlaAndResidualVariantsMatchTheEngine) {
  std::vector<ModelConfig> configs;
  configs.push_back(variant("nenya-rope", [](Json& j) {
    gdn_to_mla(j);
    Json& m = j["mixers"]["mla"];
    m["q_lora_rank"] = 24;
    m["output_gate"] = false;
    m["rope"] = Json{{"theta", 10000}, {"rotary_dim", 6}, {"yarn_factor", 8}, {"yarn_mscale", 0.707},
                     {"yarn_mscale_all_dim", 0.707}, {"yarn_original_context", 32}};
    j["residual"]["readout"] = "sum";
  }));
  configs.push_back(variant("nenya-plain", [](Json& j) {
    gdn_to_mla(j);
    j["residual"] = Json{{"kind", "plain"}};
    j["mixers"]["mla"]["qk_nope_dim"] = 0;
    j["mixers"]["mla"]["qk_rope_dim"] = 12;
    j["mixers"]["mla"]["rope"] = Json{{"theta", 500}};
  }));
  configs.push_back(variant("nenya-bridge", [](Json& j) {
    gdn_to_mla(j);
    j.erase("engram");  // the gated engram needs mHC or a plain residual
    j["residual"] = Json{{"kind", "attn_residuals"}, {"block_size", 4}};
    j["layers"][5]["kv"] = Json{{"bridge", 2}};
  }));
  for (const ModelConfig& c : configs) {
    SCOPED_TRACE(c.name);
    train::Model model(c, 11);
    perturb_small_tensors(model, 2);
    expect_engine_agrees(model, random_tokens(90, c.vocab_size, 4), c.name, kTolerance);
  }
}

TEST(TrainReferenceNenya, NenyaMiniMatchesTheEngineAfterDecodeSteps) {
  const ModelConfig c = load_preset("nenya-mini");
  train::Model model(c, 9);
  perturb_small_tensors(model, 3);
  // 60 prompt tokens prefilled (early exit where the model allows it), then 12 decode steps.
  const Comparison r = expect_engine_agrees(model, random_tokens(72, c.vocab_size, 5), "nenya_decode", kTolerance, 60);
  EXPECT_EQ(r.steps, 13);
}

// Row 0 is "A EOT B", row 1 another sequence: B's positions equal B run alone and A's equal A
// alone (MLA attends within the document, mHC and the MoE work per token, the engram's
// n-grams and short conv and the GDN state restart at B's first token). Without an
// end-of-text id the same weights read across the boundary.
TEST(TrainReferenceNenya, DocumentMaskingMakesEachDocumentIndependent) {
  const int32_t eot = 3;
  const ModelConfig c = load_preset("nenya-mini");
  MaskingCase m(c, eot);
  const int64_t na = m.na, nb = m.nb;
  const std::vector<int32_t> other = random_tokens(int(m.joined.size()), c.vocab_size, 12, eot);
  torch::NoGradGuard no_grad;
  const torch::Tensor both = m.masked.forward(torch::cat({as_tensor(m.joined), as_tensor(other)}, 0));
  auto worst = [](const torch::Tensor& x, const torch::Tensor& y) { return (x - y).abs().max().item<float>(); };
  EXPECT_LE(worst(both[0].narrow(0, na, nb), m.masked.forward(as_tensor(m.b))[0]), kTolerance);
  EXPECT_LE(worst(both[0].narrow(0, 0, na), m.masked.forward(as_tensor(m.a))[0]), kTolerance);
  EXPECT_LE(worst(both[1], m.masked.forward(as_tensor(other))[0]), kTolerance);
  const torch::Tensor leaked = m.unmasked.forward(as_tensor(m.joined))[0];
  EXPECT_GT(worst(leaked.narrow(0, na, nb), both[0].narrow(0, na, nb)), 1e-2f);
  // The first tokens of B are where the engram's n-grams, its conv and a recurrent state would
  // reach back into A; they too differ without masking.
  EXPECT_GT(worst(leaked.narrow(0, na, 3), both[0].narrow(0, na, 3)), 1e-3f);
}

TEST(TrainReferenceNenya, GradientsReachEveryTrainedTensor) {
  train::Model model(load_preset("nenya-mini"), 3, 3);
  perturb_small_tensors(model, 6);
  std::vector<int32_t> ids = random_tokens(65, 512, 13, 3);
  ids[30] = 3;  // two documents
  EXPECT_TRUE(std::isfinite(backward_next_token_loss(model, ids)));
  const int trained = expect_gradients_reach_trained_tensors(model);
  EXPECT_EQ(trained + 6, int(model.params().size()));  // all but the 6 balancing biases
}

// What `wren train nenya-mini` runs: a few steps on a small corpus (documents joined by the
// end-of-text token), balancing the MoE biases after each step, then an 8-bit export the
// engine loads and runs.
TEST(TrainReferenceNenya, TrainerRunsNenyaMiniAndExportsIt) {
  TempDir dir("trainer");
  train::TrainOptions o = tiny_training_workspace(dir.path, "nenya-mini");
  o.output = (dir.path / "model").string();
  o.seq_len = 32;
  o.eval_every = 6;
  o.eval_rows = 2;
  const train::TrainResult r = train::run_training(o);
  ASSERT_EQ(r.steps.size(), 6u);
  for (const train::StepRecord& s : r.steps) EXPECT_TRUE(std::isfinite(s.loss) && std::isfinite(s.grad_norm));
  EXPECT_LT(r.steps.back().loss, r.steps.front().loss);
  ASSERT_FALSE(r.evals.empty());
  EXPECT_TRUE(std::isfinite(r.evals.back().bits_per_byte));
  Session session(open_model(o.output));
  std::vector<float> logits(size_t(session.vocab_rows()));
  session.decode(5, logits.data());
  EXPECT_TRUE(std::all_of(logits.begin(), logits.begin() + 512, [](float v) { return std::isfinite(v); }));
}

}  // namespace
}  // namespace wren
