// train/: manifold-constrained hyper-connections (mHC; DeepSeek, arXiv 2512.24880; NOTES.md 2)
// over whole sequences, mirroring model/mhc.h. The residual state is n streams per token,
// x [B, T, n, d]; vec(x) [B, T, n d] is their concatenation (stream-major, as the engine's
// [n][d]). At each sublayer boundary, with the boundary's phi [n d, n^2 + 2n], alpha [3] and
// bias [n^2 + 2n]:
//   r    = 1 / sqrt(mean(vec(x)^2) + eps),   m = r vec(x) phi
//   pre  = sigmoid(a0 m[0:n] + b[0:n])                   read weights
//   post = 2 sigmoid(a1 m[n:2n] + b[n:2n])               write weights
//   C    = Sinkhorn-Knopp(exp(a2 m[2n:] + b[2n:] as n x n, row j column k))
//   read:  h = sum_j pre_j x_j;   write: x'_k = post_k f + sum_j C[j,k] x_j,  f = F(RMSNorm(h))
// Streams start as n copies of the embedding; the read-out before the final norm is
//   gate: y = sum_j w_j x_j,  w = sigmoid(alpha r vec(x) phi + b) + 1e-6;   sum: w = 1.
#pragma once

#include <torch/torch.h>

#include "config/model_config.h"

namespace wren::train {

// One boundary's tensors (or the read-out gate's: phi [n d, n], alpha [1], bias [n]).
struct MhcParams {
  torch::Tensor phi, alpha, bias;
};

// What one boundary computed for every token.
struct MhcBoundary {
  torch::Tensor pre, post;  // [B, T, n]
  torch::Tensor C;          // [B, T, n, n]: C[.., j, k] is stream j's weight in new stream k
};

// x [B, T, d] -> [B, T, n, d]: n copies of the embedding.
torch::Tensor mhc_init_streams(const torch::Tensor& embedding, int n);

// Sinkhorn-Knopp on exp(logits) [..., n, n] in the log domain: each of `iters` rounds makes
// every row sum to 1, then every column (DeepSeek's order, as the engine's sinkhorn()).
torch::Tensor sinkhorn(const torch::Tensor& logits, int iters);

// pre, post and C of one boundary from the streams x [B, T, n, d].
MhcBoundary mhc_coefficients(const MhcParams& w, const torch::Tensor& x, const ModelConfig& c);

// h = sum_j pre_j x_j: [B, T, d].
torch::Tensor mhc_read(const MhcBoundary& b, const torch::Tensor& x);

// x'_k = post_k f + sum_j C[j,k] x_j: [B, T, n, d] from x [B, T, n, d] and f [B, T, d].
torch::Tensor mhc_write(const MhcBoundary& b, const torch::Tensor& x, const torch::Tensor& f);

// The read-out y [B, T, d] before the final norm (c.residual.readout: gate or sum).
torch::Tensor mhc_readout(const MhcParams& w, const torch::Tensor& x, const ModelConfig& c);

}  // namespace wren::train
