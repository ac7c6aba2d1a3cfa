// config/: ModelConfig from and to JSON, with validation, and the embedded presets.
#pragma once

#include <string>
#include <vector>

#include "config/json_reader.h"
#include "config/model_config.h"

namespace wren {

// Parses and validates; throws ConfigError naming `origin`, the field path, the value and
// what was expected. Unknown fields are errors.
ModelConfig parse_model_config(const Json& j, const std::string& origin);

// The schedule checks (run by parse_model_config; exposed for configs built in code).
void validate_model_config(const ModelConfig& c, const std::string& origin);

// Writes the canonical JSON form (every field explicit; parse_model_config reads it back).
Json to_json(const ModelConfig& c);

std::vector<std::string> preset_names();
ModelConfig load_preset(const std::string& name);
// A preset name, a path to a config JSON file, or a model directory holding config.json.
ModelConfig resolve_model_config(const std::string& name_or_path);

}  // namespace wren
