// mHC residual streams over whole sequences, the batched form of model/mhc.cpp (the equations
// are in train/mhc.h).
#include "train/mhc.h"

#include "model/mhc.h"

namespace wren::train {

namespace {

// m = r vec(x) phi with r = 1 / sqrt(mean(vec(x)^2) + eps): [B, T, outputs].
torch::Tensor project(const torch::Tensor& phi, const torch::Tensor& x, double eps) {
  const torch::Tensor flat = x.flatten(-2);  // vec(x): [B, T, n d]
  const torch::Tensor r = torch::rsqrt(flat.pow(2).mean(-1, true) + eps);
  return torch::matmul(flat, phi) * r;
}

}  // namespace

torch::Tensor mhc_init_streams(const torch::Tensor& embedding, int n) {
  return embedding.unsqueeze(-2).expand({embedding.size(0), embedding.size(1), n, embedding.size(2)}).contiguous();
}

torch::Tensor sinkhorn(const torch::Tensor& logits, int iters) {
  torch::Tensor M = logits;
  for (int it = 0; it < iters; ++it) {
    M = M - torch::logsumexp(M, -1, true);  // rows j: sum_k exp(M[j,k]) = 1
    M = M - torch::logsumexp(M, -2, true);  // columns k: sum_j exp(M[j,k]) = 1
  }
  return torch::exp(M);
}

MhcBoundary mhc_coefficients(const MhcParams& w, const torch::Tensor& x, const ModelConfig& c) {
  const int64_t n = x.size(-2);
  const torch::Tensor m = project(w.phi, x, c.norm.eps);  // [B, T, n^2 + 2n]
  MhcBoundary b;
  b.pre = torch::sigmoid(w.alpha[0] * m.narrow(-1, 0, n) + w.bias.narrow(0, 0, n));
  b.post = 2.0 * torch::sigmoid(w.alpha[1] * m.narrow(-1, n, n) + w.bias.narrow(0, n, n));
  const torch::Tensor R = w.alpha[2] * m.narrow(-1, 2 * n, n * n) + w.bias.narrow(0, 2 * n, n * n);
  b.C = sinkhorn(R.unflatten(-1, {n, n}), c.residual.sinkhorn_iters);
  return b;
}

torch::Tensor mhc_read(const MhcBoundary& b, const torch::Tensor& x) {
  return (b.pre.unsqueeze(-1) * x).sum(-2);
}

torch::Tensor mhc_write(const MhcBoundary& b, const torch::Tensor& x, const torch::Tensor& f) {
  // sum_j C[j,k] x_j = (C^T x)_k over the stream axis.
  return b.post.unsqueeze(-1) * f.unsqueeze(-2) + torch::matmul(b.C.transpose(-1, -2), x);
}

torch::Tensor mhc_readout(const MhcParams& w, const torch::Tensor& x, const ModelConfig& c) {
  if (c.residual.readout == StreamReadout::sum) return x.sum(-2);
  const torch::Tensor g = torch::sigmoid(w.alpha[0] * project(w.phi, x, c.norm.eps) + w.bias) + kMhcReadoutEps;
  return (g.unsqueeze(-1) * x).sum(-2);
}

}  // namespace wren::train
