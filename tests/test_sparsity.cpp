// The sparsity probe (model/sparsity_probe.h) and `wren sparsity`: its counts against plain
// recomputations on a random embla-mini, routing counts against Session::last_experts(), no
// effect on the logits, and the command's output and errors.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <sys/wait.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>

#include "config/parse.h"
#include "model/attention.h"
#include "model/ffn.h"
#include "model/sparsity_probe.h"
#include "runtime/session.h"
#include "test_util.h"

namespace wren {
namespace {

using testing_util::normal;
using testing_util::random_tokens;

// y = W x in double, W an f32 matrix view.
std::vector<double> times(const kernels::MatrixView& w, const float* x) {
  std::vector<double> y(size_t(w.rows));
  for (int64_t r = 0; r < w.rows; ++r) {
    const float* row = w.f32_row(r);
    for (int64_t i = 0; i < w.cols; ++i) y[size_t(r)] += double(row[i]) * x[i];
  }
  return y;
}

// Per-head RMSNorm with gain g (QK-norm "head", no unit offset): x / sqrt(mean x^2 + eps) * g.
void head_norm(std::vector<double>& x, const Vec& g, int heads, int dh, double eps) {
  for (int h = 0; h < heads; ++h) {
    double ms = 0;
    for (int i = 0; i < dh; ++i) ms += x[size_t(h * dh + i)] * x[size_t(h * dh + i)];
    const double inv = 1.0 / std::sqrt(ms / dh + eps);
    for (int i = 0; i < dh; ++i) x[size_t(h * dh + i)] *= inv * g[size_t(i)];
  }
}

// Keys in all-zero groups of `group`, counted key by key (the probe counts group by group).
int64_t skippable(const std::vector<bool>& needed, int group) {
  int64_t n = int64_t(needed.size()), count = 0;
  for (int64_t j = 0; j < n; ++j) {
    const int64_t first = j / group * group, last = std::min(n, first + group);
    bool all_zero = true;
    for (int64_t i = first; i < last; ++i) all_zero = all_zero && !needed[size_t(i)];
    count += all_zero;
  }
  return count;
}

TEST(Sparsity, GroupsCountTheLastPartialGroup) {
  // Groups of 4 over 10 keys: [0..3] needed at 2, [4..7] all zero, [8..9] all zero (partial).
  const std::vector<float> w{0, 0, 0.5f, 0, 0, 0, 0, 0, 0, 0};
  EXPECT_EQ(keys_in_unneeded_groups(w.data(), 10, 4), 6);
  EXPECT_EQ(keys_in_unneeded_groups(w.data(), 10, 1), 9);
  EXPECT_EQ(keys_in_unneeded_groups(w.data(), 10, 16), 0);
}

// The probe's zero weights and V-skip counts for one ReLU^2 layer over a window of random
// inputs, against weights recomputed in double from the layer's f32 matrices.
TEST(Sparsity, ZeroWeightsMatchAPlainRecount) {
  const ModelConfig c = load_preset("embla-mini");
  auto model = testing_util::random_model(c, 3);
  const int layer = 1;
  const MixerSpec& m = c.mixer(layer);
  ASSERT_EQ(m.kind, MixerKind::relu2_attention);
  ASSERT_EQ(m.qk_norm, QkNorm::head);
  const AttentionWeights& w = model->layers[size_t(layer)].attn;
  const int T = 37, dh = m.head_dim, group = m.n_heads / m.n_kv_heads, d = c.d_model;
  // One probe per V-skip group size; small groups make all-zero groups common enough to count.
  const std::vector<int> sizes{1, 2, 3, 8};
  std::vector<SparsityProbe> probes;
  for (int g : sizes) {
    probes.emplace_back(c, g);
    probes.back().set_skip_position(T - 1);
  }
  KvCache cache;
  cache.init(m.n_kv_heads, dh, T, false);
  AttentionScratch s;
  s.reserve(c, T);
  std::vector<float> out(static_cast<size_t>(d));
  const std::vector<float> xs = normal(size_t(T * d), 1.0f, 11);
  std::vector<std::vector<double>> keys;
  int64_t zeros = 0, near_zero = 0, weights = 0;
  std::vector<int64_t> head_zeros(size_t(m.n_heads));
  std::vector<std::vector<bool>> last_needed(size_t(m.n_heads));  // the last query's, per head
  for (int t = 0; t < T; ++t) {
    const float* x = xs.data() + t * d;
    append_kv({w, m, c, x, t, s, nullptr}, cache);
    for (SparsityProbe& probe : probes)
      relu2_attention({w, m, c, x, t, s, nullptr}, cache, {}, out.data(), &probe.layers[size_t(layer)].attention);
    std::vector<double> q = times(w.wq, x), k = times(w.wk, x);
    head_norm(q, w.q_norm, m.n_heads, dh, c.norm.eps);
    head_norm(k, w.k_norm, m.n_kv_heads, dh, c.norm.eps);
    keys.push_back(k);
    for (int h = 0; h < m.n_heads; ++h) {
      std::vector<bool> needed(size_t(t + 1));
      for (int j = 0; j <= t; ++j) {
        double score = 0;
        for (int i = 0; i < dh; ++i) score += q[size_t(h * dh + i)] * keys[size_t(j)][size_t(h / group * dh + i)];
        score /= std::sqrt(double(dh));
        const double wj = score > 0 ? score * score : 0.0;  // w_j = max(s_j, 0)^2
        needed[size_t(j)] = wj > 0;
        zeros += wj == 0, head_zeros[size_t(h)] += wj == 0, near_zero += std::fabs(score) < 1e-5;
        ++weights;
      }
      if (t == T - 1) last_needed[size_t(h)] = needed;
    }
  }
  ASSERT_EQ(near_zero, 0) << "a score within rounding of 0: pick another seed";
  EXPECT_GT(zeros, 0);
  EXPECT_LT(zeros, weights);
  for (size_t i = 0; i < sizes.size(); ++i) {
    SCOPED_TRACE("skip group " + std::to_string(sizes[i]));
    const Relu2Probe& p = probes[i].layers[size_t(layer)].attention;
    EXPECT_EQ(p.weights, weights);
    EXPECT_EQ(p.zeros, zeros);
    EXPECT_EQ(p.head_zeros, head_zeros);
    EXPECT_EQ(p.skip_queries, 1);
    EXPECT_EQ(p.skip_keys, T);
    // A KV head's V row is needed when any query head of its group weights it.
    for (int g = 0; g < m.n_kv_heads; ++g) {
      std::vector<bool> kv_needed(static_cast<size_t>(T));
      for (int h = g * group; h < (g + 1) * group; ++h) {
        EXPECT_EQ(p.head_skipped[size_t(h)], skippable(last_needed[size_t(h)], sizes[i])) << "head " << h;
        for (int j = 0; j < T; ++j) kv_needed[size_t(j)] = kv_needed[size_t(j)] || last_needed[size_t(h)][size_t(j)];
      }
      EXPECT_EQ(p.kv_skipped[size_t(g)], skippable(kv_needed, sizes[i])) << "KV head " << g;
    }
  }
  // The small groups really did skip, so the counts above were tested on something.
  const Relu2Probe& two = probes[1].layers[size_t(layer)].attention;
  EXPECT_GT(two.kv_skipped[0] + two.kv_skipped[1], 0);
  EXPECT_GT(two.head_skipped[0] + two.head_skipped[1] + two.head_skipped[2] + two.head_skipped[3],
            two.kv_skipped[0] + two.kv_skipped[1]);
}

// Dead and fired neurons of the dense ReLU^2 FFN (layer 0), against u = W_up x recomputed.
TEST(Sparsity, DeadNeuronsMatchADirectRecount) {
  const ModelConfig c = load_preset("embla-mini");
  auto model = testing_util::random_model(c, 4);
  const FfnSpec& f = c.ffn(0);
  ASSERT_EQ(f.kind, FfnKind::dense);
  ASSERT_EQ(f.activation, Activation::relu2);
  const FfnWeights& w = model->layers[0].dense;
  SparsityProbe probe(c);
  FfnProbe& p = probe.layers[0].ffn;
  FfnScratch s;
  s.reserve(c);
  const int T = 5, d = c.d_model;
  std::vector<float> xs = normal(size_t(T * d), 1.0f, 21);
  std::vector<float> y(static_cast<size_t>(d));
  std::vector<int64_t> fires(size_t(f.hidden));
  int64_t fired = 0, near_zero = 0;
  for (int t = 0; t < T; ++t) {
    dense_ffn(w, {f, xs.data() + t * d, y.data(), s, nullptr, &p});
    const std::vector<double> u = times(w.w_up, xs.data() + t * d);
    for (int r = 0; r < f.hidden; ++r) {
      fires[size_t(r)] += u[size_t(r)] > 0, fired += u[size_t(r)] > 0;
      near_zero += std::fabs(u[size_t(r)]) < 1e-5;
    }
  }
  ASSERT_EQ(near_zero, 0) << "a pre-activation within rounding of 0: pick another seed";
  int64_t dead = 0;
  for (int64_t v : fires) dead += v == 0;
  EXPECT_EQ(p.dense.fires, fires);
  EXPECT_EQ(p.dense.tokens, T);
  EXPECT_EQ(p.dense.fired, fired);
  EXPECT_EQ(p.dense.dead(), dead);
  EXPECT_GT(dead, 0) << "5 tokens should leave some of 96 neurons unfired";
  EXPECT_LT(dead, f.hidden);
}

// Per MoE layer: the probe's expert counts are those of Session::last_experts() summed over
// the tokens, and add up to tokens x top_k; each routed expert's neuron counter ran as often.
TEST(Sparsity, ExpertCountsAreTheRoutingDecisions) {
  const ModelConfig c = load_preset("embla-mini");
  auto model = testing_util::random_model(c, 5);
  SparsityProbe probe(c);
  Session session(model, {.context = 64, .probe = &probe});
  const auto tokens = random_tokens(30, c.vocab_size, 6);
  std::vector<float> logits(size_t(session.vocab_rows()));
  std::vector<std::vector<int64_t>> counted(size_t(c.n_layers()), std::vector<int64_t>(64));
  for (int32_t t : tokens) {
    session.decode(t, logits.data());
    for (int i = 0; i < c.n_layers(); ++i)
      for (int32_t e : session.last_experts()[size_t(i)]) ++counted[size_t(i)][size_t(e)];
  }
  int moe_layers = 0;
  for (int i = 0; i < c.n_layers(); ++i) {
    const FfnSpec& f = c.ffn(i);
    const FfnProbe& p = probe.layers[size_t(i)].ffn;
    if (f.kind != FfnKind::moe) continue;
    ++moe_layers;
    int64_t sum = 0;
    for (int e = 0; e < f.n_experts; ++e) {
      EXPECT_EQ(p.expert_tokens[size_t(e)], counted[size_t(i)][size_t(e)]) << "layer " << i << " expert " << e;
      EXPECT_EQ(p.experts[size_t(e)].tokens, p.expert_tokens[size_t(e)]);
      sum += p.expert_tokens[size_t(e)];
    }
    EXPECT_EQ(sum, int64_t(tokens.size()) * f.top_k) << "layer " << i;
    EXPECT_EQ(p.tokens, int64_t(tokens.size()));
    EXPECT_EQ(p.shared.tokens, int64_t(tokens.size()));
  }
  EXPECT_EQ(moe_layers, 7);
  // Every full layer weighed every key before it: heads x (1 + 2 + ... + 30).
  for (int i = 0; i < c.n_layers(); ++i) {
    if (c.mixer(i).kind != MixerKind::relu2_attention) continue;
    EXPECT_EQ(probe.layers[size_t(i)].attention.weights, int64_t(c.mixer(i).n_heads) * 30 * 31 / 2) << "layer " << i;
  }
}

TEST(Sparsity, AttachingTheProbeLeavesLogitsBitIdentical) {
  const ModelConfig c = load_preset("embla-mini");
  auto model = testing_util::random_model(c, 7);
  SparsityProbe probe(c);
  probe.set_skip_position(20);
  // The probe counts per token, so its session's prompt attends row by row: so must the other.
  Session plain(model, {.context = 64, .block_attention = false}), probed(model, {.context = 64, .probe = &probe});
  const auto tokens = random_tokens(24, c.vocab_size, 8);
  std::vector<float> a(size_t(plain.vocab_rows())), b(a.size());
  plain.prefill(std::span(tokens.data(), 10), a.data());
  probed.prefill(std::span(tokens.data(), 10), b.data());
  EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)), 0);
  for (size_t t = 10; t < tokens.size(); ++t) {
    plain.decode(tokens[t], a.data());
    probed.decode(tokens[t], b.data());
    ASSERT_EQ(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)), 0) << "token " << t;
  }
  EXPECT_GT(probe.layers[1].attention.skip_queries, 0) << "the probe was not filled";
}

TEST(Sparsity, ProbeOfAnotherShapeIsRejected) {
  ModelConfig c = load_preset("embla-mini");
  auto model = testing_util::random_model(c, 1);
  ModelConfig other = c;
  other.ffns[1].spec.n_experts = 4;
  SparsityProbe wrong(other);
  EXPECT_THROW(Session(model, {.probe = &wrong}), std::invalid_argument);
  EXPECT_THROW(SparsityProbe(c, 0), std::invalid_argument);
}

// ---- wren sparsity -------------------------------------------------------------------

struct Cli {
  int status;
  std::string output;
};

Cli wren(const testing_util::TempDir& dir, const std::string& args) {
  const std::string log = dir / "cli.log";
  const int st = std::system((std::string(WREN_BINARY) + " " + args + " >" + log + " 2>&1").c_str());
  std::ifstream in(log);
  std::stringstream text;
  text << in.rdbuf();
  return {WIFEXITED(st) ? WEXITSTATUS(st) : -1, text.str()};
}

struct CliModel {
  testing_util::TempDir dir;
  std::string model = dir / "m", text = dir / "held_out.txt";  // about 900 byte tokens
  CliModel() {
    Cli init = wren(dir, "init embla-mini -o " + model + " --seed 2 --dtype f32");
    EXPECT_EQ(init.status, 0) << init.output;
    std::ofstream out(text);
    for (int i = 0; i < 20; ++i) out << "The hound was heard upon the moor, line " << i << ".\n";
  }
};

TEST(Sparsity, CommandReportsEveryLayerAndAgreesWithPerplexity) {
  CliModel m;
  Cli json = wren(m.dir, "sparsity -m " + m.model + " " + m.text + " -c 64 --max-windows 3 --format json");
  ASSERT_EQ(json.status, 0) << json.output;
  const auto j = nlohmann::json::parse(json.output.substr(json.output.find("\n{") + 1));
  EXPECT_EQ(j["windows"], 3);
  EXPECT_EQ(j["context"], 64);
  ASSERT_EQ(j["layers"].size(), 8u);
  const auto& full = j["layers"][1]["attention"];
  EXPECT_EQ(full["weights"], 3 * 4 * 64 * 65 / 2) << "every position of every window, last included";
  EXPECT_EQ(full["v_skip_queries"], 3);
  double share = 0;
  for (const auto& e : j["layers"][1]["ffn"]["experts"]) share += e["share_vs_fair"].get<double>();
  EXPECT_NEAR(share, 8.0, 1e-9) << "shares over the fair share average to 1";
  // The extra last-token run changes no score: bits per byte as wren perplexity has it.
  Cli ppl = wren(m.dir, "perplexity -m " + m.model + " " + m.text + " -c 64 --windows 3");
  ASSERT_EQ(ppl.status, 0) << ppl.output;
  char expect[64];
  std::snprintf(expect, sizeof expect, "bits per byte %.4f", j["bits_per_byte"].get<double>());
  EXPECT_NE(ppl.output.find(expect), std::string::npos) << ppl.output;
  Cli table = wren(m.dir, "sparsity -m " + m.model + " " + m.text + " -c 64 --max-windows 1");
  ASSERT_EQ(table.status, 0) << table.output;
  EXPECT_NE(table.output.find("relu2_attention"), std::string::npos) << table.output;
  EXPECT_NE(table.output.find("\nall "), std::string::npos) << table.output;
}

TEST(Sparsity, CommandErrorsNameTheProblem) {
  CliModel m;
  Cli r = wren(m.dir, "sparsity -m " + m.model + " " + m.text + " -c 2048");
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.output.find("--context 2048"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("context_length 1024"), std::string::npos) << r.output;
  r = wren(m.dir, "sparsity -m " + m.model + " " + m.text + " " + (m.dir / "no_such.txt") + " -c 64");
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.output.find("no_such.txt: cannot open"), std::string::npos) << r.output;
  r = wren(m.dir, "sparsity -m " + m.model + " " + m.text + " -c 64 --skip-group 0");
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.output.find("--skip-group 0"), std::string::npos) << r.output;
  r = wren(m.dir, "sparsity -m " + m.model + " " + m.text + " -c 1000");
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.output.find("fewer than one window of 1000"), std::string::npos) << r.output;
  r = wren(m.dir, "sparsity -m " + m.model + " " + m.text + " --format xml");
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.output.find("xml"), std::string::npos) << r.output;
}

}  // namespace
}  // namespace wren
