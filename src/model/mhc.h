// model/: manifold-constrained hyper-connections (mHC; DeepSeek, arXiv 2512.24880; NOTES.md 2).
// The residual stream is n streams x_1..x_n of width d, stored [n][d]; vec(x) is their
// concatenation (index j d + c). Each sublayer boundary has phi [n d, n^2 + 2n] (rows indexed
// by vec(x), so the projection is the row vector vec(x) phi), alpha [3] and bias [n^2 + 2n]:
//   r    = 1 / sqrt(mean(vec(x)^2) + eps),   m = r vec(x) phi            (n^2 + 2n values)
//   pre  = sigmoid(a0 m[0:n] + b[0:n])                                   read weights
//   post = 2 sigmoid(a1 m[n:2n] + b[n:2n])                               write weights
//   R    = a2 m[2n:] + b[2n:] as n x n (row j, column k),  C = Sinkhorn-Knopp(exp(R))
//   read:  h = sum_j pre_j x_j            (the caller RMSNorms h and runs the sublayer F)
//   write: x'_k = post_k f + sum_j C[j,k] x_j,   f = F(RMSNorm(h))
// Streams start as n copies of the embedding; at the end one vector is read out of them
// (mhc_readout) before the final norm. The projection's rows (n d (n^2 + 2n) weights, ~92k
// for Nenya, read from memory at every boundary: the layers' weights evict them) are shared
// among the pool's threads when one is given: on one thread they were 4% of nenya's decode,
// the other core idle. The rest is a few vectors of width d and runs on the caller.
#pragma once

#include <cstdint>
#include <vector>

#include "config/model_config.h"
#include "kernels/threads.h"
#include "model/tensor.h"

namespace wren {

// One boundary's weights (or the read-out gate's: phi [n d, n], alpha [1], bias [n]).
struct MhcWeights {
  MatrixView phi;
  Vec alpha, bias;
  // phi^T [n^2 + 2n, n d] (the same values), made at load (model.cpp) when phi is f32 or bf16:
  // m = phi^T vec(x) is then n^2 + 2n dot products of length n d, each row read in one pass,
  // where vec(x) phi sums n d short rows (24 values for Nenya) one by one. Else empty.
  MatrixView phi_t = {};
};

// What one boundary computed for the current token.
struct MhcBoundary {
  std::vector<float> pre, post;  // [n] each
  std::vector<float> C;          // [n][n] row-major: C[j n + k] is stream j's weight in new stream k
};

// Per-session buffers; they grow on first use and are reused afterwards.
struct MhcScratch {
  std::vector<float> m, old;
  std::vector<const float*> rows;  // the rows a read or write mixes
  std::vector<float> weights;      // mhc_write's [n][n + 1] weights of those rows
  std::vector<int32_t> row_ids;
  void reserve(int n, int d);
};

// streams[j] = embedding for j < n.
void mhc_init_streams(const float* embedding, int n, int d, float* streams);

// Sinkhorn-Knopp on exp(M), in place: M holds finite logits [n][n] on entry and the scaled
// matrix on return. Each of the `iters` rounds normalises every row to sum 1, then every
// column (DeepSeek's order: the first round's row step is a row softmax). The result's columns
// sum to 1 up to rounding, so every new stream x'_k is a convex mix of the old ones. Its rows
// converge geometrically at a rate set by the logits' spread: 20 rounds give row sums within
// 1e-5 of 1 for random logits of spread ~0.5, but only ~1e-2 for spread 2 or for a strong
// diagonal plus noise (hundreds of rounds there). The exact init matrix (mhc_bias) is already
// doubly stochastic. The engine runs the configured rounds, as training does, so C is the
// approximately doubly stochastic matrix the model was trained with.
// Runs on exp(M) in double, each row shifted by its max, while every logit is within 200 of
// its row's max (n <= 8); else in the log domain (each step subtracts a log-sum-exp taken
// relative to the max), so no logit overflows exp and no row or column underflows to zeros.
void sinkhorn(float* M, int n, int iters);

// pre, post and C of one boundary from the streams ([n][d]); `iters` Sinkhorn rounds.
// Throws std::runtime_error if the weights' shapes do not match n and d.
void mhc_coefficients(const MhcWeights& w, int n, int d, float eps, int iters, const float* streams, MhcBoundary& b,
                      MhcScratch& s, kernels::ThreadPool* pool = nullptr);

// h = sum_j pre_j x_j.
void mhc_read(const MhcBoundary& b, int n, int d, const float* streams, float* h, MhcScratch& s);

// x'_k = post_k f + sum_j C[j,k] x_j for every stream, in place.
void mhc_write(const MhcBoundary& b, int n, int d, const float* f, float* streams, MhcScratch& s);

// The read-out before the final norm, y = sum_j w_j x_j with
//   gate: w = sigmoid(alpha r vec(x) phi + b) + kMhcReadoutEps  (DeepSeek's head, REFERENCES.md)
//   sum:  w = 1 (`w` unused).
// `weights` (n values) receives w when not null.
constexpr float kMhcReadoutEps = 1e-6f;
void mhc_readout(StreamReadout readout, const MhcWeights& w, int n, int d, float eps, const float* streams, float* y,
                 MhcScratch& s, float* weights = nullptr, kernels::ThreadPool* pool = nullptr);

}  // namespace wren
