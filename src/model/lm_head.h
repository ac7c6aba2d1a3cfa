// model/: the LM head with a 4-bit pre-score (seed 002: "we score every vocabulary row with
// 4-bit weights and, after a selection step, rescore a subset in fp16"). The head is the
// largest single matrix a decode step reads; a 4-bit copy made at load scores every row at
// about half the bytes, and only the rows that can still be among the best are read again in
// the head's stored precision.
//
// Selection (safe, not heuristic). For row r let p_r = Q4_r . x (the pre-score) and
// z_r = W_r . x (the exact logit, as kernels::matvec computes it from the stored head). Then
//   |z_r - p_r| <= b_r = c_r ||x||_2,   c_r = ||W_r - Q4_r||_2 + gamma (||W_r||_2 + ||Q4_r||_2)
// by Cauchy-Schwarz on (W_r - Q4_r) . x, plus the f32 rounding of both dot products
// (|fl(a . x) - a . x| <= gamma ||a||_2 ||x||_2 with gamma = (n + 4) 2^-24, for any order of
// summation). c_r is computed at load from the two copies themselves. With L the keep-th
// largest lower bound p_s - b_s, every row with p_r + b_r < L has at least `keep` rows whose
// exact logit is surely larger, so it cannot be among the exact top `keep`: the candidates
//   C = { r : p_r + b_r >= L }
// contain the exact top `keep` rows (ties included), and those are rescored exactly. The
// logits written are the exact z_r for r in C and -inf elsewhere, so the top `keep` of the
// written logits, their order and their values equal the exact head's. keep = 1 makes greedy
// decoding identical to the exact head; keep = top_k makes top-k sampling (and the top-p,
// min-p and temperature that act on the top k after it) draw from exactly the distribution
// the exact head gives. When C would be so large that rescoring costs more than it saves
// (|C| > rows / 4), the whole head is run exactly instead.
//
// The integer matvec (kernels/ops.h) dots the rows with x^, x rounded to 8 bits per group of
// G: |x_i - x^_i| <= s_g / 2 = max_g |x| / 254, so ||x - x^||_2 <= e_G ||x||_2 with
// e_G = sqrt(G) / 254. The pre-score is then Q4_r . x^_32, and the bound becomes
//   b_r = (c_r (1 + e_32) + ||W_r||_2 d) ||x||_2,
// d the bound on ||x^_head - x^_32|| / ||x||: 0 when the head is q8 with groups of 32 (both
// products see the same x^), e_32 for an f32 / bf16 head (its product sees x), e_G + e_32
// for a q8 head of another group G; and b_r = c_r ||x||_2 in the f32-activation parity mode.
#pragma once

#include <algorithm>
#include <cstdint>
#include <memory>
#include <vector>

#include "kernels/threads.h"
#include "kernels/types.h"
#include "model/tensor.h"
#include "model/weights.h"

namespace wren {

struct LmHeadPrescore {
  kernels::Matrix q4;      // the 4-bit copy [rows][cols], group 32
  // q4's view with its decode-order copy (PackedWeights), which the pre-score streams: the
  // packed q4 kernel reads it ~3x faster than the stored rows, and it is 1/8 of a token's bytes.
  PackedWeights packed;
  MatrixView scored;
  std::vector<float> c;    // c_r above: |z_r - p_r| <= c_r ||x||_2 for f32 products
  std::vector<float> w_norm;  // ||W_r||_2, for the rounding of x (see above)
};

// The terms of b_r for `head` under the kernels' current mode: b_r = of(pre, r, ||x||_2).
struct LmHeadBound {
  float c_scale = 1, d = 0;  // 1 + e_32 and d above
  float of(const LmHeadPrescore& pre, int64_t r, float x_norm) const {
    return (pre.c[size_t(r)] * c_scale + pre.w_norm[size_t(r)] * d) * x_norm;
  }
};
LmHeadBound lm_head_bound(const MatrixView& head);

// The pre-score copy of `head`, or null when it would not save bytes (a head already in
// 4 bits) or cannot be made (cols not a multiple of 32).
std::shared_ptr<const LmHeadPrescore> make_lm_head_prescore(const MatrixView& head);

struct LmHeadMode {
  bool prescore = false;  // false: the exact head (perplexity, tests, `--lm-head exact`)
  int keep = 1;           // rows whose exact logits must be right: 1 greedy, top_k sampling
};

// What one call read: the rows rescored exactly (all of them when the head ran exactly).
struct LmHeadRead {
  int64_t rescored = 0;
  bool prescored = false;
  double bytes = 0;  // of the head: the 4-bit copy (when used) + the rows read in its stored type
};

// Buffers sized once for a head (no allocation per token).
struct LmHeadScratch {
  std::vector<float> upper, lower;     // per row: p_r, then p_r + b_r in place; p_r - b_r
  std::vector<int32_t> candidates;
  std::vector<uint8_t> gathered;        // candidate rows' values, in the head's storage type
  std::vector<uint8_t> gathered_packed; // and in decode order, when the head has that copy
  std::vector<kernels::F16> gathered_scales;
  std::vector<float> rescored;
  void reserve(const MatrixView& head);
};

// When to pre-score. A token whose candidates stay more than a quarter of the rows saves
// nothing and reads the 4-bit copy on top of the exact head, 1.5x the head's bytes: a model
// whose logits are nearly flat (random weights; a trained model now and then) pays that on
// every token. After f >= 2 such tokens in a row the pre-score sits out the next
// min(2^(f - 2), kMaxSkip) tokens, so a model it never helps pays the copy once per
// kMaxSkip + 1 tokens, and a model it helps loses at most one token's saving to a lone pair
// of failures. The logits are the same with or without the pre-score (see above), so this
// changes only the bytes read.
class LmHeadBackoff {
 public:
  static constexpr int kMaxShift = 6, kMaxSkip = 1 << kMaxShift;
  // Whether this token tries the pre-score; when it does, record() its outcome.
  bool try_prescore() {
    if (skip_ == 0) return true;
    --skip_;
    return false;
  }
  void record(bool saved) {
    failures_ = saved ? 0 : std::min(failures_ + 1, 2 + kMaxShift);  // counted up to where the wait stops growing
    if (failures_ >= 2) skip_ = 1 << (failures_ - 2);
  }

 private:
  int failures_ = 0;  // pre-scored tokens in a row that saved nothing
  int skip_ = 0;      // tokens left to run on the exact head
};

// logits[0 .. head.rows) = head x (exact), or, with mode.prescore and a pre-score copy, the
// exact logits of the candidates and -inf for every other row (see above).
LmHeadRead lm_head_logits(const MatrixView& head, const LmHeadPrescore* pre, const LmHeadMode& mode, const float* x,
                          float* logits, LmHeadScratch& s, kernels::ThreadPool* pool);

}  // namespace wren
