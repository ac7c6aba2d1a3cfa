// explore/: a small plotting layer that writes SVG. Two chart kinds, line charts (optionally
// log-scaled axes) and stacked bars, share one canvas, axes, palette and legend, so each
// figure of the explorer is data plus a title, never hand-drawn.
#pragma once

#include <string>
#include <vector>

namespace wren::svg {

struct Series {
  std::string name;
  std::vector<double> x, y;
};

struct LineChart {
  std::string title, x_label, y_label;
  bool log_x = true, log_y = true;
  std::vector<Series> series;
};

struct StackedBars {
  std::string title, y_label;
  std::vector<std::string> bars;            // one bar per category (e.g. per model)
  std::vector<std::string> stack;           // the stacked parts, bottom first
  std::vector<std::vector<double>> values;  // values[part][bar]
};

std::string render(const LineChart& chart);
std::string render(const StackedBars& chart);

}  // namespace wren::svg
