// runtime/: opening a model directory for the engine, and making one from an initialiser.
// io/ validates and maps the files; this adapts its typed views to the kernels' matrix views
// and hands them to model/load_model.
#pragma once

#include <memory>
#include <string>

#include "io/model_dir.h"
#include "model/model.h"
#include "text/tokenizer.h"

namespace wren {

// Opens DIR (config.json, *.safetensors, engram.safetensors, tokenizer.json), validated.
std::shared_ptr<const Model> open_model(const std::string& dir);

// open_model and the directory's tokenizer, tokenizer.json parsed once for both.
struct OpenedModel {
  std::shared_ptr<const Model> model;
  text::Tokenizer tokenizer;
};
OpenedModel open_model_and_tokenizer(const std::string& dir);

// Writes a randomly initialised model directory for `c` (config/init_rule, model/weights),
// matrices and tables in `matrices` (q8/q4 with `group`), streamed tensor by tensor so that
// full-size models never sit in memory. `tokenizer_json` becomes DIR/tokenizer.json.
void write_random_model(const std::string& dir, const ModelConfig& c, uint64_t seed, kernels::DType matrices,
                        int group, const std::string& tokenizer_json, bool overwrite, int threads);

}  // namespace wren
