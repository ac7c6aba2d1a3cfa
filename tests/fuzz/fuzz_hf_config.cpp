// libFuzzer target: the Hugging Face config.json import (config/hf_config) from any bytes. An
// accepted import must read back through the model-description reader.
// links: wren_config
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "config/hf_config.h"
#include "config/parse.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    const wren::Json j = wren::parse_json(std::string_view(reinterpret_cast<const char*>(data), size),
                                          "fuzz/config.json", wren::kConfigJsonLimits);
    const wren::ModelConfig c = wren::import_hf_config(j, "fuzz/config.json");
    (void)wren::parse_model_config(wren::to_json(c), "written");
  } catch (const wren::ConfigError&) {
  }
  return 0;
}
