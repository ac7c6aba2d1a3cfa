// explore/: the explorer as one self-contained HTML page (web/explorer/, embedded at build
// time): style, scripts and the cost model compiled to WebAssembly inline, no network.
#pragma once

#include <string>
#include <vector>

#include "config/model_config.h"

namespace wren::explore {

struct PageModels {
  std::vector<ModelConfig> open;     // the models the page opens with
  std::vector<ModelConfig> presets;  // its menu
};
std::string render_page(const PageModels& models);

}  // namespace wren::explore
