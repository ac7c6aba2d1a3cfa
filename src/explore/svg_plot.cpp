// SVG rendering of the two chart kinds. Coordinates: a fixed 800x480 canvas with margins;
// an Axis maps data values to pixels (linear or log10) and chooses its own ticks.
#include "explore/svg_plot.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <sstream>

namespace wren::svg {

namespace {

constexpr double kWidth = 800, kHeight = 480;
constexpr double kLeft = 80, kRight = 190, kTop = 40, kBottom = 60;
const char* const kPalette[] = {"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b",
                                "#e377c2", "#7f7f7f", "#bcbd22", "#17becf", "#393b79", "#637939"};
const char* color(size_t i) { return kPalette[i % (sizeof kPalette / sizeof *kPalette)]; }

std::string escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '<') out += "&lt;";
    else if (c == '>') out += "&gt;";
    else if (c == '&') out += "&amp;";
    else if (c == '"') out += "&quot;";
    else out += c;
  }
  return out;
}

std::string number(double v) {
  char buf[32];
  double a = std::fabs(v);
  const char* sfx[] = {"", "K", "M", "G", "T", "P", "E"};
  int i = 0;
  while (a >= 1000 && i < 6) a /= 1000, v /= 1000, ++i;
  std::snprintf(buf, sizeof buf, a != 0 && a < 10 && std::fmod(a, 1) != 0 ? "%.1f%s" : "%.0f%s", v, sfx[i]);
  return buf;
}

// Maps [lo, hi] to pixels [p0, p1]; log10 when `log` (values must be > 0).
struct Axis {
  double lo, hi, p0, p1;
  bool log;
  double map(double v) const {
    double t = log ? (std::log10(v) - std::log10(lo)) / (std::log10(hi) - std::log10(lo)) : (v - lo) / (hi - lo);
    return p0 + t * (p1 - p0);
  }
  std::vector<double> ticks() const {
    std::vector<double> t;
    if (log) {
      for (double d = std::pow(10, std::floor(std::log10(lo))); d <= hi * 1.0001; d *= 10)
        if (d >= lo * 0.9999) t.push_back(d);
    } else {
      double step = std::pow(10, std::floor(std::log10((hi - lo) / 5)));
      for (double m : {1.0, 2.0, 5.0, 10.0})
        if ((hi - lo) / (step * m) <= 6) { step *= m; break; }
      for (double v = std::ceil(lo / step) * step; v <= hi + step * 1e-9; v += step) t.push_back(v);
    }
    return t;
  }
};

Axis make_axis(double lo, double hi, double p0, double p1, bool log) {
  if (log) {
    lo = std::pow(10, std::floor(std::log10(lo)));
    hi = std::pow(10, std::ceil(std::log10(hi)));
  } else {
    lo = std::min(lo, 0.0);
  }
  if (hi <= lo) hi = lo + 1;
  return {lo, hi, p0, p1, log};
}

struct Canvas {
  std::ostringstream s;
  explicit Canvas(const std::string& title) {
    s << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << kWidth << "\" height=\"" << kHeight
      << "\" font-family=\"sans-serif\" font-size=\"12\">\n"
      << "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n"
      << "<text x=\"" << kWidth / 2 << "\" y=\"22\" text-anchor=\"middle\" font-size=\"15\">" << escape(title) << "</text>\n";
  }
  void text(double x, double y, const std::string& t, const char* anchor = "start", const char* extra = "") {
    s << "<text x=\"" << x << "\" y=\"" << y << "\" text-anchor=\"" << anchor << "\" " << extra << ">" << escape(t)
      << "</text>\n";
  }
  void line(double x0, double y0, double x1, double y1, const char* stroke, double width = 1) {
    s << "<line x1=\"" << x0 << "\" y1=\"" << y0 << "\" x2=\"" << x1 << "\" y2=\"" << y1 << "\" stroke=\"" << stroke
      << "\" stroke-width=\"" << width << "\"/>\n";
  }
  void rect(double x, double y, double w, double h, const char* fill) {
    s << "<rect x=\"" << x << "\" y=\"" << y << "\" width=\"" << w << "\" height=\"" << h << "\" fill=\"" << fill << "\"/>\n";
  }
  void y_axis(const Axis& a, const std::string& label) {
    for (double t : a.ticks()) {
      double y = a.map(t);
      line(kLeft, y, kWidth - kRight, y, "#e5e5e5");
      text(kLeft - 6, y + 4, number(t), "end");
    }
    line(kLeft, kTop, kLeft, kHeight - kBottom, "black");
    s << "<text transform=\"translate(18," << (kTop + kHeight - kBottom) / 2 << ") rotate(-90)\" text-anchor=\"middle\">"
      << escape(label) << "</text>\n";
  }
  void legend(const std::vector<std::string>& names, bool swatch_box) {
    for (size_t i = 0; i < names.size(); ++i) {
      double y = kTop + 10 + 18 * double(i), x = kWidth - kRight + 15;
      if (swatch_box) rect(x, y - 9, 12, 12, color(i));
      else line(x, y - 3, x + 14, y - 3, color(i), 2.5);
      text(x + 20, y + 1, names[i]);
    }
  }
  std::string finish() {
    s << "</svg>\n";
    return s.str();
  }
};

}  // namespace

std::string render(const LineChart& c) {
  double xlo = INFINITY, xhi = -INFINITY, ylo = INFINITY, yhi = -INFINITY;
  for (auto& s : c.series)
    for (size_t i = 0; i < s.x.size() && i < s.y.size(); ++i) {
      if ((c.log_x && s.x[i] <= 0) || (c.log_y && s.y[i] <= 0)) continue;  // not drawable on a log axis
      xlo = std::min(xlo, s.x[i]), xhi = std::max(xhi, s.x[i]);
      ylo = std::min(ylo, s.y[i]), yhi = std::max(yhi, s.y[i]);
    }
  Canvas cv(c.title);
  if (!(xlo <= xhi)) {
    cv.text(kWidth / 2, kHeight / 2, "no data", "middle");
    return cv.finish();
  }
  Axis x = make_axis(xlo, xhi, kLeft, kWidth - kRight, c.log_x);
  Axis y = make_axis(ylo, yhi, kHeight - kBottom, kTop, c.log_y);
  cv.y_axis(y, c.y_label);
  for (double t : x.ticks()) {
    double px = x.map(t);
    cv.line(px, kHeight - kBottom, px, kHeight - kBottom + 5, "black");
    cv.text(px, kHeight - kBottom + 18, number(t), "middle");
  }
  cv.line(kLeft, kHeight - kBottom, kWidth - kRight, kHeight - kBottom, "black");
  cv.text((kLeft + kWidth - kRight) / 2, kHeight - 15, c.x_label, "middle");
  std::vector<std::string> names;
  for (size_t k = 0; k < c.series.size(); ++k) {
    const Series& s = c.series[k];
    names.push_back(s.name);
    std::ostringstream pts;
    for (size_t i = 0; i < s.x.size() && i < s.y.size(); ++i)
      if (!((c.log_x && s.x[i] <= 0) || (c.log_y && s.y[i] <= 0))) pts << x.map(s.x[i]) << "," << y.map(s.y[i]) << " ";
    cv.s << "<polyline fill=\"none\" stroke=\"" << color(k) << "\" stroke-width=\"2.5\" points=\"" << pts.str() << "\"/>\n";
  }
  cv.legend(names, false);
  return cv.finish();
}

std::string render(const StackedBars& c) {
  Canvas cv(c.title);
  double top = 0;
  for (size_t b = 0; b < c.bars.size(); ++b) {
    double sum = 0;
    for (auto& part : c.values) sum += b < part.size() ? std::max(part[b], 0.0) : 0;
    top = std::max(top, sum);
  }
  Axis y = make_axis(0, top > 0 ? top * 1.05 : 1, kHeight - kBottom, kTop, false);
  cv.y_axis(y, c.y_label);
  const double slot = (kWidth - kRight - kLeft) / std::max<size_t>(c.bars.size(), 1), width = slot * 0.6;
  for (size_t b = 0; b < c.bars.size(); ++b) {
    double x = kLeft + slot * (double(b) + 0.2), base = 0;
    for (size_t p = 0; p < c.values.size(); ++p) {
      double v = b < c.values[p].size() ? std::max(c.values[p][b], 0.0) : 0;
      if (v <= 0) continue;
      cv.rect(x, y.map(base + v), width, y.map(base) - y.map(base + v), color(p));
      base += v;
    }
    cv.text(x + width / 2, kHeight - kBottom + 18, c.bars[b], "middle");
  }
  cv.line(kLeft, kHeight - kBottom, kWidth - kRight, kHeight - kBottom, "black");
  cv.legend(c.stack, true);
  return cv.finish();
}

}  // namespace wren::svg
