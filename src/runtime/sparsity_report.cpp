// The statistics of runtime/sparsity_report.h, from the probe's plain counts.
#include "runtime/sparsity_report.h"

#include <algorithm>
#include <cstdio>
#include <vector>

namespace wren {

namespace {

using Json = nlohmann::ordered_json;

double ratio(double num, double den) { return den > 0 ? num / den : 0.0; }

// Sums over ReLU^2 neuron blocks: neurons, dead ones, and fired / run neuron-token pairs.
struct NeuronTotals {
  int64_t neurons = 0, dead = 0;
  double fired = 0, run = 0;
  void add(const NeuronProbe& p) {
    neurons += p.width(), dead += p.dead();
    fired += double(p.fired), run += double(p.tokens) * double(p.width());
  }
  void add(const NeuronTotals& t) { neurons += t.neurons, dead += t.dead, fired += t.fired, run += t.run; }
  bool empty() const { return neurons == 0; }
  double dead_fraction() const { return ratio(double(dead), double(neurons)); }
  double fired_fraction() const { return ratio(fired, run); }
  Json json() const {
    return {{"neurons", neurons}, {"dead", dead}, {"dead_fraction", dead_fraction()}, {"fired_per_token", fired_fraction()}};
  }
};

// V-skip and zero weights of relu2_attention layers, summed.
struct AttentionTotals {
  int64_t weights = 0, zeros = 0;
  double head_skipped = 0, head_keys = 0, kv_skipped = 0, kv_keys = 0;
  void add(const Relu2Probe& p) {
    weights += p.weights, zeros += p.zeros;
    for (int64_t s : p.head_skipped) head_skipped += double(s);
    for (int64_t s : p.kv_skipped) kv_skipped += double(s);
    head_keys += double(p.skip_keys) * p.n_heads, kv_keys += double(p.skip_keys) * p.n_kv_heads;
  }
  bool empty() const { return weights == 0; }
  double zero_fraction() const { return ratio(double(zeros), double(weights)); }
  double head_skip() const { return ratio(head_skipped, head_keys); }
  double kv_skip() const { return ratio(kv_skipped, kv_keys); }
};

// Busiest and least-used expert, each as its share of tokens over the fair share top_k / E.
struct Load {
  double busiest = 0, least = 0;
};
Load expert_load(const FfnProbe& f) {
  const double E = double(f.expert_tokens.size()), fair = double(f.tokens) * f.top_k / E;
  const auto [lo, hi] = std::minmax_element(f.expert_tokens.begin(), f.expert_tokens.end());
  return {ratio(double(*hi), fair), ratio(double(*lo), fair)};
}

std::string percent(double f) {
  char b[32];
  std::snprintf(b, sizeof b, "%.1f", 100.0 * f);
  return b;
}

Json attention_json(const Relu2Probe& p) {
  AttentionTotals t;
  t.add(p);
  Json heads = Json::array(), kv = Json::array();
  for (int h = 0; h < p.n_heads; ++h)
    heads.push_back({{"zero_fraction", ratio(double(p.head_zeros[size_t(h)]), double(p.head_weights[size_t(h)]))},
                     {"v_skip_fraction", ratio(double(p.head_skipped[size_t(h)]), double(p.skip_keys))}});
  for (int g = 0; g < p.n_kv_heads; ++g)
    kv.push_back({{"v_skip_fraction", ratio(double(p.kv_skipped[size_t(g)]), double(p.skip_keys))}});
  return {{"weights", p.weights},
          {"zero_weights", p.zeros},
          {"zero_fraction", t.zero_fraction()},
          {"v_skip_queries", p.skip_queries},
          {"v_skip_query_head_fraction", t.head_skip()},
          {"v_skip_kv_head_fraction", t.kv_skip()},
          {"heads", heads},
          {"kv_heads", kv}};
}

// The text cells of one table line; "-" where the layer has nothing to count.
struct Cells {
  std::string zero = "-", skip = "-", dead = "-", fired = "-", load = "-";
};

// The whole model's sums, accumulated layer by layer.
struct ModelTotals {
  AttentionTotals attention;
  NeuronTotals neurons;
  Load load{0, 1e300};
  bool any_moe = false;
};

std::string load_text(const Load& l) {
  char b[48];
  std::snprintf(b, sizeof b, "%.2fx / %.2fx", l.busiest, l.least);
  return b;
}

// An MoE layer: expert load, and the ReLU^2 neuron counts of the routed and shared experts.
Json moe_summary(const FfnProbe& f, ModelTotals& all, Cells& cells) {
  Json ffn = Json::object();
  all.any_moe = true;
  const Load ld = expert_load(f);
  all.load.busiest = std::max(all.load.busiest, ld.busiest), all.load.least = std::min(all.load.least, ld.least);
  cells.load = load_text(ld);
  Json experts = Json::array();
  NeuronTotals routed, shared;
  for (size_t e = 0; e < f.expert_tokens.size(); ++e) {
    const double share = ratio(double(f.expert_tokens[e]) * double(f.expert_tokens.size()), double(f.tokens) * f.top_k);
    Json ej = {{"tokens", f.expert_tokens[e]}, {"share_vs_fair", share}};
    if (f.relu2) {
      NeuronTotals one;
      one.add(f.experts[e]);
      routed.add(one);
      ej.update(one.json());
    }
    experts.push_back(ej);
  }
  if (!f.shared.fires.empty()) shared.add(f.shared);
  ffn["tokens"] = f.tokens;
  ffn["fair_share"] = double(f.top_k) / double(f.expert_tokens.size());
  ffn["busiest_vs_fair"] = ld.busiest, ffn["least_used_vs_fair"] = ld.least;
  ffn["experts"] = experts;
  if (f.relu2) {
    ffn["routed"] = routed.json();
    all.neurons.add(routed);
    cells.dead = percent(routed.dead_fraction()), cells.fired = percent(routed.fired_fraction());
  }
  if (!shared.empty()) {
    ffn["shared"] = shared.json();
    all.neurons.add(shared);
    cells.dead += " / " + percent(shared.dead_fraction());
    cells.fired += " / " + percent(shared.fired_fraction());
  }
  return ffn;
}

// One layer: its JSON entry and table cells, its counts added into `all`.
Json layer_summary(const ModelConfig& c, int i, const LayerProbe& l, ModelTotals& all, Cells& cells) {
  Json layer = {{"layer", i}, {"mixer", to_string(c.mixer(i).kind)}};
  if (l.attention.active()) {
    AttentionTotals t;
    t.add(l.attention);
    all.attention.add(l.attention);
    layer["attention"] = attention_json(l.attention);
    cells.zero = percent(t.zero_fraction());
    cells.skip = percent(t.head_skip()) + " / " + percent(t.kv_skip());
  }
  const FfnProbe& f = l.ffn;
  Json ffn = {{"kind", f.kind == FfnKind::dense ? "dense" : "moe"}, {"relu2", f.relu2}};
  if (f.kind == FfnKind::dense && f.relu2) {
    NeuronTotals t;
    t.add(f.dense);
    all.neurons.add(t);
    ffn["dense"] = t.json();
    cells.dead = percent(t.dead_fraction()), cells.fired = percent(t.fired_fraction());
  }
  if (f.kind == FfnKind::moe) ffn.update(moe_summary(f, all, cells));
  layer["ffn"] = ffn;
  return layer;
}

// The totals over the model: JSON and the table's "all" cells.
Json totals_summary(const ModelTotals& all, Cells& cells) {
  Json totals = Json::object();
  if (!all.attention.empty()) {
    totals["zero_fraction"] = all.attention.zero_fraction();
    totals["v_skip_query_head_fraction"] = all.attention.head_skip();
    totals["v_skip_kv_head_fraction"] = all.attention.kv_skip();
    cells.zero = percent(all.attention.zero_fraction());
    cells.skip = percent(all.attention.head_skip()) + " / " + percent(all.attention.kv_skip());
  }
  if (!all.neurons.empty()) {
    totals["neurons"] = all.neurons.json();
    cells.dead = percent(all.neurons.dead_fraction()), cells.fired = percent(all.neurons.fired_fraction());
  }
  if (all.any_moe) {
    totals["busiest_vs_fair"] = all.load.busiest, totals["least_used_vs_fair"] = all.load.least;
    cells.load = load_text(all.load);
  }
  return totals;
}

std::string table_line(const std::string& layer, const char* mixer, const char* ffn, const Cells& cells) {
  char line[256];
  std::snprintf(line, sizeof line, "%-5s %-15s %7s %12s %-5s %16s %16s %16s\n", layer.c_str(), mixer, cells.zero.c_str(),
                cells.skip.c_str(), ffn, cells.dead.c_str(), cells.fired.c_str(), cells.load.c_str());
  return line;
}

}  // namespace

SparsityReport summarise_sparsity(const ModelConfig& c, const SparsityProbe& probe) {
  SparsityReport r;
  char header[256];
  std::snprintf(header, sizeof header, "%-5s %-15s %7s %12s %-5s %16s %16s %16s\n", "layer", "mixer", "zero-w%",
                "V-skip q/kv%", "ffn", "dead% (r/sh)", "fired/tok% (r/sh)", "load max/min");
  r.table += header;
  Json layers = Json::array();
  ModelTotals all;
  for (int i = 0; i < c.n_layers(); ++i) {
    Cells cells;
    layers.push_back(layer_summary(c, i, probe.layers[size_t(i)], all, cells));
    r.table += table_line(std::to_string(i), to_string(c.mixer(i).kind),
                          probe.layers[size_t(i)].ffn.kind == FfnKind::dense ? "dense" : "moe", cells);
  }
  Cells cells;
  const Json totals = totals_summary(all, cells);
  r.table += table_line("all", "", "", cells);
  r.json = {{"layers", layers}, {"totals", totals}};
  return r;
}

}  // namespace wren
