// explore/: the explorer's report — the cost model evaluated for several configs over a
// list of context lengths, rendered as side-by-side text tables, JSON or CSV.
#pragma once

#include <string>
#include <vector>

#include "config/json_reader.h"
#include "explore/cost_model.h"

namespace wren::explore {

struct ContextPoint {
  double n = 0;
  Flops training, prefill, decode;
  State state;
  double state_stored_bytes = 0;  // at the KV precision (recurrent states f32)
  DecodeBytes bytes;
  double tokens_per_second = 0;   // memory-bandwidth ceiling
};

struct ModelReport {
  ModelConfig config;
  ParamCounts params;
  int prefill_exit = 0;
  double cache_bytes_per_token = 0;  // growth of the caches that grow with context
  std::vector<ContextPoint> points;
};

struct ReportOptions {
  std::vector<double> contexts{1024, 4096, 16384, 65536, 262144, 1048576};
  DecodeKnobs knobs;
  bool detail = false;  // tables: every breakdown (by component, by mixer kind) at every context
};

ModelReport build_report(const ModelConfig& c, const ReportOptions& o);

// The decode knobs as the command line and the page give them: precision names (an empty
// head or engram precision follows the weights) and fractions, checked and parsed once.
struct KnobText {
  std::string weights = "bf16", head, kv = "bf16", engram;
  double firing = 1.0, v_read = 1.0, bandwidth = 50.0;
  bool engram_storage = false;
};
DecodeKnobs parse_knobs(const KnobText& t);  // std::invalid_argument naming the bad knob

std::string render_table(const std::vector<ModelReport>& r, const ReportOptions& o);
Json render_json(const std::vector<ModelReport>& r, const ReportOptions& o);
// A context length as the reports key it: "16K", "1M", "1000".
std::string context_text(double n);
// Long form: model,section,metric,context,value (context empty for context-free figures).
std::string render_csv(const std::vector<ModelReport>& r);

}  // namespace wren::explore

namespace wren::explore {

// The explorer's figures as (file name, SVG text): FLOPs, state, bytes and tokens/s against
// context, and the stacked parameter allocation (total and active).
std::vector<std::pair<std::string, std::string>> render_charts(const std::vector<ModelReport>& r);

}  // namespace wren::explore
