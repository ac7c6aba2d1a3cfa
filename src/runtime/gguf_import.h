// runtime/: a GGUF model file read as one of ours: the config built from its metadata (through
// the same Hugging Face mapping, config/hf_config, so both sources mean the same thing), the
// tensors of our weight map found by their llama.cpp names, and a tokenizer.json built from
// the tokenizer.ggml.* metadata. The name table is in docs/convert.md.
//
//   architectures: llama, qwen2, qwen3, qwen3moe, olmoe, gemma, gemma2, gemma3, deepseek2 (MLA:
//                  q_a / q_b or q, kv_a_mqa, kv_b or the split k_b / v_b; leading dense layers;
//                  shared and routed experts), phi3, smollm3, olmo2, granite, granitemoe,
//                  exaone4, qwen35, qwen35moe, qwen3next (Gated DeltaNet; Qwen3.5's value heads
//                  tiled, read back in transformers' order), lfm2 (short convolutions)
//   tensor types:  F32, F16, BF16, Q8_0, Q4_0 (both copied bit for bit into q8 / q4 at group 32),
//                  Q4_K, Q5_K, Q6_K (dequantised, then stored in the requested type)
//
// llama.cpp's `llama` architecture rotates interleaved pairs and its converter permuted the q
// and k rows accordingly; we rotate halves, so those rows are permuted back (row 2i + a of a
// head becomes row a d/2 + i). Gemma's norm gains are stored as 1 + w: we subtract the 1.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "config/json_reader.h"
#include "config/model_config.h"
#include "config/weight_map.h"
#include "io/gguf.h"
#include "io/hf_checkpoint.h"
#include "kernels/ops.h"

namespace wren {

class GgufModel {
 public:
  explicit GgufModel(const std::string& path);  // IoError / ConfigError naming the file and key

  const GgufFile& file() const { return file_; }
  const std::string& architecture() const { return arch_; }
  const ModelConfig& config() const { return config_; }
  const Json& hf_config() const { return hf_; }  // the config.json the metadata stands for

  std::vector<ElementRun> runs(const TensorInfo& t) const;
  std::vector<std::string> unused(const WeightMap& map) const;

  // tokenizer.json for tokenizer.ggml.model "gpt2" (byte-level BPE) or "llama" (SentencePiece
  // BPE with byte fallback); anything else is an error naming the tokenizer kind.
  std::string tokenizer_json() const;
  // tokenizer_config.json: bos_token, eos_token, chat_template from the metadata.
  std::string tokenizer_config_json() const;

 private:
  std::string byte_level_tokenizer_json(const GgufValue& tokens, const GgufValue* types) const;
  std::string sentencepiece_tokenizer_json(const GgufValue& tokens, const GgufValue* types) const;
  const GgufTensor& source(const std::string& name, const Shape& expect) const;
  ElementRun rows(const GgufTensor& t, int64_t first, int64_t count, float add = 0.0f) const;
  std::vector<ElementRun> mla_runs(const std::string& rel, const std::string& name, const TensorInfo& t,
                                   const MixerSpec& m) const;
  std::vector<ElementRun> permuted_rows(const std::string& name, const Shape& expect, int heads) const;
  std::optional<std::vector<ElementRun>> fused_runs(int layer, const std::string& rel, const std::string& name,
                                                    const TensorInfo& t) const;
  std::optional<std::vector<ElementRun>> lfm2_runs(int layer, const std::string& rel, const TensorInfo& t) const;
  std::optional<std::vector<ElementRun>> mamba2_runs(int layer, const std::string& rel, const TensorInfo& t) const;
  std::optional<std::vector<ElementRun>> qwen_hybrid_runs(int layer, const std::string& rel, const TensorInfo& t) const;
  std::string gguf_name(const TensorInfo& t) const;

  GgufFile file_;
  std::string arch_;
  Json hf_;
  ModelConfig config_;
};

// The GGUF name of a weight-map tensor ("layers.3.attn.wq" -> "blk.3.attn_q.weight"), or ""
// when llama.cpp has none. Shared by import and export.
std::string gguf_tensor_name(const std::string& wren_name, bool gemma);

// llama.cpp's rope_freqs.weight for a Llama-3 scaling: each frequency's divisor f_i / f'_i,
// through the engine's own rule (kernels::rope_inv_freq). Export writes it; import checks a
// file's divisors against it.
std::vector<float> llama3_divisors(int rotary_dim, double theta, const kernels::RopeScaling& scaling);

}  // namespace wren
