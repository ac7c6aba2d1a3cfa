// runtime/: a model directory of an ordinary architecture written as a GGUF file that
// llama.cpp runs: the architecture chosen from the config's features (llama, qwen2, qwen3,
// qwen3moe, olmoe, gemma2, gemma3; MLA: deepseek2), the metadata llama.cpp reads for it, the
// tokenizer as tokenizer.ggml.* (byte-level BPE, "gpt2"), and the tensors under llama.cpp's names:
// f32 -> F32, bf16 -> BF16, q8 / q4 at group 32 -> Q8_0 / Q4_0 bit for bit, q8 / q4 at other
// groups -> F32 (exact). The inverse of gguf_import.h, permutations and Gemma's 1 + w included.
//
// Mechanisms GGUF cannot express (attention residuals, mHC, engrams, Gated DeltaNet,
// ReLU^2 and sparse attention, output gates, sinks, latent MoE, bridged or reused K/V, ...)
// are refused with an error naming them.
#pragma once

#include <atomic>
#include <string>

namespace wren {

struct GgufExportOptions {
  bool overwrite = false;
  const std::atomic<bool>* stop = nullptr;  // set: stop and leave nothing
};

// Returns the llama.cpp architecture written.
std::string export_gguf(const std::string& model_dir, const std::string& path, const GgufExportOptions& o = {});

}  // namespace wren
