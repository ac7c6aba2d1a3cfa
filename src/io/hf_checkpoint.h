// io/: a Hugging Face checkpoint folder read as tensors, and where each tensor of our weight
// map lies in it. The folder holds
//
//   config.json                      mapped by config/hf_config (model_type decides the names)
//   model.safetensors                or shards model-0000i-of-0000n.safetensors listed by
//   model.safetensors.index.json     {"weight_map": {tensor name: shard file name}}
//   tokenizer.json, tokenizer_config.json, generation_config.json   (copied by the converter)
//
// Everything is untrusted: the index may only name plain files in the folder, every tensor it
// lists must be in the shard it names, shapes must be what the config implies, and the dtype
// one of F32, BF16, F16. Errors name the file, the tensor and what was expected.
//
// The per-family name tables are documented in docs/convert.md.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "config/model_config.h"
#include "config/weight_map.h"
#include "io/gguf.h"
#include "io/weights.h"

namespace wren {

// `count` consecutive elements of a source tensor, from element `first`: a safetensors
// tensor (F32 / BF16 / F16), or a GGUF tensor (then `first` and `count` are whole blocks).
// `add` is added to every value (GGUF stores Gemma's norm gains as 1 + w). `stride` > 1: the
// elements first, first + stride, ... (a transposed source; F32 / F16 / BF16 only).
struct ElementRun {
  const TensorView* tensor = nullptr;
  const GgufTensor* gguf = nullptr;
  const MappedFile* file = nullptr;
  uint64_t first = 0, count = 0;
  float add = 0.0f;
  uint64_t stride = 1;
  bool log_of_negated = false;  // the source holds -e^v (llama.cpp's ssm_a for A_log): v = ln(-x)
};

class HfCheckpoint {
 public:
  explicit HfCheckpoint(const std::string& dir);  // throws IoError / ConfigError naming the file

  const std::string& dir() const { return dir_; }
  const std::string& model_type() const { return model_type_; }
  const ModelConfig& config() const { return config_; }
  const TensorSet& tensors() const { return set_; }

  // The elements of weight-map tensor `t` in order, gathered from the checkpoint's tensors
  // (row ranges of fused projections, per-expert tensors stacked, rotary rows de-interleaved).
  // Checks the shapes and dtypes of every source used.
  std::vector<ElementRun> runs(const TensorInfo& t) const;

  // HF tensors that no weight-map tensor reads (reported, not an error: e.g. rotary caches,
  // a tied lm_head.weight, multi-token-prediction layers).
  std::vector<std::string> unused(const WeightMap& map) const;

 private:
  const TensorView& source(const std::string& name, const Shape& expect) const;
  bool has(const std::string& name) const { return set_.find(name).first != nullptr; }
  std::vector<ElementRun> layer_runs(int layer, const std::string& rel, const TensorInfo& t) const;
  std::vector<ElementRun> attention_runs(const std::string& p, const std::string& rel, const TensorInfo& t,
                                         const MixerSpec& m) const;
  std::vector<ElementRun> mla_runs(const std::string& p, const std::string& rel, const TensorInfo& t,
                                   const MixerSpec& m) const;
  std::vector<ElementRun> granite_hybrid_ffn_runs(const std::string& p, const std::string& rel, const TensorInfo& t) const;
  std::vector<ElementRun> mamba2_runs(const std::string& p, const std::string& rel, const TensorInfo& t,
                                      const MixerSpec& m) const;
  std::vector<ElementRun> lfm2_runs(int layer, const std::string& p, const std::string& rel, const TensorInfo& t) const;
  std::vector<ElementRun> gdn_runs(const std::string& p, const std::string& rel, const TensorInfo& t,
                                   const MixerSpec& m) const;
  std::vector<ElementRun> gate_or_up(const std::string& name, const Shape& fused, bool gate) const;
  std::vector<ElementRun> granite_moe_runs(const std::string& p, const std::string& rel, const TensorInfo& t) const;
  std::vector<ElementRun> ffn_runs(const std::string& p, const std::string& rel, const TensorInfo& t,
                                   const FfnSpec& f) const;
  std::vector<ElementRun> whole(const std::string& name, const Shape& expect) const;
  ElementRun rows(const std::string& name, const Shape& expect, int64_t first_row, int64_t count) const;

  std::string dir_, model_type_, prefix_;  // prefix_: "model." or the multimodal "model.language_model."
  std::string head_name_;
  ModelConfig config_;
  TensorSet set_;
};

}  // namespace wren
