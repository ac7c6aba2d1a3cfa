// Every architecture the engine runs, small and randomly initialised: prefill with early
// exit equals a full run, and cached decode equals a cache-free forward (plain_forward.h). The
// ordinary models are shrunk copies of the shapes of Llama-3.1, OLMoE, DeepSeek-V2-Lite,
// Gemma 2 and Qwen3-Next, built from the same parts as Embla and Nenya.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <memory>

#include "config/parse.h"
#include "model/model.h"
#include "model/sparsity_probe.h"
#include "runtime/decode_batch.h"
#include "plain_forward.h"
#include "runtime/session.h"
#include "runtime/session_state.h"
#include "test_util.h"

namespace wren {
namespace {

const char* kTinyConfigs[][2] = {
    {"llama-tiny", R"({"name": "llama-tiny", "d_model": 48, "vocab_size": 300, "context_length": 512,
      "norm": {"eps": 1e-5},
      "mixers": {"a": {"kind": "attention", "n_heads": 4, "n_kv_heads": 2, "head_dim": 12,
                       "rope": {"theta": 500000, "llama3_factor": 8, "llama3_original_context": 64}}},
      "ffns": {"f": {"kind": "dense", "activation": "swiglu", "hidden": 96}},
      "layers": [{"mixer": "a", "ffn": "f", "repeat": 3}]})"},
    {"olmoe-tiny", R"({"name": "olmoe-tiny", "d_model": 48, "vocab_size": 300, "context_length": 512,
      "mixers": {"a": {"kind": "attention", "n_heads": 4, "n_kv_heads": 4, "head_dim": 12, "qk_norm": "full",
                       "rope": {"theta": 10000}}},
      "ffns": {"moe": {"kind": "moe", "activation": "swiglu", "n_experts": 8, "top_k": 3, "expert_hidden": 24,
                       "score": "softmax", "gates": "none"}},
      "layers": [{"mixer": "a", "ffn": "moe", "repeat": 3}]})"},
    {"deepseek-tiny", R"({"name": "deepseek-tiny", "d_model": 48, "vocab_size": 300, "context_length": 512,
      "mixers": {"mla": {"kind": "mla", "n_heads": 4, "kv_lora_rank": 16, "qk_nope_dim": 8, "qk_rope_dim": 8,
                         "v_head_dim": 8, "rope": {"theta": 10000, "yarn_factor": 40, "yarn_mscale": 0.707,
                         "yarn_mscale_all_dim": 0.707, "yarn_original_context": 64}}},
      "ffns": {"dense": {"kind": "dense", "activation": "swiglu", "hidden": 96},
               "moe": {"kind": "moe", "activation": "swiglu", "n_experts": 8, "top_k": 2, "expert_hidden": 16,
                       "n_shared": 2, "shared_hidden": 16, "score": "softmax", "gates": "none",
                       "n_groups": 2, "topk_groups": 1}},
      "layers": [{"mixer": "mla", "ffn": "dense"}, {"mixer": "mla", "ffn": "moe", "repeat": 2}]})"},
    {"gemma-tiny", R"({"name": "gemma-tiny", "d_model": 48, "vocab_size": 300, "context_length": 512,
      "tie_embeddings": true, "embedding_scale": 6.93, "logit_softcap": 30,
      "norm": {"placement": "sandwich", "unit_offset": true},
      "mixers": {"local": {"kind": "attention", "n_heads": 4, "n_kv_heads": 2, "head_dim": 12, "window": 6,
                           "softcap": 50, "rope": {"theta": 10000}},
                 "global": {"kind": "attention", "n_heads": 4, "n_kv_heads": 2, "head_dim": 12, "softcap": 50,
                            "rope": {"theta": 10000}}},
      "ffns": {"f": {"kind": "dense", "activation": "geglu", "hidden": 96}},
      "layers": [{"mixer": "local", "ffn": "f"}, {"mixer": "global", "ffn": "f"}, {"mixer": "local", "ffn": "f"}]})"},
    {"qwen3next-tiny", R"({"name": "qwen3next-tiny", "d_model": 48, "vocab_size": 300, "context_length": 512,
      "mixers": {"lin": {"kind": "gdn", "n_heads": 2, "n_v_heads": 4, "head_dim": 8, "v_head_dim": 8},
                 "att": {"kind": "attention", "n_heads": 4, "n_kv_heads": 2, "head_dim": 12, "qk_norm": "head",
                         "output_gate": true, "rope": {"theta": 10000, "rotary_dim": 4}}},
      "ffns": {"moe": {"kind": "moe", "activation": "swiglu", "n_experts": 8, "top_k": 2, "expert_hidden": 16,
                       "n_shared": 1, "shared_hidden": 16, "shared_gate": true, "score": "softmax",
                       "gates": "normalize"}},
      "layers": [{"mixer": "lin", "ffn": "moe", "repeat": 2}, {"mixer": "att", "ffn": "moe"}]})"},
    // The last layer recurrent: no layer can end prefill early, so every prompt token runs them all.
    {"gdn-last-tiny", R"({"name": "gdn-last-tiny", "d_model": 48, "vocab_size": 300, "context_length": 512,
      "mixers": {"att": {"kind": "attention", "n_heads": 4, "n_kv_heads": 2, "head_dim": 12, "rope": {}},
                 "lin": {"kind": "gdn2", "n_heads": 2, "head_dim": 8, "v_head_dim": 12, "gate_rank": 4}},
      "ffns": {"f": {"kind": "dense", "activation": "swiglu", "hidden": 64}},
      "layers": [{"mixer": "att", "ffn": "f"}, {"mixer": "lin", "ffn": "f"}]})"},
    // LFM2's shape: short convolutions around one attention layer; a conv layer last, so no
    // prompt token ends early.
    {"lfm2-tiny", R"({"name": "lfm2-tiny", "d_model": 48, "vocab_size": 300, "context_length": 512,
      "norm": {"eps": 1e-5}, "tie_embeddings": true,
      "mixers": {"conv": {"kind": "short_conv", "conv_kernel": 3},
                 "att": {"kind": "attention", "n_heads": 4, "n_kv_heads": 2, "head_dim": 12, "qk_norm": "head",
                         "rope": {"theta": 1000000}}},
      "ffns": {"f": {"kind": "dense", "activation": "swiglu", "hidden": 64}},
      "layers": [{"mixer": "conv", "ffn": "f"}, {"mixer": "att", "ffn": "f"}, {"mixer": "conv", "ffn": "f"}]})"},
    // Granite 4.0-H's shape: Mamba-2 layers (two groups of B and C here) around attention
    // without positions; a Mamba-2 layer last. (Granite's multipliers: tests/train.)
    {"granite4h-tiny", R"({"name": "granite4h-tiny", "d_model": 48, "vocab_size": 300, "context_length": 512,
      "tie_embeddings": true,
      "mixers": {"ssm": {"kind": "mamba2", "n_heads": 6, "n_kv_heads": 2, "head_dim": 16, "state_dim": 8,
                         "conv_kernel": 4, "conv_bias": true},
                 "att": {"kind": "attention", "n_heads": 4, "n_kv_heads": 2, "head_dim": 12, "scale": 0.015625}},
      "ffns": {"f": {"kind": "dense", "activation": "swiglu", "hidden": 64}},
      "layers": [{"mixer": "ssm", "ffn": "f"}, {"mixer": "att", "ffn": "f"}, {"mixer": "ssm", "ffn": "f"}]})"},
};

ModelConfig config_named(const std::string& name) {
  for (auto& [n, json] : kTinyConfigs)
    if (name == n) return parse_model_config(Json::parse(json), name);
  return load_preset(name);
}

using testing_util::max_abs_diff;
using testing_util::random_tokens;

std::shared_ptr<const Model> random_model(const std::string& name) {
  return testing_util::random_model(config_named(name), 11);
}

class Architecture : public ::testing::TestWithParam<std::string> {};

TEST_P(Architecture, EarlyExitPrefillEqualsAFullRun) {
  auto model = random_model(GetParam());
  // Below and above embla-mini's window (8) and sparse selection size (16 + 8).
  for (int n : {1, 5, 12, 30, 100}) {
    auto t = random_tokens(n, model->config.vocab_size, uint32_t(n));
    Session fast(model), full(model);
    std::vector<float> a(size_t(fast.vocab_rows())), b(a.size());
    fast.prefill(t, a.data(), true);
    full.prefill(t, b.data(), false);
    EXPECT_LE(max_abs_diff(a, b), 1e-5f) << "prompt of " << n;
    // And the caches the two left behind serve the next token alike.
    fast.decode(7, a.data());
    full.decode(7, b.data());
    EXPECT_LE(max_abs_diff(a, b), 1e-5f) << "decode after a prompt of " << n;
  }
}

// Early exit saves work, not only gives the same logits: a sparsity probe counts the tokens
// each FFN layer ran (MoE routing; ReLU^2 dense neurons). With early exit the layers before
// the exit layer see every prompt token and the layers at and after it only the last one;
// without it, every layer sees them all. Two chunks, so the batched path is what counts.
TEST(EarlyExit, LayersFromTheExitLayerOnRunOnlyTheLastPromptToken) {
  for (const char* name : {"embla-mini", "olmoe-tiny", "deepseek-tiny"}) {
    SCOPED_TRACE(name);
    auto model = random_model(name);
    const ModelConfig& c = model->config;
    const int exit = model->prefill_exit;
    const auto counted = [&](int i) {
      return c.ffn(i).kind == FfnKind::moe || c.ffn(i).activation == Activation::relu2;
    };
    const auto tokens_at = [&](const SparsityProbe& p, int i) {
      const FfnProbe& f = p.layers[size_t(i)].ffn;
      return f.kind == FfnKind::moe ? f.tokens : f.dense.tokens;
    };
    int before = 0, after = 0;
    for (int i = 0; i < c.n_layers(); ++i) (i < exit ? before : after) += counted(i);
    ASSERT_GT(before, 0) << "no counted layer before the exit layer " << exit;
    ASSERT_GT(after, 0) << "no counted layer at or after the exit layer " << exit;
    const int64_t n = Session(model).chunk() + 5;
    auto t = random_tokens(int(n), c.vocab_size, 21);
    for (bool early : {true, false}) {
      SparsityProbe probe(c);
      Session s(model, {.probe = &probe});
      std::vector<float> logits(size_t(s.vocab_rows()));
      s.prefill(t, logits.data(), early);
      for (int i = 0; i < c.n_layers(); ++i)
        if (counted(i)) {
          EXPECT_EQ(tokens_at(probe, i), early && i >= exit ? 1 : n)
              << "layer " << i << " (exit " << exit << "), early exit " << early;
        }
    }
  }
}

// The cache test: decode through the caches equals the cache-free forward of
// tests/plain_forward.h, which forms every key and value of the whole sequence again from the
// token ids at each checked step. 100 tokens: past the minis' window (8) and sparse selection
// (16 + 8) many times over, and past gemma-tiny's window (6).
TEST_P(Architecture, CachedDecodeEqualsACacheFreeForward) {
  auto model = random_model(GetParam());
  const int n = 100;
  auto t = random_tokens(n, model->config.vocab_size, 3);
  Session decode(model, {.kv = KvType::f32});
  std::vector<float> step(size_t(decode.vocab_rows()));
  float worst = 0, scale = 0;
  for (int i = 0; i < n; ++i) {
    decode.decode(t[size_t(i)], step.data());
    if (i % 19 != 0 && i != n - 1) continue;
    const std::vector<float> plain = testing_util::PlainForward(*model).run(std::span(t.data(), size_t(i + 1)));
    worst = std::max(worst, max_abs_diff(step, plain));
    for (float x : plain) scale = std::max(scale, std::isfinite(x) ? std::fabs(x) : 0.0f);
  }
  std::printf("%s: cached decode vs cache-free forward, max |logit difference| %.3g (logits up to %.3g)\n",
              GetParam().c_str(), worst, scale);
  // f32 throughout; the two differ only in summation order (the oracle sums in double).
  EXPECT_LE(worst, 2e-5f * std::max(1.0f, scale));
  EXPECT_GT(scale, 0.0f);
}

// A saved state continues exactly as the session it came from, restored into a session that
// has run other tokens since (so a buffer the state list missed would keep their values):
// the window rings wrapped, recurrent states, engram gates and block sums all in it.
TEST_P(Architecture, RestoredStateContinuesIdentically) {
  auto model = random_model(GetParam());
  const int64_t context = 64;
  auto prompt = random_tokens(20, model->config.vocab_size, 5), more = random_tokens(12, model->config.vocab_size, 6);
  Session original(model, {.context = context}), other(model, {.context = context});
  std::vector<float> a(size_t(original.vocab_rows())), b(a.size());
  original.prefill(prompt, a.data());
  const std::vector<std::byte> state = save_session_state(original);
  other.prefill(random_tokens(33, model->config.vocab_size, 7), b.data());
  restore_session_state(other, state);
  EXPECT_EQ(other.position(), original.position());
  EXPECT_EQ(other.history(), original.history());
  for (int32_t t : more) {
    original.decode(t, a.data());
    other.decode(t, b.data());
    ASSERT_EQ(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)), 0) << "after token " << t;
  }
}

// max |a - b| over the finite logits, relative to the largest of them (at least 1).
float relative_diff(const std::vector<float>& a, const std::vector<float>& b) {
  float scale = 1.0f;
  for (float x : b) scale = std::max(scale, std::isfinite(x) ? std::fabs(x) : 0.0f);
  return max_abs_diff(a, b) / scale;
}

// The oracle is the decode path: one token at a time through every layer, each product a
// matvec. The batched prefill runs chunks of rows with batched FFN / MoE products; lengths
// around the chunk, the windows (6, 8) and embla-mini's sparse selection (16 + 8).
TEST_P(Architecture, BatchedPrefillEqualsTokenByToken) {
  auto model = random_model(GetParam());
  const int64_t chunk = Session(model).chunk();
  ASSERT_GE(chunk, 2) << "a chunk of one row would test nothing";
  std::vector<int64_t> lengths{1, 2, 5, 6, 7, 9, 23, 24, 25, chunk - 1, chunk, chunk + 1, 2 * chunk + 3};
  for (int64_t n : lengths) {
    auto t = random_tokens(int(n), model->config.vocab_size, uint32_t(100 + n));
    Session one(model), batched(model), batched_full(model);
    std::vector<float> a(size_t(one.vocab_rows())), b(a.size()), c(a.size());
    for (int32_t tok : t) one.decode(tok, a.data());
    batched.prefill(t, b.data(), true);
    batched_full.prefill(t, c.data(), false);
    EXPECT_LE(relative_diff(b, a), 1e-4f) << "prompt of " << n << " (chunk " << chunk << ")";
    EXPECT_LE(relative_diff(c, a), 1e-4f) << "prompt of " << n << " without early exit";
    // The caches the batch left serve the next tokens as the token-by-token ones do.
    for (int32_t next : {7, 11}) {
      one.decode(next, a.data());
      batched.decode(next, b.data());
    }
    EXPECT_LE(relative_diff(b, a), 1e-4f) << "decode after a prompt of " << n;
  }
}

// The same on q8 / q4 weights wide enough (d_model 256) to carry decode-order copies: the
// prefill's GEMMs read those copies, as decode's matvecs do, and must give the same logits.
TEST(QuantisedPrefill, BatchedPrefillOnPackedWeightsEqualsTokenByToken) {
  const ModelConfig c = parse_model_config(Json::parse(R"({"name": "llama-256", "d_model": 256, "vocab_size": 300,
      "context_length": 512,
      "mixers": {"a": {"kind": "attention", "n_heads": 4, "n_kv_heads": 2, "head_dim": 64, "rope": {"theta": 10000}}},
      "ffns": {"f": {"kind": "dense", "activation": "swiglu", "hidden": 512}},
      "layers": [{"mixer": "a", "ffn": "f", "repeat": 2}]})"), "llama-256");
  for (kernels::DType type : {kernels::DType::q8, kernels::DType::q4}) {
    SCOPED_TRACE(kernels::to_string(type));
    auto model = testing_util::random_model(c, 5, type);
    ASSERT_TRUE(model->layers[0].attn.wq.packed && model->layers[0].dense.w_down.packed) << "no decode-order copies";
    const int64_t chunk = Session(model).chunk();
    for (int64_t n : {int64_t(3), chunk, chunk + 5}) {
      auto t = random_tokens(int(n), c.vocab_size, uint32_t(300 + n));
      // Attention row by row: the block's rounding would move some 8-bit activations of W_o's
      // input by a step, which this test of the GEMMs' bits is not about (the block has tests
      // of its own in test_attention_items).
      Session one(model), batched(model, {.block_attention = false});
      std::vector<float> a(size_t(one.vocab_rows())), b(a.size());
      for (int32_t tok : t) one.decode(tok, a.data());
      batched.prefill(t, b.data(), false);
      EXPECT_LE(relative_diff(b, a), 1e-4f) << "prompt of " << n;
    }
  }
}

TEST_P(Architecture, DecodeBatchEqualsEachSessionAlone) {
  auto model = random_model(GetParam());
  const int S = 3;
  std::vector<std::unique_ptr<Session>> batched, alone;
  std::vector<std::vector<float>> out(S, std::vector<float>(size_t(model->config.rows()))), ref = out;
  for (int s = 0; s < S; ++s) {
    auto prompt = random_tokens(3 + 7 * s, model->config.vocab_size, uint32_t(40 + s));
    batched.push_back(std::make_unique<Session>(model));
    alone.push_back(std::make_unique<Session>(model));
    batched.back()->prefill(prompt, out[size_t(s)].data());
    alone.back()->prefill(prompt, ref[size_t(s)].data());
  }
  std::vector<Session*> sessions;
  std::vector<float*> logits;
  for (int s = 0; s < S; ++s) sessions.push_back(batched[size_t(s)].get()), logits.push_back(out[size_t(s)].data());
  for (int step = 0; step < 6; ++step) {
    std::vector<int32_t> tokens;
    for (int s = 0; s < S; ++s) tokens.push_back(int32_t((17 * step + 5 * s + 1) % model->config.vocab_size));
    decode_batch(sessions, tokens, logits);
    for (int s = 0; s < S; ++s) {
      alone[size_t(s)]->decode(tokens[size_t(s)], ref[size_t(s)].data());
      EXPECT_LE(relative_diff(out[size_t(s)], ref[size_t(s)]), 1e-4f) << "session " << s << " step " << step;
      EXPECT_EQ(batched[size_t(s)]->history(), alone[size_t(s)]->history());
    }
  }
  // A repeated session, or spans of different lengths, are refused before anything runs.
  std::vector<Session*> twice{sessions[0], sessions[0]};
  std::vector<int32_t> two{1, 2};
  std::vector<float*> two_out{logits[0], logits[1]};
  EXPECT_THROW(decode_batch(twice, two, two_out), std::invalid_argument);
  EXPECT_THROW(decode_batch(sessions, two, two_out), std::invalid_argument);
  EXPECT_EQ(batched[0]->history(), alone[0]->history());
}

TEST_P(Architecture, ExtendingAPromptContinuesFromTheSessionsState) {
  auto model = random_model(GetParam());
  auto t = random_tokens(40, model->config.vocab_size, 77);
  const std::span<const int32_t> all(t), first = all.first(17);
  Session reused(model), fresh(model);
  std::vector<float> a(size_t(reused.vocab_rows())), b(a.size());
  reused.prefill(first, a.data());
  EXPECT_EQ(reused.extend(all, a.data()), 17);
  fresh.prefill(all, b.data());
  EXPECT_LE(relative_diff(a, b), 1e-4f);
  EXPECT_EQ(reused.history(), fresh.history());
  // Not an extension (a changed token, or nothing new): refused, the session unchanged.
  auto changed = t;
  changed[3] ^= 1;
  changed.push_back(5);
  EXPECT_THROW(reused.extend(changed, a.data()), std::invalid_argument);
  EXPECT_THROW(reused.extend(all, a.data()), std::invalid_argument);
  EXPECT_EQ(reused.position(), 40);
}

INSTANTIATE_TEST_SUITE_P(Engine, Architecture,
                         ::testing::Values("embla-mini", "nenya-mini", "llama-tiny", "olmoe-tiny", "deepseek-tiny", "gemma-tiny",
                                           "qwen3next-tiny", "gdn-last-tiny", "lfm2-tiny",
                                           "granite4h-tiny"),
                         [](const auto& info) {
                           std::string s = info.param;
                           for (char& ch : s) ch = std::isalnum(static_cast<unsigned char>(ch)) ? ch : '_';
                           return s;
                         });

}  // namespace
}  // namespace wren
