// The report is one list of rows (section, metric, context, unit, a value per model);
// tables, JSON and CSV are three renderings of the same rows, so they never disagree.
#include "explore/report.h"

#include <cmath>
#include <cstdio>
#include <limits>
#include <sstream>
#include <stdexcept>

namespace wren::explore {

ModelReport build_report(const ModelConfig& c, const ReportOptions& o) {
  ModelReport r;
  r.config = c;
  const WeightMap w = build_weight_map(c);
  r.params = count_params(c, w);
  r.prefill_exit = c.prefill_exit_layer();
  r.cache_bytes_per_token = cache_bytes_per_token(c, o.knobs.kv);
  for (double n : o.contexts) {
    ContextPoint p;
    p.n = n;
    p.training = flops_per_token(c, w, n, Phase::training);
    p.prefill = flops_per_token(c, w, n, Phase::prefill);
    p.decode = flops_per_token(c, w, n, Phase::decode);
    p.state = state(c, n, o.knobs.v_read_fraction);
    p.state_stored_bytes = (p.state.stored_total() - p.state.recurrent_stored) * o.knobs.kv.bytes +
                           p.state.recurrent_stored * 4.0;
    p.bytes = decode_bytes(c, w, n, o.knobs);
    p.tokens_per_second = p.bytes.tokens_per_second(o.knobs.bandwidth_gbs);
    r.points.push_back(p);
  }
  return r;
}

DecodeKnobs parse_knobs(const KnobText& t) {
  auto fraction = [](const char* what, double v) {
    if (!(v >= 0.0 && v <= 1.0))
      throw std::invalid_argument(std::string(what) + " " + std::to_string(v) + ": expected a fraction in [0, 1]");
    return v;
  };
  DecodeKnobs k;
  k.weights = parse_precision(t.weights);
  k.head = parse_precision(t.head.empty() ? t.weights : t.head);
  k.kv = parse_precision(t.kv);
  k.engram = parse_precision(t.engram.empty() ? t.weights : t.engram);
  k.firing_fraction = fraction("firing fraction", t.firing);
  k.v_read_fraction = fraction("V rows read", t.v_read);
  if (!(t.bandwidth > 0)) throw std::invalid_argument("bandwidth " + std::to_string(t.bandwidth) + " GB/s: expected > 0");
  k.bandwidth_gbs = t.bandwidth;
  k.engram_from_storage = t.engram_storage;
  return k;
}

namespace {

constexpr double kNone = -1;  // context of a context-free row

enum class Unit { params, flops, elements, bytes, count, rate };
const char* unit_name(Unit u) {
  static const char* names[] = {"parameters", "FLOPs", "elements", "bytes", "count", "tokens/s"};
  return names[int(u)];
}

struct Row {
  std::string section, metric;
  double context = kNone;
  Unit unit = Unit::count;
  std::vector<double> values;  // one per model; NaN: not applicable
};

// Rows accumulate by (section, metric, context); a model without the metric shows NaN.
// A metric new to the list goes right after the previous metric of the same model, so
// every model's own order is kept and groups stay together.
struct Rows {
  std::vector<Row> rows;
  size_t models = 0;
  size_t next = 0;  // insertion point after the last row this model touched
  void start_model() { next = 0; }
  void set(size_t model, const std::string& section, const std::string& metric, double n, Unit u, double v) {
    for (size_t i = 0; i < rows.size(); ++i)
      if (rows[i].section == section && rows[i].metric == metric && rows[i].context == n) {
        rows[i].values[model] = v;
        next = i + 1;
        return;
      }
    auto same_group = [&](size_t i) { return rows[i].section == section && rows[i].context == n; };
    if (next == 0 || !same_group(next - 1))
      for (size_t i = 0; i < rows.size(); ++i)
        if (same_group(i)) next = i + 1;
    rows.insert(rows.begin() + long(next),
                {section, metric, n, u, std::vector<double>(models, std::numeric_limits<double>::quiet_NaN())});
    rows[next++].values[model] = v;
  }
};

void flop_rows(Rows& out, size_t m, const std::string& section, const Flops& f, double n) {
  out.set(m, section, "parameter matmuls", n, Unit::flops, f.params);
  for (auto& [kind, v] : f.attention) out.set(m, section, std::string("attention: ") + to_string(kind), n, Unit::flops, v);
  out.set(m, section, "residual mixing", n, Unit::flops, f.mixing);
  out.set(m, section, "total", n, Unit::flops, f.total());
}

Rows collect(const std::vector<ModelReport>& reports) {
  Rows out;
  out.models = reports.size();
  for (size_t m = 0; m < reports.size(); ++m) {
    const ModelReport& r = reports[m];
    const ParamCounts& p = r.params;
    out.start_model();
    for (int k = 0; k < kComponents; ++k)
      if (p.total[k]) out.set(m, "parameters", to_string(Component(k)), kNone, Unit::params, double(p.total[k]));
    out.set(m, "parameters", "total", kNone, Unit::params, double(p.total_all));
    for (auto& [kind, v] : p.mixer_total)
      out.set(m, "mixer parameters", to_string(kind), kNone, Unit::params, double(v));
    for (int k = 0; k < kComponents; ++k)
      if (p.active[k]) out.set(m, "active parameters", to_string(Component(k)), kNone, Unit::params, p.active[k]);
    out.set(m, "active parameters", "incl. input embedding (stored - engram - unused experts)", kNone, Unit::params,
            p.active_incl_embedding);
    out.set(m, "active parameters", "excl. input embedding", kNone, Unit::params, p.active_excl_embedding);
    out.set(m, "active parameters", "excl. input embedding and LM head", kNone, Unit::params, p.active_excl_head);
    out.set(m, "active parameters", "looked up per token (values)", kNone, Unit::count, double(p.lookup_values));
    out.set(m, "shape", "layers", kNone, Unit::count, r.config.n_layers());
    out.set(m, "shape", "prefill exit layer", kNone, Unit::count, r.prefill_exit);
    out.set(m, "shape", "cache growth per token (bytes)", kNone, Unit::bytes, r.cache_bytes_per_token);
    for (const ContextPoint& c : r.points) {
      flop_rows(out, m, "FLOPs per token: training", c.training, c.n);
      flop_rows(out, m, "FLOPs per token: prefill", c.prefill, c.n);
      flop_rows(out, m, "FLOPs per token: decode", c.decode, c.n);
      for (auto& [kind, v] : c.state.stored) out.set(m, "state stored per sequence", to_string(kind), c.n, Unit::elements, v);
      out.set(m, "state stored per sequence", "total bytes", c.n, Unit::bytes, c.state_stored_bytes);
      for (auto& [kind, v] : c.state.read) out.set(m, "state read per decode step", to_string(kind), c.n, Unit::elements, v);
      for (int k = 0; k < kComponents; ++k)
        if (c.bytes.weights[k] > 0)
          out.set(m, "bytes read per decode token", std::string("weights: ") + to_string(Component(k)), c.n, Unit::bytes,
                  c.bytes.weights[k]);
      out.set(m, "bytes read per decode token", "sequence-mixer state", c.n, Unit::bytes, c.bytes.state);
      out.set(m, "bytes read per decode token", "memory total", c.n, Unit::bytes, c.bytes.memory_total());
      out.set(m, "bytes read per decode token", "from storage (engram rows)", c.n, Unit::bytes, c.bytes.storage);
      out.set(m, "bytes read per decode token", "tokens/s ceiling", c.n, Unit::rate, c.tokens_per_second);
    }
  }
  return out;
}

std::string human(double v, Unit u) {
  if (std::isnan(v)) return "-";
  char buf[64];
  auto scaled = [&](const char* const* suffix, double base) {
    int i = 0;
    double a = std::fabs(v);
    while (a >= 999.95 && suffix[i + 1]) a /= base, v /= base, ++i;
    std::snprintf(buf, sizeof buf, a < 10 && i ? "%.2f %s" : "%.1f %s", v, suffix[i]);
    if (i == 0) std::snprintf(buf, sizeof buf, "%.0f%s%s", v, *suffix[0] ? " " : "", suffix[0]);
    return std::string(buf);
  };
  static const char* count_sfx[] = {"", "K", "M", "B", "T", nullptr};
  static const char* byte_sfx[] = {"B", "KB", "MB", "GB", "TB", nullptr};
  static const char* flop_sfx[] = {"", "K", "M", "G", "T", "P", nullptr};
  switch (u) {
    case Unit::bytes: return scaled(byte_sfx, 1000);
    case Unit::flops: return scaled(flop_sfx, 1000);
    case Unit::rate: std::snprintf(buf, sizeof buf, "%.1f", v); return buf;
    default: return scaled(count_sfx, 1000);
  }
}

}  // namespace

std::string context_text(double n) {
  char buf[32];
  if (n >= 1024 * 1024 && std::fmod(n, 1024 * 1024) == 0) std::snprintf(buf, sizeof buf, "%.0fM", n / (1024 * 1024));
  else if (n >= 1024 && std::fmod(n, 1024) == 0) std::snprintf(buf, sizeof buf, "%.0fK", n / 1024);
  else std::snprintf(buf, sizeof buf, "%.0f", n);
  return buf;
}

std::string render_table(const std::vector<ModelReport>& reports, const ReportOptions& o) {
  const Rows rows = collect(reports);
  const int label_w = 58, col_w = 15;
  std::ostringstream s;
  auto line = [&](const std::string& label, const std::vector<std::string>& cells) {
    char buf[512];
    std::snprintf(buf, sizeof buf, "%-*s", label_w, label.c_str());
    s << buf;
    for (auto& c : cells) {
      std::snprintf(buf, sizeof buf, "%*s", col_w, c.c_str());
      s << buf;
    }
    s << "\n";
  };
  std::vector<std::string> names;
  for (auto& r : reports) names.push_back(r.config.name.empty() ? "(unnamed)" : r.config.name);
  line("", names);
  const DecodeKnobs& k = o.knobs;
  s << "decode bytes at weights " << k.weights.name << ", LM head " << k.head.name << ", KV " << k.kv.name << ", engram "
    << k.engram.name << "; ReLU^2 firing fraction " << k.firing_fraction << ", V rows read " << k.v_read_fraction
    << ", bandwidth " << k.bandwidth_gbs << " GB/s\n";
  // The brief table keeps the totals and the named conventions; --detail shows every row.
  auto brief = [](const Row& r) {
    if (r.section == "shape" || r.section == "parameters") return true;
    if (r.section == "active parameters") return r.metric.rfind("incl.", 0) == 0 || r.metric.rfind("excl.", 0) == 0;
    return r.metric == "total" || r.metric == "total bytes" || r.metric == "memory total" ||
           r.metric == "tokens/s ceiling";
  };
  std::string section;
  for (const Row& r : rows.rows) {
    if (!o.detail && !brief(r)) continue;
    if (r.section != section) {
      section = r.section;
      s << "\n" << section << "\n";
    }
    std::vector<std::string> cells;
    for (double v : r.values) cells.push_back(human(v, r.unit));
    std::string label = "  " + r.metric;
    if (r.context != kNone) label = "  n=" + context_text(r.context) + "  " + r.metric;
    line(label, cells);
  }
  return s.str();
}

Json render_json(const std::vector<ModelReport>& reports, const ReportOptions& o) {
  const Rows rows = collect(reports);
  Json j;
  const DecodeKnobs& k = o.knobs;
  j["assumptions"] = {{"weights", k.weights.name}, {"lm_head", k.head.name}, {"kv", k.kv.name},
                      {"engram", k.engram.name}, {"firing_fraction", k.firing_fraction},
                      {"v_read_fraction", k.v_read_fraction}, {"engram_from_storage", k.engram_from_storage},
                      {"bandwidth_gbs", k.bandwidth_gbs}};
  j["models"] = Json::array();
  for (size_t m = 0; m < reports.size(); ++m) {
    Json model;
    model["name"] = reports[m].config.name;
    for (const Row& r : rows.rows) {
      if (std::isnan(r.values[m])) continue;
      Json& slot = model[r.section][r.metric];
      if (r.context == kNone) slot = r.values[m];
      else slot[context_text(r.context)] = r.values[m];
    }
    j["models"].push_back(model);
  }
  return j;
}

std::string render_csv(const std::vector<ModelReport>& reports) {
  const Rows rows = collect(reports);
  std::ostringstream s;
  s << "model,section,metric,context,unit,value\n";
  auto quote = [](const std::string& x) {
    if (x.find_first_of(",\"") == std::string::npos) return x;
    std::string q = "\"";
    for (char ch : x) q += ch == '"' ? std::string("\"\"") : std::string(1, ch);
    return q + "\"";
  };
  for (const Row& r : rows.rows)
    for (size_t m = 0; m < reports.size(); ++m) {
      if (std::isnan(r.values[m])) continue;
      char v[64];
      std::snprintf(v, sizeof v, "%.17g", r.values[m]);
      s << quote(reports[m].config.name) << "," << quote(r.section) << "," << quote(r.metric) << ","
        << (r.context == kNone ? std::string() : std::to_string(int64_t(r.context))) << "," << unit_name(r.unit) << ","
        << v << "\n";
    }
  return s.str();
}

}  // namespace wren::explore
