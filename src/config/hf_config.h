// config/: import of a Hugging Face config.json into our one model description.
//
// The supported `model_type`s are those of hf_model_types(). Field names and defaults follow
// the transformers configuration classes; a field that decides a shape (widths, head and layer
// counts, expert counts) is required. A missing or ill-typed field the mapping needs, an
// unknown model_type, or a feature our description cannot express is a ConfigError naming the
// file, the field and what was expected. Fields the mapping does not need are ignored.
#pragma once

#include <string>
#include <vector>

#include "config/json_reader.h"
#include "config/model_config.h"

namespace wren {

// Maps a parsed config.json; `origin` names it in errors and, without "_name_or_path", the model.
ModelConfig import_hf_config(const Json& j, const std::string& origin);

// Reads and maps a config.json file (or a model directory holding one).
ModelConfig load_hf_config(const std::string& path);

const std::vector<std::string>& hf_model_types();

}  // namespace wren
