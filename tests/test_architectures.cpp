// Every architecture the engine runs, small and randomly initialised: prefill with early
// exit equals a full run, and cached decode equals a cache-free forward (plain_forward.h). The
// ordinary models are shrunk copies of the shapes of Llama-3.1, OLMoE, DeepSeek-V2-Lite,
// Gemma 2 and Qwen3-Next, built from the same parts as Embla and Nenya.
#include <gtest/gtest.h>

#include <cmath>

#include "config/parse.h"
#include "model/model.h"
#include "plain_forward.h"
#include "runtime/session.h"
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

INSTANTIATE_TEST_SUITE_P(Engine, Architecture,
                         ::testing::Values("embla-mini", "nenya-mini", "llama-tiny", "olmoe-tiny", "deepseek-tiny", "gemma-tiny",
                                           "qwen3next-tiny", "gdn-last-tiny"),
                         [](const auto& info) {
                           std::string s = info.param;
                           for (char& ch : s) ch = std::isalnum(static_cast<unsigned char>(ch)) ? ch : '_';
                           return s;
                         });

}  // namespace
}  // namespace wren
