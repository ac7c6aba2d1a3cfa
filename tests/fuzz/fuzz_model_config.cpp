// libFuzzer target: the model description (config/parse) from any bytes, and the weight map
// of whatever it accepts. A config it accepts must write and read back to the same JSON.
// links: wren_config
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "config/parse.h"
#include "config/weight_map.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    const wren::Json j = wren::parse_json(std::string_view(reinterpret_cast<const char*>(data), size), "fuzz.json",
                                          wren::kConfigJsonLimits);
    const wren::ModelConfig c = wren::parse_model_config(j, "fuzz.json");
    const wren::Json written = wren::to_json(c);
    if (wren::to_json(wren::parse_model_config(written, "written")) != written) std::abort();
    (void)wren::build_weight_map(c);
  } catch (const wren::ConfigError&) {
  }
  return 0;
}
