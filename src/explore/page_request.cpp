#include "explore/page_request.h"

#include <algorithm>
#include <stdexcept>

#include "config/parse.h"
#include "explore/formulas.h"
#include "explore/report.h"

namespace wren::explore {

namespace {

KnobText read_knobs(const Json& request) {
  KnobText t;
  if (!request.contains("knobs")) return t;
  JsonReader r(request.at("knobs"), "page", "knobs");
  t.weights = r.string_or("weights", t.weights);
  t.head = r.string_or("head", t.head);
  t.kv = r.string_or("kv", t.kv);
  t.engram = r.string_or("engram", t.engram);
  t.firing = r.number_or("firing", t.firing, 0.0, 1.0);
  t.v_read = r.number_or("v_read", t.v_read, 0.0, 1.0);
  t.bandwidth = r.number_or("bandwidth", t.bandwidth, 1e-9, 1e12);
  t.engram_storage = r.boolean_or("engram_storage", t.engram_storage);
  r.finish();
  return t;
}

}  // namespace

Json answer_page_request(const Json& request) {
  JsonReader top(request, "page", "");
  const ModelConfig c = parse_model_config(top.raw("model"), "model");
  ReportOptions o;
  o.knobs = parse_knobs(read_knobs(request));
  top.raw("knobs");
  const double n = top.integer64("context", 1);
  o.contexts = {n};
  for (int64_t x : top.raw("curve").get<std::vector<int64_t>>()) {
    if (x < 1) top.fail("curve", "context lengths must be positive");
    o.contexts.push_back(double(x));
  }
  top.finish();
  std::sort(o.contexts.begin(), o.contexts.end());
  o.contexts.erase(std::unique(o.contexts.begin(), o.contexts.end()), o.contexts.end());

  const ModelReport report = build_report(c, o);
  Json a;
  a["ok"] = true;
  a["config"] = to_json(c);
  a["layers"] = c.n_layers();
  a["context_key"] = context_text(n);
  a["curve_keys"] = Json::array();
  for (double x : o.contexts) a["curve_keys"].push_back({{"n", x}, {"key", context_text(x)}});
  a["report"] = render_json({report}, o)["models"][0];
  const auto at_n = std::find_if(report.points.begin(), report.points.end(), [&](auto& p) { return p.n == n; });
  a["formulas"] = Json::array();
  for (const Formula& f : seed_formulas(report, *at_n, o.knobs))
    a["formulas"].push_back({{"id", f.id}, {"closed_form", f.closed_form}, {"substituted", f.substituted},
                             {"closed_value", f.closed_value}, {"model_value", f.model_value}});
  return a;
}

}  // namespace wren::explore
