// The gated short convolution over whole sequences (train/short_conv.h).
#include "train/short_conv.h"

#include <stdexcept>
#include <string>

namespace wren::train {

torch::Tensor gated_short_conv(const ShortConvParams& p, const MixerSpec& m, const Layout& l, const torch::Tensor& xn) {
  const int64_t d = xn.size(-1);
  for (const torch::Tensor* w : {&p.w_b, &p.w_c, &p.w_x, &p.wo})
    if (!w->defined() || w->sizes() != torch::IntArrayRef({d, d}))
      throw std::invalid_argument("train::gated_short_conv: a projection is missing or not [d, d]");
  if (!p.conv.defined() || p.conv.sizes() != torch::IntArrayRef({d, int64_t(m.conv_kernel)}))
    throw std::invalid_argument("train::gated_short_conv: attn.conv is missing or not [d, " + std::to_string(m.conv_kernel) + "]");
  const torch::Tensor b = linear_map(xn, p.w_b), c = linear_map(xn, p.w_c), x = linear_map(xn, p.w_x);
  return linear_map(c * causal_conv(b * x, p.conv, l), p.wo);
}

}  // namespace wren::train
