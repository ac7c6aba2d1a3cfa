// runtime/: making a model directory out of another model's tensors: a Hugging Face
// checkpoint folder (wren convert) or a model directory in another storage type (wren quantize).
//
// Streaming: each weight-map tensor is read a block of rows at a time from the mapped source
// (pages released behind the reader), encoded in its storage type and written; nothing holds a
// whole tensor, so resident memory stays bounded (~16 MB of rows plus buffers) whatever the
// model's size. Output goes to a temporary directory renamed at the end (io/model_dir);
// an error or a stop request removes it.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "io/hf_checkpoint.h"
#include "io/model_dir.h"

namespace wren {

// Where one weight's values come from: elements of F32 / BF16 / F16 source tensors in order,
// or a stored weight of a model directory (decoded by rows; copied byte for byte when the
// target storage is the same type with the same group).
struct TensorValues {
  std::vector<ElementRun> runs;
  const WeightView* stored = nullptr;
};
using ValuesFor = std::function<TensorValues(const TensorInfo&)>;

struct ConvertProgress {
  int done = 0, total = 0;  // tensors written / in the map
  std::string tensor;       // the last one written
  uint64_t bytes = 0;       // bytes written so far
  double error = 0;         // with measure_error: ||x - stored(x)|| / ||x|| of that tensor (0 when copied)
};

struct ConvertOptions {
  kernels::DType dtype = kernels::DType::q8;   // matrices and tables (model/weights.h storage_type)
  std::optional<kernels::DType> lm_head;        // the head's storage (the embedding when tied); unset: dtype
  int group = kernels::kDefaultGroup;           // values per scale for q8 / q4
  bool overwrite = false;
  bool measure_error = false;                   // decode what was stored and report its error (progress.error)
  std::function<void(const ConvertProgress&)> progress;
  const std::atomic<bool>* stop = nullptr;      // set (e.g. by SIGINT): the write stops and leaves nothing
};

// The storage type of `t` under `o` (storage_type, with --lm-head applied to the head).
kernels::DType converted_storage(const TensorInfo& t, const ModelConfig& c, const ConvertOptions& o);

// Writes DIR for `c`, each weight's values from `values`. `files` carries the tokenizer and the
// extra files (io/model_dir.h).
void write_converted_model(const std::string& dir, const ModelConfig& c, const ValuesFor& values,
                           const ConvertOptions& o, ModelDirWriteOptions files);

// A Hugging Face folder -> a model directory: config.json mapped (config/hf_config),
// tensors by io/hf_checkpoint, tokenizer.json copied, tokenizer_config.json and
// generation_config.json (BOS / EOS, chat template) kept beside it. Returns the HF tensors no
// weight reads (for the caller to report).
std::vector<std::string> convert_hf_checkpoint(const std::string& src, const std::string& dst, const ConvertOptions& o);

// A GGUF file -> a model directory (runtime/gguf_import.h): Q8_0 / Q4_0 copied bit for bit
// into q8 / q4 at group 32, other types dequantised and stored as o.dtype. Progress reports
// each tensor's storage error (o.measure_error is forced on). Returns the GGUF tensors left out.
std::vector<std::string> convert_gguf_file(const std::string& src, const std::string& dst, ConvertOptions o);

// A model directory re-encoded in o.dtype (o.lm_head for the head); every other file kept.
void quantize_model_dir(const std::string& src, const std::string& dst, const ConvertOptions& o);

}  // namespace wren
