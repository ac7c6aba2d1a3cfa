// The explorer against the seeds: Nenya's report figures, Embla 1's blog figures, and
// seeds 003/004's closed forms recomputed by hand on a plain GQA + sliding-window model.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "config/parse.h"
#include "config/weight_map.h"
#include "explore/cost_model.h"
#include "explore/report.h"

namespace wren::explore {
namespace {

double component(const ParamCounts& p, Component c) { return double(p.total[int(c)]); }

void expect_within(double value, double target, double tolerance, const char* what) {
  EXPECT_LE(std::fabs(value / target - 1), tolerance) << what << ": " << value << " vs " << target;
}

TEST(Explore, NenyaMatchesTheReport) {
  ModelConfig c = load_preset("nenya");
  ParamCounts p = count_params(c, build_weight_map(c));
  expect_within(double(p.total_all), 2594.7e6, 0.01, "total");
  expect_within(p.active_incl_embedding, 553.3e6, 0.01, "active (A11 arithmetic)");
  expect_within(component(p, Component::routed_experts), 1592.5e6, 0.01, "routed experts");
  expect_within(component(p, Component::engram_tables), 528.4e6, 0.01, "engram tables");
  // The report's "3.5M" router is 30 layers x 120 experts x 960 = 3.456M, rounded.
  expect_within(component(p, Component::router), 30.0 * 120 * 960, 0.01, "router");
  // The embedding-free figure is reported beside it: A11's figure minus the input embedding.
  EXPECT_NEAR(p.active_incl_embedding - p.active_excl_embedding, double(100278 + 74) * 960, 1);
}

TEST(Explore, EmblaMatchesTheBlog) {
  ModelConfig c = load_preset("embla-1");
  int window = 0, full = 0, sparse = 0;
  for (int i = 0; i < c.n_layers(); ++i) {
    MixerKind k = c.mixer(i).kind;
    window += k == MixerKind::attention && c.mixer(i).window > 0;
    full += k == MixerKind::relu2_attention;
    sparse += k == MixerKind::sparse_reuse;
  }
  EXPECT_EQ(window, 15);
  EXPECT_EQ(full, 5);
  EXPECT_EQ(sparse, 12);
  ParamCounts p = count_params(c, build_weight_map(c));
  expect_within(double(p.total_all), 10e9, 0.05, "total");
  expect_within(component(p, Component::engram_tables), 3e9, 0.05, "engram");
  expect_within(p.active_excl_embedding, 1e9, 0.05, "active (lookups left out)");
  // Five full caches x (K + V) x 2 heads x 128 values at 8 bits with one scale per 128 values.
  expect_within(cache_bytes_per_token(c, parse_precision("int8:g128")), 2600, 0.05, "cache bytes per token");
  State s = state(c, 8192);
  EXPECT_EQ(s.stored[MixerKind::sparse_reuse], 0);
  EXPECT_GT(s.read[MixerKind::sparse_reuse], 0);
}

// Seeds 003/004 on a plain model: L_full full and L_swa sliding-window GQA layers, SwiGLU MoE
// after L_dense dense layers, sandwich norms, untied embedding.
TEST(Explore, SeedClosedFormsOnGqaAndSwa) {
  const int64_t d = 256, V = 1000, hq = 8, hkv = 2, dh = 32, w = 64, E = 16, k = 4, de = 96, ds = 128, dff = 384;
  const int64_t L_full = 2, L_swa = 4, L_dense = 1, L = L_full + L_swa, L_moe = L - L_dense;
  Json j = Json::parse(R"({"name": "gqa-swa", "context_length": 100000,
    "norm": {"placement": "sandwich"},
    "mixers": {"full": {"kind": "attention", "rope": {}}, "swa": {"kind": "attention", "rope": {}}},
    "ffns": {"dense": {"kind": "dense", "activation": "swiglu"},
             "moe": {"kind": "moe", "activation": "swiglu", "n_shared": 1}}})");
  j["d_model"] = d;
  j["vocab_size"] = V;
  for (const char* m : {"full", "swa"}) {
    j["mixers"][m]["n_heads"] = hq;
    j["mixers"][m]["n_kv_heads"] = hkv;
    j["mixers"][m]["head_dim"] = dh;
  }
  j["mixers"]["swa"]["window"] = w;
  j["ffns"]["dense"]["hidden"] = dff;
  j["ffns"]["moe"].update({{"n_experts", E}, {"top_k", k}, {"expert_hidden", de}, {"shared_hidden", ds}});
  j["layers"] = Json::array({{{"mixer", "full"}, {"ffn", "dense"}}, {{"mixer", "swa"}, {"ffn", "moe"}, {"repeat", 4}},
                             {{"mixer", "full"}, {"ffn", "moe"}}});
  ModelConfig c = parse_model_config(j, "seed test");
  WeightMap wm = build_weight_map(c);
  ParamCounts p = count_params(c, wm);

  const int64_t dq = hq * dh, dkv = hkv * dh;
  const int64_t P_qkvo = 2 * L * d * (dq + dkv);
  const int64_t P_routed_total = L_moe * 3 * d * de * E, P_routed_active = L_moe * 3 * d * de * k;
  const int64_t P_shared = L_moe * 3 * d * ds, P_dense = L_dense * 3 * d * dff, P_router = L_moe * E * d;
  const int64_t P_norms = (4 * L + 1) * d, P_embed = V * d, P_head = V * d;
  EXPECT_EQ(p.total[int(Component::mixer)], P_qkvo);
  EXPECT_EQ(p.total[int(Component::routed_experts)], P_routed_total);
  EXPECT_EQ(p.total[int(Component::shared_experts)], P_shared);
  EXPECT_EQ(p.total[int(Component::dense_ffn)], P_dense);
  EXPECT_EQ(p.total[int(Component::router)], P_router);
  EXPECT_EQ(p.total[int(Component::norms)], P_norms);
  EXPECT_EQ(p.total_all, P_qkvo + P_routed_total + P_shared + P_dense + P_router + P_norms + P_embed + P_head);
  const double P_active = double(P_qkvo + P_routed_active + P_shared + P_dense + P_router + P_head);
  EXPECT_DOUBLE_EQ(p.active_excl_embedding - double(P_norms), P_active);

  for (double n : {16.0, 64.0, 1000.0, 32768.0}) {
    // F_train = 6 P_active + 12 L_full dq n/2 + 12 L_swa dq min(n, w)
    const double expected = 6 * P_active + 12.0 * L_full * dq * n / 2 + 12.0 * L_swa * dq * std::min(n, double(w));
    Flops f = flops_per_token(c, wm, n, Phase::training);
    EXPECT_NEAR(f.params + f.attention[MixerKind::attention], expected, expected * 1e-12) << "n = " << n;
    // M = c B b d_kv L_kv n_ret with c = 2 (K and V), B = 1, b = 1 byte, n_ret = n or min(n, w)
    const double M = 2.0 * dkv * (L_full * n + L_swa * std::min(n, double(w)));
    EXPECT_DOUBLE_EQ(state(c, n).stored_total(), M) << "n = " << n;
  }
}

TEST(Explore, DecodeBytesFollowTheKnobs) {
  ModelConfig c = load_preset("embla-1");
  WeightMap wm = build_weight_map(c);
  DecodeKnobs k;
  k.weights = k.head = k.engram = parse_precision("int8");
  k.kv = parse_precision("int8:g128");
  DecodeBytes all = decode_bytes(c, wm, 65536, k);
  k.firing_fraction = 0.22;
  DecodeBytes skip = decode_bytes(c, wm, 65536, k);
  // Only the ReLU^2 down projections shrink, by 78%.
  double down = 0;
  for (auto& t : wm.tensors)
    if (t.neuron_rows) down += double(t.numel()) * (t.activity == Activity::routed ? t.active_fraction : 1.0) * k.weights.bytes;
  EXPECT_NEAR(all.memory_total() - skip.memory_total(), 0.78 * down, 1e-6 * down);
  k.v_read_fraction = 0.4;
  DecodeBytes vskip = decode_bytes(c, wm, 65536, k);
  // Five full layers read 60% fewer V rows: 5 x 65536 x 256 values x 0.6.
  EXPECT_NEAR(skip.state - vskip.state, 5 * 65536.0 * 256 * 0.6 * k.kv.bytes, 1);
  k.engram_from_storage = true;
  DecodeBytes storage = decode_bytes(c, wm, 65536, k);
  EXPECT_NEAR(storage.storage, 16 * 128 * k.engram.bytes, 1e-9);
  EXPECT_GT(storage.tokens_per_second(50), vskip.tokens_per_second(50));
}

TEST(Explore, PrecisionParsing) {
  EXPECT_DOUBLE_EQ(parse_precision("int8").bytes, 1 + 2.0 / 32);
  EXPECT_DOUBLE_EQ(parse_precision("int4:g64").bytes, 0.5 + 2.0 / 64);
  EXPECT_DOUBLE_EQ(parse_precision("bf16").bytes, 2);
  EXPECT_THROW(parse_precision("int3"), std::invalid_argument);
  EXPECT_THROW(parse_precision("int8:g0"), std::invalid_argument);
  EXPECT_THROW(parse_precision("int8:32"), std::invalid_argument);
}

TEST(Explore, RenderingsAgree) {
  ReportOptions o;
  o.contexts = {1024, 8192};
  std::vector<ModelReport> r{build_report(load_preset("embla-mini"), o), build_report(load_preset("nenya-mini"), o)};
  Json j = render_json(r, o);
  ASSERT_EQ(j["models"].size(), 2u);
  EXPECT_EQ(j["models"][0]["parameters"]["total"].get<double>(), double(r[0].params.total_all));
  EXPECT_EQ(j["models"][1]["FLOPs per token: decode"]["total"]["8K"].get<double>(), r[1].points[1].decode.total());
  std::string csv = render_csv(r);
  EXPECT_NE(csv.find("nenya-mini,parameters,total,,parameters," + std::to_string(r[1].params.total_all)), std::string::npos);
  std::string table = render_table(r, o);
  EXPECT_NE(table.find("embla-mini"), std::string::npos);
  for (auto& [name, svg] : render_charts(r)) {
    EXPECT_EQ(svg.rfind("<svg", 0), 0u) << name;
    EXPECT_NE(svg.find("</svg>"), std::string::npos) << name;
    EXPECT_NE(svg.find("nenya-mini"), std::string::npos) << name;
  }
}

}  // namespace
}  // namespace wren::explore
