// Tests for train/optim: Newton-Schulz, per-expert orthogonalisation, convergence on a toy
// problem, parameter groups, and bit-identical resume from saved optimiser state.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "train/optim.h"
#include "train/schedule.h"

namespace wren::train {
namespace {

std::string temp_path(const std::string& name) {
  return (std::filesystem::temp_directory_path() / ("wren_test_optim_" + name)).string();
}

void expect_near_orthogonal(const torch::Tensor& g) {
  torch::Tensor sv_in = torch::linalg_svdvals(g / g.norm());
  // The input is far from orthogonal, so the test can tell orthogonalisation from a copy.
  ASSERT_LT(sv_in.min().item<double>() / sv_in.max().item<double>(), 0.5);
  torch::Tensor x = newton_schulz(g, 5);
  ASSERT_EQ(x.sizes(), g.sizes());
  torch::Tensor sv = torch::linalg_svdvals(x);
  EXPECT_GE(sv.min().item<double>(), 0.6);
  EXPECT_LE(sv.max().item<double>(), 1.3);
  // Same singular vectors as g: X is close to U V^T.
  auto [u, s, vh] = torch::linalg_svd(g, false);
  torch::Tensor polar = torch::matmul(u, vh);
  double cos = (x * polar).sum().item<double>() / (x.norm().item<double>() * polar.norm().item<double>());
  EXPECT_GT(cos, 0.95);
}

TEST(TrainOptim, NewtonSchulzIsNearOrthogonalWideAndTall) {
  torch::manual_seed(1);
  expect_near_orthogonal(torch::randn({64, 32}));
  expect_near_orthogonal(torch::randn({32, 64}));
}

TEST(TrainOptim, NewtonSchulzStackIsPerExpert) {
  torch::manual_seed(2);
  // Slices at very different scales: one norm over the whole stack would shrink the small ones.
  torch::Tensor stack = torch::randn({4, 24, 16}) * torch::tensor({1.0f, 0.01f, 100.0f, 3.0f}).view({4, 1, 1});
  torch::Tensor x = newton_schulz(stack, 5);
  for (int e = 0; e < 4; ++e)
    EXPECT_TRUE(torch::allclose(x[e], newton_schulz(stack[e], 5), 1e-5, 1e-5)) << "expert " << e;
}

TEST(TrainOptim, MuonOnAStackEqualsMuonOnEachSlice) {
  torch::manual_seed(3);
  OptimSettings s;
  torch::Tensor w3 = torch::randn({3, 8, 12});
  torch::Tensor g3 = torch::randn({3, 8, 12});
  std::vector<torch::Tensor> w2;
  for (int e = 0; e < 3; ++e) w2.push_back(w3[e].clone());
  ParamGroup stacked{"muon_batched", OptimizerKind::muon, s.muon_batched, {"w"}, {w3}};
  ParamGroup sliced{"muon", OptimizerKind::muon, s.muon, {"w0", "w1", "w2"}, w2};
  Muon a({stacked}, s), b({sliced}, s);
  for (int step = 0; step < 3; ++step) {
    w3.mutable_grad() = g3 * (step + 1);
    for (int e = 0; e < 3; ++e) w2[size_t(e)].mutable_grad() = g3[e] * (step + 1);
    a.step();
    b.step();
  }
  for (int e = 0; e < 3; ++e) EXPECT_TRUE(torch::allclose(w3[e], w2[size_t(e)], 1e-5, 1e-6)) << "expert " << e;
  EXPECT_FALSE(torch::allclose(w3, torch::zeros_like(w3)));
}

// y = W x + b on a fixed least-squares problem: Muon for W, AdamW for b.
struct Toy {
  torch::Tensor x, y, w, b;
  explicit Toy(uint64_t seed) {
    torch::manual_seed(seed);
    x = torch::randn({256, 32});
    torch::Tensor w_true = torch::randn({16, 32}) / 6.0, b_true = torch::randn({16});
    y = torch::matmul(x, w_true.t()) + b_true;
    w = torch::zeros({16, 32}).requires_grad_();
    b = torch::zeros({16}).requires_grad_();
  }
  std::vector<NamedTensor> named() const {
    TensorInfo wi{"w", {16, 32}, TensorRole::matrix};
    TensorInfo bi{"b", {16}, TensorRole::vector};
    return {{wi, w}, {bi, b}};
  }
  torch::Tensor loss() const { return (torch::matmul(x, w.t()) + b - y).pow(2).mean(); }
  double backward() const {
    torch::Tensor l = loss();
    l.backward();
    return l.item<double>();
  }
};

TEST(TrainOptim, MuonAndAdamWReduceALeastSquaresLoss) {
  Toy toy(4);
  OptimSettings s;
  s.muon.lr = 0.02;
  s.adamw_no_decay.lr = 0.05;
  auto groups = make_groups(toy.named(), s);
  Muon muon(groups, s);
  AdamW adamw(groups, s);
  const double first = toy.loss().item<double>();
  double last = first;
  for (int i = 0; i < 100; ++i) {
    muon.zero_grad();
    adamw.zero_grad();
    last = toy.backward();
    muon.step();
    adamw.step();
  }
  EXPECT_LT(toy.loss().item<double>(), 0.05 * first) << "first loss " << first << ", last " << last;
}

TEST(TrainOptim, SaveLoadStepEqualsUninterruptedSteps) {
  OptimSettings s;
  s.muon.lr = 0.01;
  s.adamw_no_decay.lr = 0.01;
  s.muon.weight_decay = 0.1;
  auto lr_at = [](int step) { return 0.5 + 0.1 * step; };  // a changing schedule multiplier
  auto run = [&](Toy& toy, Muon& m, AdamW& a, int from, int to) {
    for (int i = from; i < to; ++i) {
      m.zero_grad();
      a.zero_grad();
      toy.backward();
      m.step(lr_at(i));
      a.step(lr_at(i));
    }
  };
  // Uninterrupted: 6 steps.
  Toy whole(5);
  auto gw = make_groups(whole.named(), s);
  Muon mw(gw, s);
  AdamW aw(gw, s);
  run(whole, mw, aw, 0, 6);
  // Interrupted: 3 steps, save, new parameters and optimisers from the files, 3 more steps.
  const std::string mp = temp_path("muon.pt"), ap = temp_path("adamw.pt");
  torch::Tensor w_saved, b_saved;
  {
    Toy first(5);
    auto g = make_groups(first.named(), s);
    Muon m(g, s);
    AdamW a(g, s);
    run(first, m, a, 0, 3);
    m.save(mp);
    a.save(ap);
    w_saved = first.w.detach().clone();
    b_saved = first.b.detach().clone();
  }
  auto restore = [&](Toy& toy) {  // the parameters as saved after step 3
    torch::NoGradGuard ng;
    toy.w.copy_(w_saved);
    toy.b.copy_(b_saved);
  };
  Toy resumed(5);
  restore(resumed);
  auto g = make_groups(resumed.named(), s);
  Muon m(g, s);
  AdamW a(g, s);
  m.load(mp);
  a.load(ap);
  EXPECT_EQ(a.state("b", "step").item<int64_t>(), 3);
  run(resumed, m, a, 3, 6);
  EXPECT_TRUE(torch::equal(resumed.w, whole.w));
  EXPECT_TRUE(torch::equal(resumed.b, whole.b));
  EXPECT_TRUE(torch::equal(m.state("w", "momentum"), mw.state("w", "momentum")));
  EXPECT_TRUE(torch::equal(a.state("b", "exp_avg_sq"), aw.state("b", "exp_avg_sq")));
  // Without the state the continuation differs, so the comparison above can fail.
  Toy fresh(5);
  restore(fresh);
  auto gf = make_groups(fresh.named(), s);
  Muon mf(gf, s);
  AdamW af(gf, s);
  run(fresh, mf, af, 3, 6);
  EXPECT_FALSE(torch::equal(fresh.w, whole.w));
  std::filesystem::remove(mp);
  std::filesystem::remove(ap);
}

TEST(TrainOptim, BadStateFilesAreErrorsNamingTheProblem) {
  OptimSettings s;
  Toy toy(6);
  auto g = make_groups(toy.named(), s);
  Muon m(g, s);
  AdamW a(g, s);
  EXPECT_THROW(m.load(temp_path("no_such_file.pt")), OptimStateError);
  const std::string ap = temp_path("adamw_only.pt");
  a.save(ap);
  try {
    m.load(ap);  // an AdamW file given to Muon
    ADD_FAILURE() << "expected OptimStateError";
  } catch (const OptimStateError& e) {
    EXPECT_NE(std::string(e.what()).find("optimizer"), std::string::npos) << e.what();
  }
  // The same kind but other parameters: a shape mismatch is named.
  torch::Tensor other = torch::zeros({16, 33}).requires_grad_();
  auto g2 = make_groups(std::vector<NamedTensor>{{TensorInfo{"w", {16, 33}, TensorRole::matrix}, other}}, s);
  Muon m2(g2, s);
  const std::string mp = temp_path("muon_shape.pt");
  m.save(mp);
  try {
    m2.load(mp);
    ADD_FAILURE() << "expected OptimStateError";
  } catch (const OptimStateError& e) {
    EXPECT_NE(std::string(e.what()).find("w.momentum"), std::string::npos) << e.what();
  }
  {
    std::ofstream f(mp, std::ios::binary | std::ios::trunc);
    f << "not a state file";
  }
  EXPECT_THROW(m.load(mp), OptimStateError);
  std::filesystem::remove(ap);
  std::filesystem::remove(mp);
}

TEST(TrainOptim, GroupsFollowTheWeightMapRoles) {
  auto info = [](std::string name, std::vector<int64_t> shape, TensorRole role, Component c) {
    TensorInfo t;
    t.name = std::move(name);
    t.shape = std::move(shape);
    t.role = role;
    t.component = c;
    return t;
  };
  std::vector<TensorInfo> infos = {
      info("embed", {50, 8}, TensorRole::lookup, Component::embedding),
      info("lm_head", {50, 8}, TensorRole::matrix, Component::lm_head),
      info("final_norm", {8}, TensorRole::norm, Component::norms),
      info("engram.tables", {97, 4}, TensorRole::lookup, Component::engram_tables),
      info("layers.0.attn.wq", {16, 8}, TensorRole::matrix, Component::mixer),
      info("layers.0.attn.conv_q", {16, 4}, TensorRole::conv, Component::mixer),
      info("layers.0.attn.a_log", {2}, TensorRole::vector, Component::mixer),
      info("layers.0.ffn.router", {6, 8}, TensorRole::matrix, Component::router),
      info("layers.0.ffn.balance_bias", {6}, TensorRole::buffer, Component::router),
      info("layers.0.ffn.experts.w_up", {6, 12, 8}, TensorRole::matrix, Component::routed_experts),
      info("layers.0.ffn.shared_gate", {1, 8}, TensorRole::matrix, Component::shared_experts),
      info("layers.0.engram.w_key", {4, 8, 16}, TensorRole::matrix, Component::engram_proj),
  };
  std::vector<NamedTensor> params;
  for (const TensorInfo& t : infos) params.push_back({t, torch::zeros(t.shape)});
  OptimSettings s;
  auto groups = make_groups(params, s);
  std::map<std::string, std::string> where;
  for (const ParamGroup& g : groups)
    for (const std::string& n : g.names) where[n] = g.name;
  EXPECT_EQ(where["embed"], "adamw_no_decay");
  EXPECT_EQ(where["lm_head"], "adamw_head");
  EXPECT_EQ(where["final_norm"], "adamw_no_decay");
  EXPECT_EQ(where["engram.tables"], "adamw_engram");
  EXPECT_EQ(where["layers.0.attn.wq"], "muon");
  EXPECT_EQ(where["layers.0.attn.conv_q"], "adamw_decay");
  EXPECT_EQ(where["layers.0.attn.a_log"], "adamw_no_decay");
  EXPECT_EQ(where["layers.0.ffn.router"], "adamw_no_decay");
  EXPECT_EQ(where.count("layers.0.ffn.balance_bias"), 0u);
  EXPECT_EQ(where["layers.0.ffn.experts.w_up"], "muon_batched");
  EXPECT_EQ(where["layers.0.ffn.shared_gate"], "adamw_no_decay");
  EXPECT_EQ(where["layers.0.engram.w_key"], "muon_batched");
  for (const ParamGroup& g : groups) {
    if (g.name == "adamw_engram") {
      EXPECT_DOUBLE_EQ(g.settings.lr, 5 * s.adamw_no_decay.lr);
      EXPECT_EQ(g.settings.weight_decay, 0.0);
    }
    EXPECT_EQ(g.kind, g.name.rfind("muon", 0) == 0 ? OptimizerKind::muon : OptimizerKind::adamw);
  }
  // A tensor whose shape is not its weight-map shape is an error.
  params[0].tensor = torch::zeros({50, 9});
  EXPECT_THROW(make_groups(params, s), std::runtime_error);
}

TEST(TrainSchedule, WarmupConstantThenSqrtDecayToTheFloor) {
  LrSchedule s{.total_steps = 1000, .warmup_steps = 100, .decay_fraction = 0.25, .floor = 0.01};
  EXPECT_EQ(s.decay_start(), 750);
  EXPECT_DOUBLE_EQ(s.multiplier(0), 0.01);    // (0 + 1) / 100
  EXPECT_DOUBLE_EQ(s.multiplier(49), 0.5);
  EXPECT_DOUBLE_EQ(s.multiplier(99), 1.0);
  EXPECT_DOUBLE_EQ(s.multiplier(100), 1.0);
  EXPECT_DOUBLE_EQ(s.multiplier(749), 1.0);
  EXPECT_DOUBLE_EQ(s.multiplier(750), 1.0);   // t = 0
  // t = 1/4 of the decay: 0.01 + 0.99 (1 - sqrt(0.25)) = 0.505
  const int64_t quarter = 750 + int64_t(0.25 * 249);
  EXPECT_NEAR(s.multiplier(quarter), 0.01 + 0.99 * (1 - std::sqrt((quarter - 750) / 249.0)), 1e-12);
  EXPECT_NEAR(s.multiplier(750 + 249 / 4), 0.505, 0.01);
  EXPECT_DOUBLE_EQ(s.multiplier(999), 0.01);  // the last step is at the floor
  EXPECT_DOUBLE_EQ(s.multiplier(5000), 0.01);
  double prev = 2;
  for (int64_t t = 750; t < 1000; ++t) {  // the decay never rises
    EXPECT_LE(s.multiplier(t), prev);
    prev = s.multiplier(t);
  }
  // Nenya's stages: 15.17B decay tokens, 0.193 after 10.07B of them.
  LrSchedule nenya{.total_steps = 60270, .warmup_steps = 2000, .decay_fraction = 15170.0 / 60270, .floor = 0.01};
  EXPECT_NEAR(nenya.multiplier(nenya.decay_start() + 10070), 0.193, 0.001);
}

TEST(TrainSchedule, BadSchedulesAreErrors) {
  EXPECT_THROW((LrSchedule{.total_steps = 0}.multiplier(0)), ScheduleError);
  EXPECT_THROW((LrSchedule{.total_steps = 10, .warmup_steps = 9, .decay_fraction = 0.5}.multiplier(0)), ScheduleError);
  EXPECT_THROW((LrSchedule{.total_steps = 10, .warmup_steps = 1, .decay_fraction = 1.5}.multiplier(0)), ScheduleError);
  EXPECT_THROW((LrSchedule{.total_steps = 10, .warmup_steps = 1, .decay_fraction = 0.2, .floor = -1}.multiplier(0)), ScheduleError);
  EXPECT_THROW((LrSchedule{.total_steps = 10}.multiplier(-1)), ScheduleError);
  // No warmup and no decay: constant.
  EXPECT_DOUBLE_EQ((LrSchedule{.total_steps = 10, .warmup_steps = 0, .decay_fraction = 0}.multiplier(9)), 1.0);
}

}  // namespace
}  // namespace wren::train
