// The model description: presets parse and round-trip; bad configs fail with an error that
// names the field, the value and what was expected; impossible schedules are rejected.
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <string>

#include "config/parse.h"
#include "config/weight_map.h"

namespace wren {
namespace {

// A small valid config; tests break one thing at a time.
Json small_config() {
  return Json::parse(R"({
    "name": "t", "d_model": 32, "vocab_size": 100, "context_length": 64,
    "mixers": {"a": {"kind": "attention", "n_heads": 4, "n_kv_heads": 2, "head_dim": 8}},
    "ffns": {"f": {"kind": "dense", "activation": "swiglu", "hidden": 64}},
    "layers": [{"mixer": "a", "ffn": "f", "repeat": 2}]
  })");
}

std::string error_of(const Json& j) {
  try {
    parse_model_config(j, "cfg.json");
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "";
}

#define EXPECT_ERROR_HAS(json, ...)                                        \
  do {                                                                     \
    std::string msg = error_of(json);                                      \
    ASSERT_FALSE(msg.empty()) << "config was accepted";                    \
    for (const char* part : {__VA_ARGS__}) EXPECT_NE(msg.find(part), std::string::npos) << msg; \
  } while (0)

TEST(Config, PresetsParseAndRoundTrip) {
  ASSERT_GE(preset_names().size(), 4u);
  for (auto& name : preset_names()) {
    ModelConfig c = load_preset(name);
    Json j = to_json(c);
    ModelConfig back = parse_model_config(j, "round trip of " + name);
    EXPECT_EQ(to_json(back), j) << name;
    EXPECT_EQ(build_weight_map(back).tensors.size(), build_weight_map(c).tensors.size()) << name;
  }
}

TEST(Config, SmallConfigParses) {
  ModelConfig c = parse_model_config(small_config(), "cfg.json");
  EXPECT_EQ(c.n_layers(), 2);
  EXPECT_EQ(c.mixer(1).n_kv_heads, 2);
}

TEST(Config, MissingField) {
  Json j = small_config();
  j.erase("d_model");
  EXPECT_ERROR_HAS(j, "cfg.json", "d_model", "missing");
}

TEST(Config, WrongType) {
  Json j = small_config();
  j["mixers"]["a"]["n_heads"] = "four";
  EXPECT_ERROR_HAS(j, "mixers.a.n_heads", "expected an integer", "\"four\"");
}

TEST(Config, ZeroOrNegativeSize) {
  Json j = small_config();
  j["ffns"]["f"]["hidden"] = 0;
  EXPECT_ERROR_HAS(j, "ffns.f.hidden", ">= 1");
  j = small_config();
  j["vocab_size"] = -5;
  EXPECT_ERROR_HAS(j, "vocab_size", "-5");
}

TEST(Config, UnknownFieldAndEnum) {
  Json j = small_config();
  j["mixers"]["a"]["heads"] = 4;
  EXPECT_ERROR_HAS(j, "mixers.a.heads", "unknown field");
  j = small_config();
  j["mixers"]["a"]["kind"] = "flash";
  EXPECT_ERROR_HAS(j, "mixers.a.kind", "\"flash\"", "relu2_attention");
}

TEST(Config, HeadsMustDivide) {
  Json j = small_config();
  j["mixers"]["a"]["n_kv_heads"] = 3;
  EXPECT_ERROR_HAS(j, "n_kv_heads", "not divisible");
}

// Attention's values are head_dim wide, one per key head (the weight map's wv and wo): a value
// width or count of their own was accepted and then overran the attention output (found by
// fuzz_model_dir: v_head_dim 5 with head_dim 8 wrote past the block's output rows).
TEST(Config, ValueWidthAndHeadsOnlyWhereTheWeightsHaveThem) {
  for (const char* kind : {"attention", "relu2_attention"}) {
    Json j = small_config();
    j["mixers"]["a"]["kind"] = kind;
    j["mixers"]["a"]["v_head_dim"] = 5;
    EXPECT_ERROR_HAS(j, "mixers.a.v_head_dim", kind, "remove it");
    j["mixers"]["a"].erase("v_head_dim");
    j["mixers"]["a"]["n_v_heads"] = 4;
    EXPECT_ERROR_HAS(j, "mixers.a.n_v_heads", kind, "remove it");
  }
  Json gdn = small_config();
  gdn["mixers"]["a"] = Json::parse(R"({"kind": "gdn2", "n_heads": 2, "n_v_heads": 4, "head_dim": 8, "v_head_dim": 12})");
  EXPECT_EQ(error_of(gdn), "");
}

TEST(Config, UnknownMixerName) {
  Json j = small_config();
  j["layers"][0]["mixer"] = "b";
  EXPECT_ERROR_HAS(j, "layers[0].mixer", "no mixer named \"b\"");
}

TEST(Config, SparseLayerNeedsAFullLayerBefore) {
  Json j = small_config();
  j["mixers"]["s"] = {{"kind", "sparse_reuse"}, {"n_heads", 4}, {"head_dim", 8}};
  j["layers"] = Json::parse(R"([{"mixer": "s", "ffn": "f"}, {"mixer": "a", "ffn": "f"}])");
  EXPECT_ERROR_HAS(j, "layers[0].kv", "sparse_reuse");
  j["layers"] = Json::parse(R"([{"mixer": "s", "ffn": "f", "kv": {"reuse": 1}}, {"mixer": "a", "ffn": "f"}])");
  EXPECT_ERROR_HAS(j, "layers[0].kv", "not an earlier layer");
  // A window layer keeps no full cache to select from.
  j["mixers"]["w"] = {{"kind", "attention"}, {"n_heads", 4}, {"n_kv_heads", 2}, {"head_dim", 8}, {"window", 4}};
  j["layers"] = Json::parse(R"([{"mixer": "w", "ffn": "f"}, {"mixer": "s", "ffn": "f", "kv": {"reuse": 0}}])");
  EXPECT_ERROR_HAS(j, "layers[1].kv", "no full-attention cache");
  j["layers"] = Json::parse(R"([{"mixer": "a", "ffn": "f"}, {"mixer": "s", "ffn": "f", "kv": {"reuse": 0}}])");
  EXPECT_EQ(error_of(j), "");
}

TEST(Config, BridgeToALaterPointIsRejected) {
  Json j = small_config();
  j["layers"] = Json::parse(R"([{"mixer": "a", "ffn": "f", "kv": {"bridge": 1}}, {"mixer": "a", "ffn": "f"}])");
  EXPECT_ERROR_HAS(j, "layers[0].kv", "not an earlier layer");
}

TEST(Config, BadKvSpelling) {
  Json j = small_config();
  j["layers"][0]["kv"] = {{"bridge", 0}, {"reuse", 0}};
  EXPECT_ERROR_HAS(j, "layers[0].kv", "expected \"own\"");
}

TEST(Config, ResidualSourceEngramMustMatchWidth) {
  Json j = small_config();
  j["residual"] = {{"kind", "attn_residuals"}, {"block_size", 2}};
  j["engram"] = {{"orders", {2, 3}}, {"heads_per_order", 8}, {"rows", 11}, {"row_dim", 3}};
  EXPECT_ERROR_HAS(j, "engram.row_dim", "must equal d_model 32");
  j["engram"]["row_dim"] = 2;
  EXPECT_EQ(error_of(j), "");
}

// Each placement with the residual it needs: a residual source replaces attn_residuals' stream
// and is read by every layer; a gated add joins a plain stream at layers the model has.
TEST(Config, EngramPlacementNeedsItsResidualAndLayers) {
  Json source = small_config();
  source["engram"] = {{"orders", {2, 3}}, {"heads_per_order", 8}, {"rows", 11}, {"row_dim", 2}};
  EXPECT_ERROR_HAS(source, "engram.placement", "residual_source needs", "attn_residuals");
  source["residual"] = {{"kind", "attn_residuals"}, {"block_size", 2}};
  source["engram"]["layers"] = {1};
  EXPECT_ERROR_HAS(source, "engram.layers", "remove \"layers\"");

  Json add = small_config();
  add["engram"] = {{"orders", {2}}, {"heads_per_order", 1}, {"rows", 11}, {"row_dim", 4}, {"placement", "gated_add"}};
  EXPECT_ERROR_HAS(add, "engram.layers", "needs the layers");
  add["engram"]["layers"] = {0, 2};  // the model's layers are 0 and 1
  EXPECT_ERROR_HAS(add, "engram.layers", "layer 2 is out of range", "has 2 layers");
  add["engram"]["layers"] = {0, 1};
  EXPECT_EQ(error_of(add), "");
  add["residual"] = {{"kind", "attn_residuals"}, {"block_size", 2}};
  EXPECT_ERROR_HAS(add, "engram.placement", "gated_add adds into the residual stream");
}

TEST(Config, InvalidJsonFileNamesTheFile) {
  const std::string path = ::testing::TempDir() + "/bad_config.json";
  std::ofstream(path) << "{\"d_model\": 12,";
  try {
    resolve_model_config(path);
    FAIL() << "accepted invalid JSON";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("bad_config.json"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("invalid JSON"), std::string::npos) << e.what();
  }
  std::remove(path.c_str());
}

TEST(Config, UnknownPresetListsPresets) {
  try {
    load_preset("embla-2");
    FAIL();
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("embla-1"), std::string::npos) << e.what();
  }
}

TEST(Config, EmblaEarlyExitLayer) {
  EXPECT_EQ(load_preset("embla-1").prefill_exit_layer(), 16);
  EXPECT_EQ(load_preset("embla-mini").prefill_exit_layer(), 4);
  // A plain decoder can only skip the last layer's work after its K/V projection.
  ModelConfig c = parse_model_config(small_config(), "cfg.json");
  EXPECT_EQ(c.prefill_exit_layer(), 1);
}

TEST(Config, EngramTablesArePrimeSizedAndDistinct) {
  EngramSpec e;
  e.rows = 1000;
  e.row_dim = 4;
  auto rows = engram_table_rows(e);
  ASSERT_EQ(rows.size(), 16u);
  for (size_t i = 0; i < rows.size(); ++i) {
    EXPECT_GE(rows[i], 1000);
    for (int64_t d = 2; d * d <= rows[i]; ++d) ASSERT_NE(rows[i] % d, 0) << rows[i];
    if (i) {
      EXPECT_GT(rows[i], rows[i - 1]);
    }
  }
}

}  // namespace
}  // namespace wren

namespace wren {
namespace {

TEST(Config, SizesThatWouldOverflowAreRejected) {
  Json j = Json::parse(R"({"name": "t", "d_model": 32, "vocab_size": 100, "context_length": 64,
    "mixers": {"a": {"kind": "attention", "n_heads": 4, "n_kv_heads": 2, "head_dim": 8}},
    "ffns": {"f": {"kind": "moe", "activation": "swiglu", "n_experts": 65536, "top_k": 2, "expert_hidden": 65536}},
    "layers": [{"mixer": "a", "ffn": "f"}]})");
  try {
    parse_model_config(j, "big.json");
    FAIL() << "accepted 2^32 expert rows";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("ffns.f.expert_hidden"), std::string::npos) << e.what();
  }
  j["ffns"]["f"]["n_experts"] = 8;
  EXPECT_NO_THROW(parse_model_config(j, "ok.json"));
  j["engram"] = {{"orders", {2}}, {"heads_per_order", 1}, {"rows", int64_t(1) << 40}, {"row_dim", 4}};
  j["engram"]["placement"] = "gated_add";
  j["engram"]["layers"] = {0};
  try {
    parse_model_config(j, "rows.json");
    FAIL() << "accepted 2^40 rows per table";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("engram.rows"), std::string::npos) << e.what();
  }
}

TEST(Config, GatedEngramNeedsAResidualStream) {
  Json j = Json::parse(R"({"name": "t", "d_model": 32, "vocab_size": 100, "context_length": 64,
    "residual": {"kind": "attn_residuals", "block_size": 1},
    "engram": {"orders": [2], "heads_per_order": 2, "rows": 11, "row_dim": 4, "placement": "gated_add", "layers": [0]},
    "mixers": {"a": {"kind": "attention", "n_heads": 4, "n_kv_heads": 2, "head_dim": 8}},
    "ffns": {"f": {"kind": "dense", "activation": "swiglu", "hidden": 64}},
    "layers": [{"mixer": "a", "ffn": "f"}]})");
  try {
    parse_model_config(j, "cfg.json");
    FAIL();
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("engram.placement"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace wren
