#include "explore/page_html.h"

#include <stdexcept>
#include <string_view>
#include <utility>

#include "config/parse.h"

namespace wren::explore {

const std::vector<std::pair<std::string_view, std::string_view>>& page_files();  // generated

namespace {

std::string_view page_file(std::string_view name) {
  for (auto& [n, text] : page_files())
    if (n == name) return text;
  throw std::logic_error("explorer page: no embedded file " + std::string(name));
}

// Inside <script>, "</" could close the element; JSON and the scripts never need it literally.
std::string script_safe(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size(); ++i) {
    out += text[i];
    if (text[i] == '<' && i + 1 < text.size() && text[i + 1] == '/') out += '\\';
  }
  return out;
}

void fill(std::string& page, const std::string& slot, const std::string& text) {
  const size_t at = page.find(slot);
  if (at == std::string::npos) throw std::logic_error("explorer page: template lacks " + slot);
  page.replace(at, slot.size(), text);
}

}  // namespace

std::string render_page(const PageModels& models) {
  Json data;
  data["open"] = Json::array();
  for (const ModelConfig& c : models.open) data["open"].push_back(to_json(c));
  data["presets"] = Json::object();
  for (const ModelConfig& c : models.presets) data["presets"][c.name] = to_json(c);
  std::string page(page_file("page.html"));
  fill(page, "/*@PAGE_CSS@*/", std::string(page_file("page.css")));
  fill(page, "/*@PAGE_DATA@*/", script_safe(data.dump()));
  for (auto [slot, file] : {std::pair{"/*@ENGINE_JS@*/", "generated/engine.js"}, {"/*@LABELS_JS@*/", "labels.js"},
                            {"/*@CHARTS_JS@*/", "charts.js"}, {"/*@PAGE_JS@*/", "page.js"}})
    fill(page, slot, script_safe(page_file(file)));
  return page;
}

}  // namespace wren::explore
