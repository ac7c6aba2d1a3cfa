// The explorer's figures, each a few lines of data handed to the plotting layer.
#include <functional>

#include "explore/report.h"
#include "explore/svg_plot.h"

namespace wren::explore {

namespace {

svg::LineChart against_context(const std::vector<ModelReport>& reports, const std::string& title,
                               const std::string& y_label, const std::function<double(const ContextPoint&)>& y) {
  svg::LineChart c{title, "context length (tokens)", y_label, true, true, {}};
  for (const ModelReport& r : reports) {
    svg::Series s{r.config.name, {}, {}};
    for (const ContextPoint& p : r.points) {
      s.x.push_back(p.n);
      s.y.push_back(y(p));
    }
    c.series.push_back(s);
  }
  return c;
}

svg::StackedBars allocation(const std::vector<ModelReport>& reports, bool active) {
  svg::StackedBars c;
  c.title = active ? "Active parameters per token by component" : "Total parameters by component";
  c.y_label = "parameters";
  for (const ModelReport& r : reports) c.bars.push_back(r.config.name);
  for (int k = 0; k < kComponents; ++k) {
    std::vector<double> part;
    bool any = false;
    for (const ModelReport& r : reports) {
      double v = active ? r.params.active[k] : double(r.params.total[k]);
      any |= v > 0;
      part.push_back(v);
    }
    if (!any) continue;
    c.stack.push_back(to_string(Component(k)));
    c.values.push_back(part);
  }
  return c;
}

}  // namespace

std::vector<std::pair<std::string, std::string>> render_charts(const std::vector<ModelReport>& r) {
  return {
      {"params_total.svg", svg::render(allocation(r, false))},
      {"params_active.svg", svg::render(allocation(r, true))},
      {"flops_training.svg", svg::render(against_context(r, "Training FLOPs per token", "FLOPs",
                                                         [](auto& p) { return p.training.total(); }))},
      {"flops_decode.svg", svg::render(against_context(r, "Decode FLOPs per token", "FLOPs",
                                                       [](auto& p) { return p.decode.total(); }))},
      {"state_stored.svg", svg::render(against_context(r, "Sequence-mixer state stored per sequence", "bytes",
                                                       [](auto& p) { return p.state_stored_bytes; }))},
      {"decode_bytes.svg", svg::render(against_context(r, "Bytes read from memory per decode token", "bytes",
                                                       [](auto& p) { return p.bytes.memory_total(); }))},
      {"tokens_per_second.svg", svg::render(against_context(r, "Decode tokens/s ceiling (bandwidth / bytes)",
                                                            "tokens/s", [](auto& p) { return p.tokens_per_second; }))},
  };
}

}  // namespace wren::explore
