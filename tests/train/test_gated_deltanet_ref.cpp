// The training reference of Gated DeltaNet (train/gated_deltanet): the chunked WY/UT form
// against the token-by-token recurrence (outputs and gradients), the reference against the
// engine's per-token gdn_decode (model/gated_deltanet) on the same random weights, document
// boundaries resetting state and convs, and finite gradients even where decays underflow.
//
// Weights are drawn for exactly the tensors the weight map names for layer 0 and bound through
// gdn_slots, so the test also checks that GdnParams follows the map's names and shapes.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>
#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include "config/parse.h"
#include "config/weight_map.h"
#include "model/gated_deltanet.h"
#include "train/gated_deltanet.h"

namespace wren {
namespace {

// gdn2 with grouped heads (2 q/k heads serving 4 value heads), d_v != d_k, low-rank gates, a
// unit-offset output norm; plain gdn with its defaults.
const char* kGdn2 = R"({"name": "gdn2-tiny", "d_model": 24, "vocab_size": 64, "context_length": 512,
  "norm": {"eps": 1e-5, "unit_offset": true},
  "mixers": {"g": {"kind": "gdn2", "n_heads": 2, "n_v_heads": 4, "head_dim": 8, "v_head_dim": 6,
                   "gate_rank": 5, "out_gate_rank": 3, "output_gate": true}},
  "ffns": {"f": {"kind": "dense", "activation": "swiglu", "hidden": 32}},
  "layers": [{"mixer": "g", "ffn": "f"}]})";

const char* kGdn = R"({"name": "gdn-tiny", "d_model": 24, "vocab_size": 64, "context_length": 512,
  "mixers": {"g": {"kind": "gdn", "n_heads": 3, "head_dim": 8, "v_head_dim": 10, "conv_kernel": 3,
                   "output_gate": true}},
  "ffns": {"f": {"kind": "dense", "activation": "swiglu", "hidden": 32}},
  "layers": [{"mixer": "g", "ffn": "f"}]})";

constexpr int32_t kEot = 1;

ModelConfig config_from(const char* json) { return parse_model_config(Json::parse(json), "test config"); }

// Random layer-0 GDN tensors as the weight map names them, bound to GdnParams. dt =
// softplus(decay_bias) log-uniform in [dt_lo, dt_hi], A ~ U(1, 16) (init_rule.cpp's ranges by
// default); larger gains than the init so the state, gates and convs all matter.
struct Layer {
  ModelConfig c;
  train::GdnParams p;
  std::vector<torch::Tensor> all;
};

Layer make_layer(const char* json, uint64_t seed, double dt_lo = 1e-3, double dt_hi = 0.1) {
  Layer L;
  L.c = config_from(json);
  torch::manual_seed(seed);
  std::map<std::string, torch::Tensor*> slots;
  train::gdn_slots(slots, L.p);
  for (const TensorInfo& t : build_weight_map(L.c).tensors) {
    const std::string prefix = "layers.0.attn.";
    if (t.name.rfind(prefix, 0) != 0) continue;
    const std::string n = t.name.substr(prefix.size());
    const double cols = double(t.shape.back());
    torch::Tensor x;
    if (n == "a_log") {
      x = torch::log(1.0 + 15.0 * torch::rand(t.shape));
    } else if (n == "decay_bias") {  // softplus^-1(dt) = dt + log(1 - e^-dt)
      torch::Tensor dt = torch::exp(std::log(dt_lo) + (std::log(dt_hi) - std::log(dt_lo)) * torch::rand(t.shape));
      x = dt + torch::log(-torch::expm1(-dt));
    } else if (n == "o_norm") {
      x = 0.5 * torch::rand(t.shape);
    } else if (n.rfind("conv_", 0) == 0) {
      x = 0.6 * (2 * torch::rand(t.shape) - 1);
    } else if (n.rfind("w_decay", 0) == 0) {
      x = 0.5 * torch::randn(t.shape) / std::sqrt(cols);
    } else {
      x = 1.5 * torch::randn(t.shape) / std::sqrt(cols);
    }
    auto it = slots.find("attn." + n);
    if (it == slots.end()) throw std::runtime_error("no GdnParams slot for " + t.name);
    *it->second = x.contiguous();
    L.all.push_back(*it->second);
  }
  return L;
}

const MixerSpec& mixer(const Layer& L) { return L.c.mixer(0); }

// tokens [B, T] with end-of-text at the given positions of each row (never elsewhere).
train::Layout layout(int64_t B, int64_t T, const std::vector<std::vector<int64_t>>& eots) {
  torch::Tensor tokens = torch::randint(2, 64, {B, T}, torch::kInt64);
  for (int64_t b = 0; b < B && b < int64_t(eots.size()); ++b)
    for (int64_t t : eots[size_t(b)]) tokens[b][t] = kEot;
  return train::make_layout(tokens, kEot);
}

float max_abs(const torch::Tensor& a) { return a.abs().max().item<float>(); }
float max_diff(const torch::Tensor& a, const torch::Tensor& b) { return max_abs(a - b); }

// ---- 1. Chunked equals recurrent ------------------------------------------------------------

// T = 150 is no multiple of the chunk (16 / 64 / 7); documents end mid-chunk, at a chunk's
// last token (row 1: token 63 ends a document, 64 starts a chunk and a document) and at 0.
void chunked_equals_recurrent(const char* json) {
  Layer L = make_layer(json, 11);
  const train::Layout l = layout(2, 150, {{40, 101}, {0, 63, 79, 80}});
  torch::Tensor xn = torch::randn({2, 150, L.c.d_model});
  torch::NoGradGuard no_grad;
  torch::Tensor ref = train::gated_deltanet_recurrent(L.p, mixer(L), L.c, l, xn);
  ASSERT_EQ(ref.sizes(), xn.sizes());
  ASSERT_GT(max_abs(ref), 0.1f) << "outputs trivially small";
  const float d_default = max_diff(train::gated_deltanet(L.p, mixer(L), L.c, l, xn), ref);
  EXPECT_LT(d_default, 1e-5f) << "chunk " << train::gdn_chunk_length(mixer(L));
  std::printf("  max |y| %.3g; chunk %lld vs recurrent: %.3g", max_abs(ref),
              (long long)train::gdn_chunk_length(mixer(L)), d_default);
  for (int64_t chunk : {1, 7, 64}) {
    const float diff = max_diff(train::gated_deltanet_chunked(L.p, mixer(L), L.c, l, xn, chunk), ref);
    EXPECT_LT(diff, 1e-5f) << "chunk " << chunk;
    std::printf(", chunk %lld: %.3g", (long long)chunk, diff);
  }
  std::printf("\n");
}

TEST(TrainGdn, ChunkedEqualsRecurrentGdn2) { chunked_equals_recurrent(kGdn2); }
TEST(TrainGdn, ChunkedEqualsRecurrentGdn) { chunked_equals_recurrent(kGdn); }

// Fast decays (dt up to 20, A up to 16: g down to about -320 per token) make e^{gamma} underflow
// to 0 inside a chunk; the chunked form must stay finite and equal the recurrence, gradients too.
void fast_decay(const char* json) {
  Layer L = make_layer(json, 5, 1.0, 20.0);
  const train::Layout l = layout(2, 70, {{30}, {}});
  torch::Tensor xn = torch::randn({2, 70, L.c.d_model}, torch::requires_grad());
  torch::Tensor y = train::gated_deltanet(L.p, mixer(L), L.c, l, xn);
  torch::Tensor ref = train::gated_deltanet_recurrent(L.p, mixer(L), L.c, l, xn);
  EXPECT_TRUE(torch::isfinite(y).all().item<bool>());
  EXPECT_LT(max_diff(y, ref), 1e-5f);
  torch::Tensor r = torch::randn_like(y);
  torch::Tensor gx = torch::autograd::grad({(y * r).sum()}, {xn})[0];
  torch::Tensor gref = torch::autograd::grad({(ref * r).sum()}, {xn})[0];
  EXPECT_TRUE(torch::isfinite(gx).all().item<bool>());
  EXPECT_LT(max_diff(gx, gref), 1e-4f * std::max(1.0f, max_abs(gref)));
}

TEST(TrainGdn, FastDecayStaysFiniteGdn2) { fast_decay(kGdn2); }
TEST(TrainGdn, FastDecayStaysFiniteGdn) { fast_decay(kGdn); }

// ---- 2. The reference equals the engine ---------------------------------------------------

// The engine's view of the same tensors (they stay alive in L).
GdnWeights engine_weights(const train::GdnParams& p) {
  auto mat = [](const torch::Tensor& t) {
    return t.defined() ? MatrixView::f32(t.data_ptr<float>(), t.size(0), t.size(1)) : MatrixView{};
  };
  auto vec = [](const torch::Tensor& t) {
    return t.defined() ? Vec(t.data_ptr<float>(), t.data_ptr<float>() + t.numel()) : Vec{};
  };
  GdnWeights w;
  w.wq = mat(p.wq), w.wk = mat(p.wk), w.wv = mat(p.wv);
  w.w_decay = mat(p.w_decay), w.w_decay_a = mat(p.w_decay_a), w.w_decay_b = mat(p.w_decay_b);
  w.w_erase = mat(p.w_erase), w.w_erase_a = mat(p.w_erase_a), w.w_erase_b = mat(p.w_erase_b);
  w.w_write = mat(p.w_write), w.w_write_a = mat(p.w_write_a), w.w_write_b = mat(p.w_write_b);
  w.w_beta = mat(p.w_beta);
  w.wg = mat(p.wg), w.wg_a = mat(p.wg_a), w.wg_b = mat(p.wg_b);
  w.wo = mat(p.wo);
  w.conv_q = vec(p.conv_q), w.conv_k = vec(p.conv_k), w.conv_v = vec(p.conv_v);
  w.decay_bias = vec(p.decay_bias), w.a_log = vec(p.a_log), w.o_norm = vec(p.o_norm);
  return w;
}

// Each row decoded token by token by gdn_decode, the state reset at each document's first
// token (as a fresh session would start it), against the chunked and recurrent references.
void engine_agrees(const char* json) {
  Layer L = make_layer(json, 23);
  const MixerSpec& m = mixer(L);
  const int64_t B = 2, T = 90, d = L.c.d_model;
  const train::Layout l = layout(B, T, {{17, 50}, {}});
  torch::Tensor xn = torch::randn({B, T, d});
  torch::Tensor y, y_rec;
  {
    torch::NoGradGuard no_grad;
    y = train::gated_deltanet(L.p, m, L.c, l, xn);
    y_rec = train::gated_deltanet_recurrent(L.p, m, L.c, l, xn);
  }
  ASSERT_GT(max_abs(y), 0.1f) << "outputs trivially small";
  const GdnWeights w = engine_weights(L.p);
  GdnScratch scratch;
  scratch.reserve(m, int(d), 1);
  torch::Tensor engine = torch::zeros({B, T, d});
  for (int64_t b = 0; b < B; ++b) {
    GdnState state;
    state.init(m);
    for (int64_t t = 0; t < T; ++t) {
      if (t > 0 && l.pos[b][t].item<int64_t>() == 0) state.reset();
      torch::Tensor x = xn[b][t].contiguous();
      gdn_decode(w, m, L.c, x.data_ptr<float>(), state, scratch, engine[b][t].data_ptr<float>(), nullptr);
    }
  }
  // f32 in both, summed in different orders over d <= 24 and T <= 90 steps; outputs O(1).
  EXPECT_LT(max_diff(y, engine), 1e-4f);
  EXPECT_LT(max_diff(y_rec, engine), 1e-4f);
  std::printf("  max |y| %.3g; engine vs chunked %.3g, vs recurrent %.3g\n", max_abs(y), max_diff(y, engine),
              max_diff(y_rec, engine));
}

TEST(TrainGdn, EngineAgreesGdn2) { engine_agrees(kGdn2); }
TEST(TrainGdn, EngineAgreesGdn) { engine_agrees(kGdn); }

// ---- 3. A document boundary resets ----------------------------------------------------------

// Row: document 1 is tokens [0, 37], document 2 is [38, 100). Each equals its own run alone;
// without the boundary, document 2 comes out different (so the reset is what makes it equal).
void boundary_resets(const char* json) {
  Layer L = make_layer(json, 31);
  const MixerSpec& m = mixer(L);
  const int64_t T = 100, cut = 38;
  torch::Tensor xn = torch::randn({1, T, L.c.d_model});
  const train::Layout packed = layout(1, T, {{cut - 1}});
  torch::NoGradGuard no_grad;
  torch::Tensor y = train::gated_deltanet(L.p, m, L.c, packed, xn);
  torch::Tensor first = train::gated_deltanet(L.p, m, L.c, layout(1, cut, {{}}), xn.narrow(1, 0, cut));
  torch::Tensor second = train::gated_deltanet(L.p, m, L.c, layout(1, T - cut, {{}}), xn.narrow(1, cut, T - cut));
  EXPECT_LT(max_diff(y.narrow(1, 0, cut), first), 1e-5f);
  EXPECT_LT(max_diff(y.narrow(1, cut, T - cut), second), 1e-5f);
  torch::Tensor joined = train::gated_deltanet(L.p, m, L.c, layout(1, T, {{}}), xn);
  EXPECT_GT(max_diff(joined.narrow(1, cut, T - cut), second), 1e-3f);
}

TEST(TrainGdn, BoundaryResetsGdn2) { boundary_resets(kGdn2); }
TEST(TrainGdn, BoundaryResetsGdn) { boundary_resets(kGdn); }

// ---- 4. Gradients -------------------------------------------------------------------------

// Backward through the chunked form reaches every weight and the input, finite and nonzero,
// and equals the gradient of the recurrence.
void gradients_flow(const char* json) {
  Layer L = make_layer(json, 47);
  const MixerSpec& m = mixer(L);
  for (torch::Tensor& t : L.all) t.requires_grad_(true);
  const train::Layout l = layout(2, 75, {{20}, {70}});
  torch::Tensor xn = torch::randn({2, 75, L.c.d_model}, torch::requires_grad());
  std::vector<torch::Tensor> inputs = L.all;
  inputs.push_back(xn);
  torch::Tensor r = torch::randn({2, 75, L.c.d_model});
  auto grads = torch::autograd::grad({(train::gated_deltanet(L.p, m, L.c, l, xn) * r).sum()}, inputs);
  auto refs = torch::autograd::grad({(train::gated_deltanet_recurrent(L.p, m, L.c, l, xn) * r).sum()}, inputs);
  ASSERT_EQ(grads.size(), inputs.size());
  for (size_t i = 0; i < grads.size(); ++i) {
    ASSERT_TRUE(grads[i].defined()) << "tensor " << i;
    EXPECT_TRUE(torch::isfinite(grads[i]).all().item<bool>()) << "tensor " << i;
    EXPECT_GT(max_abs(grads[i]), 0.0f) << "tensor " << i << " gets no gradient";
    EXPECT_LT(max_diff(grads[i], refs[i]), 1e-4f * std::max(1.0f, max_abs(refs[i]))) << "tensor " << i;
  }
}

TEST(TrainGdn, GradientsFlowGdn2) { gradients_flow(kGdn2); }
TEST(TrainGdn, GradientsFlowGdn) { gradients_flow(kGdn); }

// Wrong shapes are named, not crashed on.
TEST(TrainGdn, RejectsBadShapes) {
  Layer L = make_layer(kGdn2, 3);
  const train::Layout l = layout(1, 10, {{}});
  L.p.conv_v = torch::zeros({5, 4});
  try {
    train::gated_deltanet(L.p, mixer(L), L.c, l, torch::randn({1, 10, L.c.d_model}));
    FAIL() << "expected an exception";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("attn.conv_v"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace wren
