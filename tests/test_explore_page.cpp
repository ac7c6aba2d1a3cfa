// The explorer page's side of the cost model: the JSON request the page sends through
// WebAssembly is answered with the same figures as the report `wren explore` renders, an
// invalid setting with the validator's own message, and the seed's closed forms agree with
// the cost model wherever the model is one the seed describes.
#include <gtest/gtest.h>

#include "config/parse.h"
#include "explore/page_html.h"
#include "explore/page_request.h"
#include "explore/report.h"

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>

namespace wren::explore {
namespace {

// The message the page shows for a request: the error's own text.
std::string error_of(const Json& request) {
  try {
    answer_page_request(request);
  } catch (const std::exception& e) {
    return e.what();
  }
  return "(no error)";
}

Json request_for(const ModelConfig& c, int64_t context) {
  return {{"model", to_json(c)},
          {"knobs", {{"weights", "int4:g64"}, {"kv", "int8"}, {"firing", 0.25}, {"v_read", 0.5}, {"bandwidth", 120}}},
          {"context", context},
          {"curve", {1024, 65536}}};
}

TEST(ExplorerPage, AnswerIsTheReport) {
  for (const char* name : {"embla-1", "nenya", "deepseek-v2-lite"}) {
    const ModelConfig c = load_preset(name);
    const Json a = answer_page_request(request_for(c, 12000));
    ASSERT_TRUE(a["ok"].get<bool>()) << a.dump();
    // The oracle: the report built directly, knobs set field by field.
    ReportOptions o;
    o.contexts = {1024, 12000, 65536};
    o.knobs.weights = o.knobs.head = o.knobs.engram = parse_precision("int4:g64");
    o.knobs.kv = parse_precision("int8");
    o.knobs.firing_fraction = 0.25;
    o.knobs.v_read_fraction = 0.5;
    o.knobs.bandwidth_gbs = 120;
    EXPECT_EQ(a["report"], render_json({build_report(c, o)}, o)["models"][0]) << name;
    EXPECT_EQ(a["context_key"], "12000");
    EXPECT_EQ(a["layers"], c.n_layers());
  }
}

TEST(ExplorerPage, InvalidSettingGivesTheValidatorsMessage) {
  Json r = request_for(load_preset("qwen3-30b-a3b"), 4096);
  r["model"]["mixers"]["attention"]["n_kv_heads"] = 5;
  EXPECT_EQ(error_of(r), "model: mixers.attention.n_kv_heads: n_heads 32 is not divisible by n_kv_heads 5");

  Json bad = request_for(load_preset("embla-1"), 4096);
  bad["model"]["layers"][17]["kv"] = {{"reuse", 3}};  // layer 3 is a window layer
  EXPECT_EQ(error_of(bad), "model: layers[17].kv: layer 3 (window) keeps no full-attention cache of its own to reuse");

  bad = request_for(load_preset("embla-1"), 4096);
  bad["knobs"]["kv"] = "int3";
  EXPECT_EQ(error_of(bad), "precision \"int3\": expected f32, bf16, int8[:gN] or int4[:gN]");
  bad = request_for(load_preset("embla-1"), 4096);
  bad["knobs"]["firing"] = 1.5;
  EXPECT_EQ(error_of(bad), "page: knobs.firing: value 1.5 (number) must be in [0.0 (number), 1.0 (number)]");
}

// On a model the seed describes (SwiGLU MoE, GQA full + window layers, sandwich norms) every
// closed form equals the cost model's figure; on Embla (ReLU^2 FFN, reuse) some differ.
TEST(ExplorerPage, SeedFormulasMatchTheCostModelOnTheSeedsModels) {
  Json j = Json::parse(R"({"name": "seed", "d_model": 512, "vocab_size": 32000, "context_length": 8192,
    "norm": {"placement": "sandwich"},
    "mixers": {"full": {"kind": "attention", "n_heads": 8, "n_kv_heads": 2, "head_dim": 64},
               "swa": {"kind": "attention", "n_heads": 8, "n_kv_heads": 2, "head_dim": 64, "window": 256}},
    "ffns": {"dense": {"kind": "dense", "activation": "swiglu", "hidden": 1024},
             "moe": {"kind": "moe", "activation": "swiglu", "n_experts": 32, "top_k": 4, "expert_hidden": 256,
                     "n_shared": 1, "shared_hidden": 512}},
    "layers": [{"mixer": "full", "ffn": "dense"}, {"mixer": "swa", "ffn": "moe", "repeat": 5},
               {"mixer": "full", "ffn": "moe"}]})");
  Json r = request_for(parse_model_config(j, "seed"), 5000);
  r["knobs"] = {{"kv", "bf16"}};
  const Json a = answer_page_request(r);
  ASSERT_EQ(a["formulas"].size(), 10u);
  for (const Json& f : a["formulas"]) EXPECT_EQ(f["closed_value"], f["model_value"]) << f.dump();
  // Spot-check one substitution by hand: 6 MoE layers x 3 x 512 x 256 x 32 experts.
  EXPECT_EQ(a["formulas"][0]["substituted"], "6 × 3 × 512 × 256 × 32");
  EXPECT_EQ(a["formulas"][0]["closed_value"].get<double>(), 6.0 * 3 * 512 * 256 * 32);

  // Nenya's latent experts run at the latent width: 30 x 3 x 384 x 384 x 120.
  const Json nenya = answer_page_request(request_for(load_preset("nenya"), 5000));
  EXPECT_EQ(nenya["formulas"][0]["substituted"], "30 × 3 × 384 × 384 × 120");
  EXPECT_EQ(nenya["formulas"][0]["closed_value"], nenya["formulas"][0]["model_value"]);

  const Json e = answer_page_request(request_for(load_preset("embla-1"), 5000));
  int differ = 0;
  for (const Json& f : e["formulas"]) differ += f["closed_value"] != f["model_value"];
  EXPECT_GT(differ, 0);
}

TEST(ExplorerPage, PageIsSelfContained) {
  const std::string page = render_page({{load_preset("nenya")}, {load_preset("embla-mini")}});
  EXPECT_EQ(page.find("<script src"), std::string::npos);
  EXPECT_EQ(page.find("<link"), std::string::npos);
  EXPECT_EQ(page.find("@*/"), std::string::npos);  // every template slot filled
  EXPECT_NE(page.find("WrenEngine"), std::string::npos);
  EXPECT_NE(page.find("\"kv_lora_rank\":320"), std::string::npos);  // nenya's description is in
  // Only the page's own closing tags remain: one per script element.
  size_t closes = 0;
  for (size_t at = page.find("</script>"); at != std::string::npos; at = page.find("</script>", at + 1)) ++closes;
  EXPECT_EQ(closes, 5u);
}

// `wren explore MODELS --hf FILE --html OUT`: the page opens with those models, in order; a bad
// model name writes nothing.
TEST(ExplorerPage, HtmlCommandWritesThePage) {
  const std::string out = ::testing::TempDir() + "/explorer_page_test.html";
  std::filesystem::remove(out);
  const std::string hf = std::string(WREN_SOURCE_DIR) + "/tests/fixtures/hf/llama-3.1-8b.json";
  ASSERT_EQ(std::system((std::string(WREN_BINARY) + " explore nenya-mini --hf " + hf + " --html " + out).c_str()), 0);
  std::stringstream text;
  text << std::ifstream(out).rdbuf();
  const std::string page = text.str();
  const size_t data = page.find("{\"open\":[");
  ASSERT_NE(data, std::string::npos);
  const size_t first = page.find("\"name\":\"nenya-mini\"", data), hf_model = page.find("\"d_model\":4096", data);
  EXPECT_LT(first, hf_model);
  EXPECT_LT(hf_model, page.find("\"presets\":", data));
  std::filesystem::remove(out);
  EXPECT_NE(std::system((std::string(WREN_BINARY) + " explore no-such-model --html " + out + " 2>/dev/null").c_str()), 0);
  EXPECT_FALSE(std::filesystem::exists(out));
}

}  // namespace
}  // namespace wren::explore
