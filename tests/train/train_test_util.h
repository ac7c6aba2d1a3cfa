// What the training tests share, so each test file states only its cases: temporary
// directories, random token rows, a stand-in tokenizer, the engine-against-torch logit
// comparison (export a train::Model, run the engine token by token, compare each step with the
// reference forward's row), the document-masking case, the gradient-reach check, and the tiny
// training workspace (four "The cat sat on the mat" documents, a 300-token BPE, TrainOptions
// for a few-step run).
#pragma once

#include <gtest/gtest.h>
#include <torch/torch.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "runtime/model_files.h"
#include "runtime/session.h"
#include "text/bpe_train.h"
#include "train/export.h"
#include "train/model.h"
#include "train/trainer.h"

namespace wren::train_test {

// A tokenizer.json naming `tokens` ids "tok<i>": enough for the engine to open an exported
// model directory whose tests feed token ids directly.
inline std::string tokenizer_text(int tokens) {
  Json vocab = Json::object();
  for (int i = 0; i < tokens; ++i) vocab["tok" + std::to_string(i)] = i;
  return Json{{"model", {{"type", "BPE"}, {"vocab", vocab}}}}.dump();
}

// A fresh directory path under the temporary directory, removed with the object.
struct TempDir {
  std::filesystem::path path;
  explicit TempDir(const std::string& name)
      : path(std::filesystem::temp_directory_path() / ("wren_train_" + std::to_string(::getpid()) + "_" + name)) {
    std::filesystem::remove_all(path);
  }
  ~TempDir() { std::filesystem::remove_all(path); }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  std::string str() const { return path.string(); }
};

// `n` ids uniform in [0, vocab) from mt19937(seed), skipping `avoid` (an end-of-text id that
// must not split the row).
inline std::vector<int32_t> random_tokens(int n, int vocab, uint32_t seed, int32_t avoid = -1) {
  std::mt19937 rng(seed);
  std::vector<int32_t> t;
  while (int(t.size()) < n) {
    const int32_t x = int32_t(rng() % uint32_t(vocab));
    if (x != avoid) t.push_back(x);
  }
  return t;
}

// One row [1, T] of int64 ids, the shape train::Model::forward takes.
inline torch::Tensor as_tensor(const std::vector<int32_t>& tokens) {
  return torch::tensor(std::vector<int64_t>(tokens.begin(), tokens.end()), torch::kInt64).unsqueeze(0);
}

// Moves the 1-D tensors (norm gains, biases, pseudo-queries, sinks, mHC alphas, GDN and
// balancing biases) off their initial constants, so gates, mixes and norms see non-trivial
// values.
inline void perturb_small_tensors(train::Model& m, uint64_t seed) {
  torch::NoGradGuard no_grad;
  torch::manual_seed(seed);
  for (const train::Param& p : m.params())
    if (p.info.shape.size() == 1) p.tensor.add_(0.3 * torch::randn_like(p.tensor));
}

// The largest |a - b| over entries finite in either; -inf must match -inf.
inline float max_diff(const float* a, const float* b, int64_t n) {
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

// The torch forward's logits for one row, [T, rows].
inline torch::Tensor reference_logits(train::Model& model, const std::vector<int32_t>& tokens) {
  torch::NoGradGuard no_grad;
  return model.forward(as_tensor(tokens))[0].contiguous();
}

struct Comparison {
  float worst = 0;  // largest logit difference over the compared positions
  float scale = 0;  // largest |logit|, to show the logits are not trivially small
  int expert_mismatches = 0;
  int steps = 0;
};

// Exports `model` (matrices stored as `matrices`), runs `tokens` through the engine and
// compares its logits (and chosen experts) with the reference's rows: every token decoded one
// at a time (prompt = 0), or the first `prompt` tokens prefilled (with early exit) and the
// rest decoded.
inline Comparison compare_with_engine(train::Model& model, const std::vector<int32_t>& tokens, const std::string& name,
                                      kernels::DType matrices = kernels::DType::f32, size_t prompt = 0) {
  const ModelConfig& c = model.config();
  TempDir dir(name);
  train::export_model_dir(model, c, dir.str(), tokenizer_text(c.vocab_size), matrices);
  const torch::Tensor logits = reference_logits(model, tokens);
  const int64_t rows = c.rows();
  EXPECT_EQ(logits.sizes(), (std::vector<int64_t>{int64_t(tokens.size()), rows}));
  const float* expected = logits.data_ptr<float>();
  Session session(open_model(dir.str()), {.kv = KvType::f32});  // the reference's f32, not the default f16 cache
  std::vector<float> step(static_cast<size_t>(rows));
  Comparison out;
  auto check = [&](size_t t) {
    out.worst = std::max(out.worst, max_diff(step.data(), expected + t * rows, rows));
    for (int64_t v = 0; v < c.vocab_size; ++v) out.scale = std::max(out.scale, std::fabs(step[size_t(v)]));
    ++out.steps;
    for (const train::Routing& r : model.routing()) {
      std::vector<int32_t> engine = session.last_experts()[size_t(r.layer)];
      std::vector<int64_t> ref(size_t(r.chosen.size(1)));
      for (size_t k = 0; k < ref.size(); ++k) ref[k] = r.chosen[int64_t(t)][int64_t(k)].item<int64_t>();
      std::sort(engine.begin(), engine.end());
      std::sort(ref.begin(), ref.end());
      out.expert_mismatches += !std::equal(engine.begin(), engine.end(), ref.begin(), ref.end());
    }
  };
  size_t t = 0;
  if (prompt > 0) {
    session.prefill(std::span<const int32_t>(tokens.data(), prompt), step.data(), true);
    t = prompt - 1;
    check(t++);
  }
  for (; t < tokens.size(); ++t) {
    session.decode(tokens[t], step.data());
    check(t);
  }
  std::printf("  %s: max |engine - torch| = %.2e over %d positions, max |logit| = %.2f\n", name.c_str(), out.worst,
              out.steps, out.scale);
  return out;
}

// compare_with_engine, expecting agreement: every compared logit within `tolerance`, logits not
// trivially small (max |logit| > 0.5), and the engine choosing the reference's experts.
inline Comparison expect_engine_agrees(train::Model& model, const std::vector<int32_t>& tokens, const std::string& name,
                                       float tolerance, size_t prompt = 0) {
  const Comparison r = compare_with_engine(model, tokens, name, kernels::DType::f32, prompt);
  EXPECT_LE(r.worst, tolerance) << name;
  EXPECT_GT(r.scale, 0.5f) << name;
  EXPECT_EQ(r.expert_mismatches, 0) << name;
  return r;
}

// The document-masking case: "A EOT B", where A is 37 random ids (seed 10) then the
// end-of-text id and B 70 random ids (seed 11), neither holding `eot` elsewhere; and two
// models of the same weights (seed 5, small tensors perturbed with seed 4), only `masked`
// told the end-of-text id.
struct MaskingCase {
  train::Model masked, unmasked;
  std::vector<int32_t> a, b, joined;
  int64_t na = 0, nb = 0;

  MaskingCase(const ModelConfig& c, int32_t eot) : masked(c, 5, eot), unmasked(c, 5) {
    perturb_small_tensors(masked, 4);
    perturb_small_tensors(unmasked, 4);
    a = random_tokens(37, c.vocab_size, 10, eot);
    b = random_tokens(70, c.vocab_size, 11, eot);
    a.push_back(eot);
    joined = a;
    joined.insert(joined.end(), b.begin(), b.end());
    na = int64_t(a.size());
    nb = int64_t(b.size());
  }
};

// The next-token cross entropy of one row (positions 0..T-2 predicting 1..T-1), back-propagated
// into the model's gradients; returns the loss.
inline float backward_next_token_loss(train::Model& model, const std::vector<int32_t>& ids) {
  const torch::Tensor tokens = as_tensor(ids);
  const int64_t n = tokens.size(1) - 1;
  const torch::Tensor logits = model.forward(tokens);
  const torch::Tensor loss = torch::nn::functional::cross_entropy(
      logits.narrow(1, 0, n).reshape({-1, logits.size(-1)}), tokens.narrow(1, 1, n).reshape({-1}));
  loss.backward();
  return loss.item<float>();
}

// After a backward pass: buffers got no gradient, every other tensor (but those whose name
// starts with `skip_prefix`, when given) a finite, non-zero one. Returns how many were checked.
inline int expect_gradients_reach_trained_tensors(const train::Model& model, const std::string& skip_prefix = "") {
  int trained = 0;
  for (const train::Param& p : model.params()) {
    if (!skip_prefix.empty() && p.info.name.rfind(skip_prefix, 0) == 0) continue;
    if (p.info.role == TensorRole::buffer) {
      EXPECT_FALSE(p.tensor.grad().defined()) << p.info.name;
      continue;
    }
    EXPECT_TRUE(p.tensor.grad().defined()) << p.info.name;
    if (!p.tensor.grad().defined()) continue;
    EXPECT_TRUE(torch::isfinite(p.tensor.grad()).all().item<bool>()) << p.info.name;
    EXPECT_GT(p.tensor.grad().abs().sum().item<float>(), 0.0f) << p.info.name;
    ++trained;
  }
  return trained;
}

// Writes the tiny training corpus into `dir`: data/doc0..doc3.txt (60 repetitions of "The cat
// sat on the mat number k." then the document's digit) and a 300-token BPE trained on it as
// tokenizer.json. Returns options for a six-step, single-thread, seed-3 run of `config` on it,
// doc3.txt held out; the output (and checkpoint) are left for the test to set.
inline train::TrainOptions tiny_training_workspace(const std::filesystem::path& dir, const std::string& config) {
  std::filesystem::create_directories(dir / "data");
  std::string text;
  for (int i = 0; i < 60; ++i) text += "The cat sat on the mat number " + std::to_string(i % 7) + ". ";
  for (int d = 0; d < 4; ++d) std::ofstream(dir / "data" / ("doc" + std::to_string(d) + ".txt")) << text << d;
  text::BpeTrainOptions bpe;
  bpe.vocab_size = 300;
  text::save_tokenizer_json(text::train_bpe({text}, bpe), (dir / "tokenizer.json").string());
  train::TrainOptions o;
  o.config = config;
  o.data = {(dir / "data").string()};
  o.heldout_files = {"doc3.txt"};
  o.tokenizer = (dir / "tokenizer.json").string();
  o.seq_len = 16;
  o.batch = 2;
  o.steps = 6;
  o.warmup = 1;
  o.threads = 1;
  o.seed = 3;
  o.eval_every = 3;
  o.eval_rows = 4;
  o.quiet = true;
  return o;
}

}  // namespace wren::train_test
