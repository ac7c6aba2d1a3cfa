// train/: what every mechanism of the reference model shares: the batch's document layout
// (NOTES.md 4) and the two small operations every sublayer uses, RMSNorm and a projection.
#pragma once

#include <torch/torch.h>

#include <cstdint>

#include "config/model_config.h"

namespace wren::train {

// Where each token of a batch [B, T] sits: its document and its position inside it. An
// end-of-text token is the last token of its document; the next token starts a new one.
struct Layout {
  torch::Tensor tokens;  // [B, T] int64
  torch::Tensor pos;     // [B, T] int64: position within the document (the RoPE position)
  torch::Tensor start;   // [B, T] int64: index of the document's first token in the row
  torch::Tensor causal;  // [B, 1, T, T] bool: key j is in query i's document and j <= i
  torch::Tensor offset;  // [1, 1, T, T] int64: i - j (a window keeps i - j < window)
};

// The layout of `tokens` with documents ended by `eot` (-1: the whole row is one document).
Layout make_layout(const torch::Tensor& tokens, int32_t eot);

// y = x / sqrt(mean(x^2) + eps) * g over the last dimension, g = gain, (1 + gain) with
// unit_offset, or 1 when gain is undefined.
inline torch::Tensor rmsnorm(const torch::Tensor& x, const torch::Tensor& gain, const ModelConfig& c) {
  torch::Tensor y = x * torch::rsqrt(x.pow(2).mean(-1, true) + c.norm.eps);
  if (!gain.defined()) return y;
  return y * (c.norm.unit_offset ? gain + 1.0 : gain);
}

// A sublayer's (or a bridge's) input: RMSNorm(x) with its gain, or x as it is where the
// placement normalises only the sublayer's output (post: OLMo 2's x + norm(f(x))).
inline torch::Tensor sublayer_norm(const torch::Tensor& x, const torch::Tensor& gain, const ModelConfig& c) {
  return c.norm.placement == NormPlacement::post ? x : rmsnorm(x, gain, c);
}

// y = x W^T (+ b): W is [out, in] as in the weight map ([E, out, in] with x [E, N, in] for a
// batch of experts).
inline torch::Tensor linear_map(const torch::Tensor& x, const torch::Tensor& w, const torch::Tensor& b = {}) {
  torch::Tensor y = torch::matmul(x, w.transpose(-2, -1));
  return b.defined() ? y + b : y;
}

// The causal depthwise conv inside each document. taps [C, K]: tap j weights the input K-1-j
// tokens back,
//   y_t = sum_j taps[:, j] * x_{t-(K-1)+j},   x_s = 0 for s before t's document start,
// i.e. the shift by n = K-1-j reads x_{t-n} only where pos_t >= n. x: [B, T, C].
inline torch::Tensor causal_conv(const torch::Tensor& x, const torch::Tensor& taps, const Layout& l) {
  const int64_t T = x.size(1), K = taps.size(1);
  torch::Tensor y = torch::zeros_like(x);
  for (int64_t j = 0; j < K; ++j) {
    const int64_t n = K - 1 - j;
    if (n >= T) continue;  // reaches before every row's start
    torch::Tensor shifted = n ? torch::constant_pad_nd(x.narrow(1, 0, T - n), {0, 0, n, 0}) : x;
    torch::Tensor inside = (l.pos >= n).unsqueeze(-1).to(x.scalar_type());  // [B, T, 1]
    y = y + shifted * inside * taps.select(1, j);
  }
  return y;
}

}  // namespace wren::train
