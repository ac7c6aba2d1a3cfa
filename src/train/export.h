// train/: a reference model to and from a model directory (io/model_dir.h), the unit the
// engine loads. The model's tensors are the weight map's, in its layouts, so export is a copy
// (plus the conversion to each tensor's storage type, model/weights.h storage_type).
#pragma once

#include <string>

#include "config/model_config.h"
#include "kernels/types.h"
#include "train/model.h"

namespace wren::train {

// Writes DIR (config.json, the weights, engram.safetensors, tokenizer.json) from `model`,
// whose config must be `c`'s (same weight map). Matrices and tables are stored in
// `matrices` (q8 / q4 with kernels::kDefaultGroup values per scale, bf16 for rows too short
// for a group); routers, norms and vectors stay f32. Written to a temporary name, then renamed.
void export_model_dir(const Model& model, const ModelConfig& c, const std::string& dir,
                      const std::string& tokenizer_json, kernels::DType matrices, bool overwrite = false);

// Reads the weights of model directory DIR (any storage type, decoded to f32) into `model`.
// DIR's weight map must equal the model's (names and shapes); errors name the tensor.
void load_model_dir_into(Model& model, const std::string& dir);

}  // namespace wren::train
