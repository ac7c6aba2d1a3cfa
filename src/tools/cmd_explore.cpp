// wren explore: the cost model for presets, config files, model directories and Hugging
// Face config.json files, side by side, as tables (default), JSON or CSV, plus SVG charts,
// or as the interactive page (--html).
#include <CLI/CLI.hpp>

#include <cstdio>
#include <filesystem>
#include <iostream>
#include <sstream>

#include "config/hf_config.h"
#include "config/parse.h"
#include "explore/page_html.h"
#include "explore/report.h"
#include "tools/commands.h"
#include "tools/output.h"

namespace wren::tools {

namespace {

struct ExploreArgs {
  std::vector<std::string> models, hf;
  std::string contexts = "1024,4096,16384,65536,262144,1048576";
  explore::KnobText knobs;
  bool detail = false;
  std::string format = "table", svg_dir, output, html;
};

std::vector<double> parse_contexts(const std::string& text) {
  std::vector<double> out;
  std::stringstream ss(text);
  std::string item;
  while (std::getline(ss, item, ',')) {
    size_t used = 0;
    long long n = 0;
    try {
      n = std::stoll(item, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used != item.size() || n < 1) throw std::runtime_error("--context: \"" + item + "\" is not a positive integer");
    out.push_back(double(n));
  }
  if (out.empty()) throw std::runtime_error("--context: expected a comma-separated list of lengths");
  return out;
}

// The interactive page opens with the given models, or with Wren's two and two open models.
void write_page(std::vector<ModelConfig> open, const std::string& path) {
  if (open.empty())
    for (const char* name : {"embla-1", "nenya", "qwen3-30b-a3b", "deepseek-v2-lite"}) open.push_back(load_preset(name));
  explore::PageModels models{std::move(open), {}};
  for (auto& name : preset_names()) models.presets.push_back(load_preset(name));
  write_text_atomic(path, explore::render_page(models));
}

void run(const ExploreArgs& a) {
  explore::ReportOptions o;
  o.contexts = parse_contexts(a.contexts);
  o.knobs = explore::parse_knobs(a.knobs);
  o.detail = a.detail;

  std::vector<ModelConfig> configs;
  for (auto& m : a.models) configs.push_back(resolve_model_config(m));
  for (auto& h : a.hf) configs.push_back(load_hf_config(h));
  if (!a.html.empty()) {
    write_page(configs, a.html);
    return;
  }
  std::vector<explore::ModelReport> reports;
  for (auto& c : configs) reports.push_back(explore::build_report(c, o));
  if (reports.empty()) throw std::runtime_error("explore: name at least one model (preset, config file or --hf file)");

  std::string text = a.format == "json" ? explore::render_json(reports, o).dump(2) + "\n"
                     : a.format == "csv" ? explore::render_csv(reports)
                                         : explore::render_table(reports, o);
  if (a.output.empty()) std::cout << text;
  else write_text_atomic(a.output, text);
  if (!a.svg_dir.empty()) {
    std::filesystem::create_directories(a.svg_dir);
    for (auto& [name, svg] : explore::render_charts(reports))
      write_text_atomic((std::filesystem::path(a.svg_dir) / name).string(), svg);
  }
}

}  // namespace

void register_explore(CLI::App& app) {
  auto* cmd = app.add_subcommand("explore", "parameters, FLOPs, state and bytes read per token, side by side");
  static ExploreArgs a;
  cmd->add_option("models", a.models, "presets (" + [] {
    std::string s;
    for (auto& n : preset_names()) s += (s.empty() ? "" : ", ") + n;
    return s;
  }() + "), config JSON files or model directories");
  cmd->add_option("--hf", a.hf, "a Hugging Face config.json (repeatable)");
  cmd->add_option("--context", a.contexts, "comma-separated context lengths")->capture_default_str();
  cmd->add_option("--weights", a.knobs.weights, "weight precision: f32, bf16, int8[:gN], int4[:gN]")->capture_default_str();
  cmd->add_option("--head", a.knobs.head, "LM head precision (default: as --weights)");
  cmd->add_option("--kv", a.knobs.kv, "KV cache precision")->capture_default_str();
  cmd->add_option("--engram", a.knobs.engram, "engram table precision (default: as --weights)");
  cmd->add_option("--firing", a.knobs.firing, "fraction of ReLU^2 neurons that fire (dead_neuron_skip)")
      ->check(CLI::Range(0.0, 1.0))->capture_default_str();
  cmd->add_option("--v-read", a.knobs.v_read, "fraction of V rows a ReLU^2 attention layer reads (V-skip)")
      ->check(CLI::Range(0.0, 1.0))->capture_default_str();
  cmd->add_flag("--engram-storage", a.knobs.engram_storage, "engram rows are read from storage, not memory");
  cmd->add_option("--bandwidth", a.knobs.bandwidth, "memory bandwidth in GB/s for the tokens/s ceiling")
      ->check(CLI::PositiveNumber)->capture_default_str();
  cmd->add_option("--format", a.format, "table, json or csv")->check(CLI::IsMember({"table", "json", "csv"}))
      ->capture_default_str();
  cmd->add_flag("--detail", a.detail, "tables: every breakdown by component and mixer kind");
  cmd->add_option("-o,--output", a.output, "write the report to this file instead of standard output");
  cmd->add_option("--svg", a.svg_dir, "write SVG charts into this directory");
  cmd->add_option("--html", a.html,
                  "write the interactive explorer page (one self-contained file) opening with the models named");
  cmd->callback([] { run(a); });
}

}  // namespace wren::tools
