// model/: the rotary frequencies a layer's config asks for. Llama-3 scaling is the kernels';
// linear interpolation, YaRN (DeepSeek, gpt-oss) and LongRoPE (Phi-3) are formed here from the
// same Rope fields the explorer and the trainer read.
#pragma once

#include <cstdint>
#include <vector>

#include "config/model_config.h"

namespace wren {

struct RopeTable {
  std::vector<float> inv_freq;       // [rotary_dim / 2]
  std::vector<float> inv_freq_long;  // LongRoPE: the frequencies from position long_from on; else empty
  int64_t long_from = 0;
  float magnitude = 1.0f;            // YaRN, LongRoPE: rotated components scaled by this
  float score_scale = 1.0f;          // YaRN: softmax scale multiplied by m(f, mscale_all_dim)^2

  // The frequencies position `pos` rotates by.
  const float* freq_at(int64_t pos) const {
    return !inv_freq_long.empty() && pos >= long_from ? inv_freq_long.data() : inv_freq.data();
  }
};

// YaRN's attention factor m(s, k) = 0.1 k ln s + 1 for s > 1, else 1.
double yarn_mscale(double scale, double k);

RopeTable rope_table(const Rope& r, int rotary_dim);

// The table a layer's mixer rotates by, set up once for the engine and the trainer: MLA's
// (mla_rope, over its rope part), else rope_table over rotary_dim (0: head_dim); empty
// without RoPE.
RopeTable layer_rope(const MixerSpec& m);

}  // namespace wren
