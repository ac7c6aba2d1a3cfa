// wren sparsity: the sparsity a model has on a text, measured where the engine can exploit
// it. The text is run in wren perplexity's windows (runtime/perplexity.h) with a
// SparsityProbe attached (model/sparsity_probe.h); each window's last token is run too, so
// V-skip is counted at a query that sees the whole window (context = -c tokens).
//   zero weights   % of (query, head, key) triples of relu2_attention layers with w = 0
//   V-skip         % of keys in all-zero groups of --skip-group keys, per query head / KV head
//   dead neurons   % of ReLU^2 neurons that never fired over the text (dense, routed experts
//                  pooled, shared experts); fired per token: % of neurons that fire per token
//   load           busiest and least-used expert's share of tokens / the fair share top_k / E
#include <CLI/CLI.hpp>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "model/sparsity_probe.h"
#include "runtime/model_files.h"
#include "runtime/perplexity.h"
#include "text/tokenizer.h"
#include "tools/commands.h"

namespace wren::tools {

namespace {

using Json = nlohmann::ordered_json;

struct SparsityArgs {
  std::string model;
  std::vector<std::string> files;
  int64_t context = 0, max_windows = 0;
  int threads = 2, skip_group = 8;
  std::string format = "table";
};

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

struct Report {
  Json json;
  std::string table;
};

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

Report summarise(const ModelConfig& c, const SparsityProbe& probe) {
  Report r;
  Json layers = Json::array();
  AttentionTotals attn_all;
  NeuronTotals neurons_all;
  Load load_all{0, 1e300};
  bool any_moe = false;
  char line[256];
  std::snprintf(line, sizeof line, "%-5s %-15s %7s %12s %-5s %16s %16s %16s\n", "layer", "mixer", "zero-w%",
                "V-skip q/kv%", "ffn", "dead% (r/sh)", "fired/tok% (r/sh)", "load max/min");
  r.table += line;
  for (int i = 0; i < c.n_layers(); ++i) {
    const LayerProbe& l = probe.layers[size_t(i)];
    Json layer = {{"layer", i}, {"mixer", to_string(c.mixer(i).kind)}};
    std::string zero = "-", skip = "-", dead = "-", fired = "-", load = "-";
    if (l.attention.active()) {
      AttentionTotals t;
      t.add(l.attention);
      attn_all.add(l.attention);
      layer["attention"] = attention_json(l.attention);
      zero = percent(t.zero_fraction());
      skip = percent(t.head_skip()) + " / " + percent(t.kv_skip());
    }
    const FfnProbe& f = l.ffn;
    Json ffn = {{"kind", f.kind == FfnKind::dense ? "dense" : "moe"}, {"relu2", f.relu2}};
    if (f.kind == FfnKind::dense && f.relu2) {
      NeuronTotals t;
      t.add(f.dense);
      neurons_all.add(t);
      ffn["dense"] = t.json();
      dead = percent(t.dead_fraction()), fired = percent(t.fired_fraction());
    }
    if (f.kind == FfnKind::moe) {
      any_moe = true;
      const Load ld = expert_load(f);
      load_all.busiest = std::max(load_all.busiest, ld.busiest), load_all.least = std::min(load_all.least, ld.least);
      char b[48];
      std::snprintf(b, sizeof b, "%.2fx / %.2fx", ld.busiest, ld.least);
      load = b;
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
        neurons_all.add(routed);
        dead = percent(routed.dead_fraction()), fired = percent(routed.fired_fraction());
      }
      if (!shared.empty()) {
        ffn["shared"] = shared.json();
        neurons_all.add(shared);
        dead += " / " + percent(shared.dead_fraction());
        fired += " / " + percent(shared.fired_fraction());
      }
    }
    layer["ffn"] = ffn;
    layers.push_back(layer);
    std::snprintf(line, sizeof line, "%-5d %-15s %7s %12s %-5s %16s %16s %16s\n", i, to_string(c.mixer(i).kind),
                  zero.c_str(), skip.c_str(), f.kind == FfnKind::dense ? "dense" : "moe", dead.c_str(), fired.c_str(),
                  load.c_str());
    r.table += line;
  }
  Json totals = Json::object();
  std::string zero = "-", skip = "-", dead = "-", fired = "-", load = "-";
  if (!attn_all.empty()) {
    totals["zero_fraction"] = attn_all.zero_fraction();
    totals["v_skip_query_head_fraction"] = attn_all.head_skip();
    totals["v_skip_kv_head_fraction"] = attn_all.kv_skip();
    zero = percent(attn_all.zero_fraction()), skip = percent(attn_all.head_skip()) + " / " + percent(attn_all.kv_skip());
  }
  if (!neurons_all.empty()) {
    totals["neurons"] = neurons_all.json();
    dead = percent(neurons_all.dead_fraction()), fired = percent(neurons_all.fired_fraction());
  }
  if (any_moe) {
    totals["busiest_vs_fair"] = load_all.busiest, totals["least_used_vs_fair"] = load_all.least;
    char b[48];
    std::snprintf(b, sizeof b, "%.2fx / %.2fx", load_all.busiest, load_all.least);
    load = b;
  }
  std::snprintf(line, sizeof line, "%-5s %-15s %7s %12s %-5s %16s %16s %16s\n", "all", "", zero.c_str(), skip.c_str(), "",
                dead.c_str(), fired.c_str(), load.c_str());
  r.table += line;
  r.json = {{"layers", layers}, {"totals", totals}};
  return r;
}

void run(const SparsityArgs& a) {
  auto model = open_model(a.model);
  const ModelConfig& c = model->config;
  const text::Tokenizer tok = text::Tokenizer::load(a.model + "/tokenizer.json");
  const int64_t n_ctx = window_length(c, a.context);
  if (a.skip_group < 1) throw std::runtime_error("--skip-group " + std::to_string(a.skip_group) + ": must be >= 1");
  // Every file is read before the (long) run, so a missing one is reported first.
  std::vector<std::vector<int32_t>> texts;
  for (const std::string& f : a.files) {
    texts.push_back(tokenize_file(tok, f));
    if (windows_in(int64_t(texts.back().size()), n_ctx) < 1)
      throw std::runtime_error(f + ": " + std::to_string(texts.back().size()) + " tokens, fewer than one window of " +
                               std::to_string(n_ctx));
  }
  SparsityProbe probe(c, a.skip_group);
  probe.set_skip_position(n_ctx - 1);
  WindowScore score;
  const WindowOptions o{.context = n_ctx, .threads = a.threads, .probe = &probe, .run_last = true, .progress = stderr};
  for (const std::vector<int32_t>& t : texts) {
    int64_t windows = windows_in(int64_t(t.size()), n_ctx);
    if (a.max_windows) windows = std::min(windows, a.max_windows - score.windows);
    if (windows > 0) score_windows(model, tok, t, windows, o, score);
  }
  Report r = summarise(c, probe);
  if (a.format == "json") {
    Json out = {{"model", a.model},
                {"files", a.files},
                {"context", n_ctx},
                {"skip_group", a.skip_group},
                {"windows", score.windows},
                {"scored_tokens", score.scored},
                {"perplexity", score.perplexity()},
                {"bits_per_byte", score.bits_per_byte()}};
    out.update(r.json);
    std::printf("%s\n", out.dump(2).c_str());
    return;
  }
  std::printf("model %s: %lld windows of %lld tokens, %lld tokens scored\n", a.model.c_str(), (long long)score.windows,
              (long long)n_ctx, (long long)score.scored);
  std::printf("perplexity %.4f\nbits per byte %.4f\n", score.perplexity(), score.bits_per_byte());
  std::printf("V-skip: groups of %d keys at each window's last query (%lld keys)\n\n", a.skip_group, (long long)n_ctx);
  std::printf("%s", r.table.c_str());
}

}  // namespace

void register_sparsity(CLI::App& app) {
  auto* cmd = app.add_subcommand("sparsity", "sparsity of a model on a text: zero attention weights, V-skip, "
                                             "dead neurons, expert load");
  static SparsityArgs a;
  cmd->add_option("-m,--model", a.model, "model directory")->required();
  cmd->add_option("files", a.files, "UTF-8 text files (held out)")->required();
  cmd->add_option("-c,--context", a.context, "window length in tokens (default: min(model context, 512))")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--max-windows,--windows", a.max_windows, "evaluate at most this many windows over all files")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--skip-group", a.skip_group, "keys per V-skip group")->capture_default_str();
  cmd->add_option("-t,--threads", a.threads, "threads")->check(CLI::PositiveNumber)->capture_default_str();
  cmd->add_option("--format", a.format, "table or json")->check(CLI::IsMember({"table", "json"}))->capture_default_str();
  cmd->callback([] { run(a); });
}

}  // namespace wren::tools
