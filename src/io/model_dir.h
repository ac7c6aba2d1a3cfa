// io/: the model directory, the unit the engine loads and the trainer / converter writes.
//
//   DIR/config.json          the ModelConfig (config/parse.h), canonical JSON
//   DIR/tokenizer.json       checked here only for model.vocab fitting vocab_size + vocab_pad rows
//   DIR/*.safetensors        the weights of the weight map, spread over any number of files
//   DIR/engram.safetensors   the engram tables (TensorInfo::engram_file): read by row, never whole
//
// Opening validates all of it: every weight-map tensor present once with the right shape and
// a storage type of weights.h, nothing else present. Writing goes to DIR.tmp-XXXXXX, renamed
// to DIR at the end, so a crash never leaves a half-written model under DIR.
#pragma once

#include <functional>
#include <map>
#include <string>
#include <unordered_map>

#include "config/json_reader.h"
#include "config/model_config.h"
#include "config/weight_map.h"
#include "io/weights.h"

namespace wren {

inline constexpr const char* kEngramFile = "engram.safetensors";

class ModelFiles {
 public:
  explicit ModelFiles(const std::string& dir);  // throws IoError / ConfigError naming the file

  const std::string& dir() const { return dir_; }
  const ModelConfig& config() const { return config_; }
  const WeightMap& weight_map() const { return map_; }
  const TensorSet& tensors() const { return set_; }
  std::string tokenizer_path() const;
  // tokenizer.json as parsed for the check, handed over once so nobody parses it again
  // (a 200k vocabulary takes a noticeable fraction of a second); null afterwards.
  Json take_tokenizer_json() { return std::move(tokenizer_json_); }

  // The typed view of a weight-map tensor; IoError when the name is not in the weight map.
  const WeightView& weight(const std::string& name) const;

  // pread readers of an engram table's rows (and of its scales' rows when quantized):
  // row r of the [rows, row_dim] table, without mapping or touching any other row.
  struct TableRows {
    RowReader data, scales;  // scales: empty (0 rows) unless q8 / q4
  };
  TableRows table_rows(const std::string& name) const;

 private:
  std::string dir_;
  ModelConfig config_;
  WeightMap map_;
  TensorSet set_;
  Json tokenizer_json_;
  std::unordered_map<std::string, WeightView> weights_;
};

// tokenizer.json must be an object with model.vocab (an object token -> id, or a list) of at
// most c.rows() entries, ids inside [0, rows). `origin` names the file in errors.
void check_tokenizer_json(const Json& j, const ModelConfig& c, const std::string& origin);

// What the writer needs for one weight: its storage type and its bytes, produced on demand so
// that a model bigger than memory streams to disk tensor by tensor.
struct WeightData {
  kernels::DType storage = kernels::DType::f32;
  ByteSource data;      // the main entry in its stored shape (weights.h)
  ByteSource scales;    // q8 / q4: F16 scales [..., cols / group]
  // q8 / q4 in one pass, instead of data + scales (which make the source be read twice):
  // values into the first sink, scales into the second.
  PairedSource values_and_scales;
  int64_t group = 0;    // q8 / q4
};
// WeightData from bytes in memory.
WeightData weight_data(kernels::DType storage, std::vector<uint8_t> data, std::vector<uint8_t> scales = {},
                       int64_t group = 0);

using WeightSupplier = std::function<WeightData(const TensorInfo&)>;

struct ModelDirWriteOptions {
  std::string tokenizer_json;   // the contents of tokenizer.json (required; checked against the config)
  bool overwrite = false;       // replace an existing non-empty DIR
  uint64_t shard_bytes = 0;     // split the weights into model-0000i-of-0000n.safetensors of about
                                // this size; 0: one model.safetensors
  std::map<std::string, std::string> metadata;  // __metadata__ of every safetensors file
  // Further files of the directory, name -> contents (a converted model's
  // tokenizer_config.json, generation_config.json): plain names only.
  std::map<std::string, std::string> extra_files;
};

// Writes a whole model directory: `weights` is called once per weight-map tensor, in map order.
void write_model_dir(const std::string& dir, const ModelConfig& c, const WeightSupplier& weights,
                     const ModelDirWriteOptions& options);

}  // namespace wren
