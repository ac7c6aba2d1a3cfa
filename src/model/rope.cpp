// YaRN (Peng et al., arXiv 2309.00071), as Hugging Face's _compute_yarn_parameters forms it:
//   f_i = theta^(-2i/D);  interpolated f_i / s;  the dimensions whose wavelength makes fewer than
//   beta_slow rotations over the original context are interpolated, more than beta_fast
//   extrapolated, a linear ramp between; the ramp ends are the dimensions
//   d(r) = D ln(L / (2 pi r)) / (2 ln theta), floored / ceiled when truncating.
#include "model/rope.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>

#include "kernels/ops.h"
#include "model/mla.h"

namespace wren {

double yarn_mscale(double scale, double k) { return scale <= 1.0 ? 1.0 : 0.1 * k * std::log(scale) + 1.0; }

RopeTable rope_table(const Rope& r, int rotary_dim) {
  RopeTable t;
  kernels::RopeScaling llama3{r.llama3_factor, r.llama3_low_freq, r.llama3_high_freq, r.llama3_original_context};
  t.inv_freq = kernels::rope_inv_freq(rotary_dim, r.theta, llama3);
  if (r.linear_factor != 1.0)
    for (float& f : t.inv_freq) f = float(f / r.linear_factor);
  if (r.yarn_factor > 0) {
    const double s = r.yarn_factor, D = rotary_dim, L = r.yarn_original_context;
    auto dim_of = [&](double rotations) { return D * std::log(L / (rotations * 2 * M_PI)) / (2 * std::log(r.theta)); };
    double low = dim_of(r.yarn_beta_fast), high = dim_of(r.yarn_beta_slow);
    if (r.yarn_truncate) low = std::floor(low), high = std::ceil(high);
    low = std::max(low, 0.0), high = std::min(high, D - 1);
    if (high == low) high += 0.001;
    for (int i = 0; i < rotary_dim / 2; ++i) {
      const double extrapolation = 1.0 / std::pow(r.theta, 2.0 * i / D);
      const double ramp = std::clamp((i - low) / (high - low), 0.0, 1.0);
      const double keep = 1.0 - ramp;  // the share of the extrapolated (unscaled) frequency
      t.inv_freq[size_t(i)] = float(extrapolation / s * (1.0 - keep) + extrapolation * keep);
    }
    t.magnitude = float(yarn_mscale(s, r.yarn_mscale) / yarn_mscale(s, r.yarn_mscale_all_dim));
    const double all = yarn_mscale(s, r.yarn_mscale_all_dim);
    t.score_scale = float(all * all);
  }
  if (!r.longrope_short.empty()) {
    // f'_i = theta^(-2i/D) / factor_i, short factors below the original context, long from it on.
    if (r.longrope_short.size() != t.inv_freq.size() || r.longrope_long.size() != t.inv_freq.size())
      throw std::runtime_error("rope: LongRoPE needs " + std::to_string(t.inv_freq.size()) + " short and long factors");
    const std::vector<float> plain = t.inv_freq;
    t.inv_freq_long.resize(plain.size());
    for (size_t i = 0; i < plain.size(); ++i) {
      t.inv_freq[i] = float(double(plain[i]) / r.longrope_short[i]);
      t.inv_freq_long[i] = float(double(plain[i]) / r.longrope_long[i]);
    }
    t.long_from = r.longrope_original_context;
    t.magnitude = float(r.longrope_attention);
  }
  return t;
}

RopeTable layer_rope(const MixerSpec& m) {
  if (m.kind == MixerKind::mla) return mla_rope(m);
  if (!m.rope) return {};
  return rope_table(*m.rope, m.rope->rotary_dim ? m.rope->rotary_dim : m.head_dim);
}

}  // namespace wren
