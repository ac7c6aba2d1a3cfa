// kernels/: the numeric operations of the inference engine, on plain arrays.
//
// Every function here is a SIMD version (Highway, the best target of the running CPU chosen
// at run time) of the scalar function of the same name in kernels/reference.h; tests compare
// the two. Vectors are f32. Outputs may alias inputs where a comment says "in place".
// Nothing allocates per call: the few scratch buffers (matmul's decoded row, q4 matvec's
// split x, RoPE's cos/sin) are thread-local and grow once.
#pragma once

#include <cmath>
#include <cstdint>
#include <vector>

#include "kernels/threads.h"
#include "kernels/types.h"

namespace wren::kernels {

// The Highway target the dispatcher picked for this CPU, e.g. "AVX3", "AVX2", "NEON".
const char* active_target();

// ---- Products with a weight matrix (any storage type) ---------------------------------

// y[r] = W[r,:] . x for r < rows.                     x: [cols], y: [rows]
void matvec(const MatrixView& w, const float* x, float* y, ThreadPool* pool = nullptr);
// y[r] += alpha * W[r,:] . x (an expert's output weighted by its gate).
void matvec_add(const MatrixView& w, const float* x, float alpha, float* y,
                ThreadPool* pool = nullptr);
// W[row,:] . x, in f32 for every type (x is not quantised: one row does not repay it).
float dot_row(const MatrixView& w, int64_t row, const float* x);
// y[0:cols) += sum_i coeffs[i] * W[rows[i], :], the rows taken in list order. Reads only the
// listed rows: the ReLU^2 down projection stored one row per neuron (dead_neuron_skip), or
// mHC's vec(x)^T phi. Threads split the columns (group-aligned).
void add_rows(const MatrixView& w, const int32_t* rows, const float* coeffs, int64_t n_rows,
              float* y, ThreadPool* pool = nullptr);
// Y[t] = W X[t] for t < n_tokens (prefill).          x: [n_tokens][cols], y: [n_tokens][rows]
// W is read once per tile of tokens: each row is decoded to f32 once and dotted with the
// whole tile while it sits in L1.
void matmul(const MatrixView& w, const float* x, int64_t n_tokens, float* y,
            ThreadPool* pool = nullptr);

// ---- Integer products: q8 / q4 weights times an 8-bit activation ----------------------
//
// matvec and matvec_add above quantise x once per call and use these. A caller that runs
// its own parallel region (several matrices sharing x, row ranges per thread) quantises x
// once with quantize_activation and calls the *_range functions from each thread.
//
// x is cut into groups of G = the weight's group; per group
//   s_g = max_{i in g} |x_i| / 127,   q_i = round_half_even(x_i / s_g)   (s_g = 0: q = 0),
// so |x_i - s_g q_i| <= s_g / 2, and a row of q8 / q4 weights (scales s_w, values q_w) is
//   W[r,:] . x  ~  sum_g s_w[r,g] s_g sum_{i in g} q_w[r,i] q_i,
// the inner sum exact in int32 and f32 only for the per-group scale product. A non-finite
// x_i makes its group's s_g NaN, so the affected dots are NaN as in f32.
// The rows an activation is quantised for (bits of QuantizedActivation::rows): each
// precision reads q in its own arrangements, and making one that no row reads costs as much
// as the groups themselves (decode quantises ~200 activations a token on the caller while
// the other threads wait).
enum ActivationRows : unsigned { kForQ8Rows = 1u, kForQ4Rows = 2u, kForAnyRows = 3u };
// The bit of a q8 / q4 matrix's rows.
ActivationRows activation_rows(DType type);

struct QuantizedActivation {
  int64_t n = 0;                // values
  int group = 0;                // G; n % G == 0
  unsigned rows = 0;            // ActivationRows whose arrangements below are filled
  std::vector<int8_t> q;        // [n] q_i
  // [n] q in the order of q4 weight nibbles: each block of 32 columns as its 16 even then
  // its 16 odd columns (low nibbles then high nibbles of 16 bytes). Filled for q4 rows when
  // G % 32 == 0.
  std::vector<int8_t> q_nibble_order;
  // [n] q and q_nibble_order in decode order (pack_for_dot below), for packed q8 and q4
  // weights: whole 256-column blocks transposed, and the tail of T < 8 groups as well.
  // Filled for q8 and q4 rows respectively when G == 32; otherwise never read.
  std::vector<int8_t> q_lanes, q_nibble_lanes;
  std::vector<float> scales;    // [n / G] s_g
  // [n / G] sum_{i in g} q_i. q4 stores v + 8, so sum (v + 8) q = sum v q + 8 sums_g.
  std::vector<int32_t> sums;
};
// Buffers grow to the largest n seen and are then reused: no allocation per call after the
// first. `rows`: the ActivationRows bits of the matrices that will read it (a product with
// rows of another precision throws KernelError). Throws KernelError if G does not divide n.
void quantize_activation(const float* x, int64_t n, int group, QuantizedActivation& out,
                         unsigned rows = kForAnyRows);

// Single-threaded row range [r0, r1): y[r] = W[r,:] . x. q8 / q4 weights use xq (its
// group must equal w.group and its n w.cols; KernelError otherwise); f32 / bf16 use x.
void matvec_range(const MatrixView& w, const float* x, const QuantizedActivation* xq, float* y,
                  int64_t r0, int64_t r1);
// y[r] += alpha * W[r,:] . x for r in [r0, r1), inputs as matvec_range.
void matvec_add_range(const MatrixView& w, const float* x, const QuantizedActivation* xq,
                      float alpha, float* y, int64_t r0, int64_t r1);

// ---- Batched products: one weight matrix times the rows of a batch --------------------
//
// Prefill runs a chunk of prompt tokens, batched decode one token of several sessions: the
// weights are read once for the whole batch. Row t of the batch is x_t = x + t * ldx
// ([w.cols] values); for q8 / q4 weights each row is quantised once, as matvec does, into
// xq[t] (quantize_batch), and the products use the integer path's batched tiles.
struct ActivationBatch {
  const float* x = nullptr;
  int64_t ldx = 0;
  const QuantizedActivation* xq = nullptr;  // [n]: needed by q8 / q4 weights
  int64_t n = 0;
};
// out[t] = quantize_activation(x + t * ldx, cols, group) for t < n; `out` grows once.
void quantize_batch(const float* x, int64_t n, int64_t cols, int64_t ldx, int group,
                    std::vector<QuantizedActivation>& out);
// Single-threaded row range: y[t * ldy + r] = W[r,:] . x_t for t < x.n and r in [r0, r1).
// q8 / q4 use x.xq (checked against w like matvec_range), f32 / bf16 (and q8 / q4 in
// parity mode) x.x with each row decoded once per tile of tokens.
void matmul_range(const MatrixView& w, const ActivationBatch& x, float* y, int64_t ldy, int64_t r0,
                  int64_t r1);

// Decode order. A q8 / q4 matrix of group 32 may carry a copy of its values
// (MatrixView::packed) in which every whole block of 8 groups (256 columns) of a row is
// transposed as a matrix of 4-byte words: word k of group l moves to place 8 k + l. One
// 256-bit load then holds 4 bytes of each of the 8 groups, so lane l of the int32 sums is
// group l's sum, and a row's sums are converted and scaled by s_w s_x once per 8 groups (one
// convert, one FMA) instead of once per group. The row's last cols % 256 columns (the tail,
// T < 8 groups: nenya's d = 960 is 3 blocks and 6 groups) are transposed the same way with T
// in place of 8 (word k of tail group l at place T k + l), so a 256-bit load of the tail holds
// words of several groups in a fixed pattern of lanes. The activation is arranged the same way once per
// matvec (q_lanes, q_nibble_lanes). The bytes are the file's, permuted within each row, so a
// token reads as many bytes as before.
//
// Rows in tiles (q4, and q8 rows of more than one block and a tail): a decode step reads four
// such rows at a time, so in every whole tile of packed_tile_rows (types.h) = 4 rows (counted
// from row 0) the rows' blocks are interleaved, block b of row j of the tile at (4 b + j) x the
// block's bytes (q4 128, q8 256) from the tile's start, and the rows' tails follow the tile's
// blocks, one after another; rows after the last whole tile lie one after another. A tile is
// then one run of memory read front to back, one stream for the prefetchers instead of four
// rows apart. Other q8 rows keep one row after another (a tile of 1).
bool packable(const MatrixView& w);
// Writes w's values in decode order to out ([w.rows * w.row_bytes()]); w must be packable
// (KernelError otherwise). Set the result as w.packed to use it.
void pack_for_dot(const MatrixView& w, uint8_t* out);
// out = the packed copy of the n rows rows[0..n) of w (which carries one), as pack_for_dot
// would make it for those rows alone: a packed matrix of n rows ([n * w.row_bytes()]).
void gather_packed_rows(const MatrixView& w, const int32_t* rows, int64_t n, uint8_t* out);

// The integer dot-product path in use ("avx512vnni-zmm", "avx512vnni", "avxvnni", "avx2",
// "neon-i8mm", "neon-dotprod", "neon", "scalar"), chosen at run time from the CPU's features, best first.
const char* active_int8_path();
// Every path compiled in that this CPU can run, best first ("scalar" always last).
std::vector<const char*> supported_int8_paths();
// Forces a path by name (tests and benchmarks); nullptr restores the automatic choice.
// Throws KernelError for an unknown or unsupported name.
void set_int8_path(const char* name);

// Parity mode: q8 / q4 rows widened to f32 and dotted with the unquantised x, the product an
// f32 reference computes from the dequantised weights, instead of the integer path (whose
// 8-bit input rounding a reference does not model). Off by default; the tests that compare
// the engine with the libtorch reference on quantised weights turn it on.
void set_f32_activations(bool on);
bool f32_activations();

// ---- Vector primitives --------------------------------------------------------------

float dot(const float* a, const float* b, int64_t n);
void axpy(float a, const float* x, int64_t n, float* y);  // y += a x
void axpby(float a, const float* x, float b, int64_t n, float* y);  // y = a x + b y
// ya = S^T a and yb = S^T b for S [rows][cols], row-major (GDN-2's S^T (b k) and S^T q from
// one pass over its state). Each column is summed in row order, one multiply-add per row from
// 0. The rows are read in order, once, and asked for kStatePrefetchBytes ahead: a state comes
// from memory every token, rows of 512 bytes, and the L2 streamer stops at each 4 KiB page.
void state_products(const float* S, int64_t rows, int64_t cols, const float* a, const float* b, float* ya, float* yb);
// S[r] = decay[r] S[r] + k[r] delta for every row r of S [rows][cols] (GDN-2's state rewrite,
// S = Diag(e^g) S + k delta^T): axpby(k[r], delta, decay[r], cols, S + r cols) row by row, the
// same bits, in one call.
void state_decay_add(float* S, int64_t rows, int64_t cols, const float* decay, const float* k, const float* delta);
// Cache rows as attention reads them in place: f32, bf16 or f16 rows, or q8 rows with one scale
// each (row j = scale[j] q8[j], a KV cache's head row). One of the lists is set. A null row is
// skipped where a kernel says so.
struct CacheRows {
  const float* const* f32 = nullptr;
  const int8_t* const* q8 = nullptr;
  const float* scale = nullptr;  // q8: one per row
  const BF16* const* bf16 = nullptr;
  const F16* const* f16 = nullptr;
};

// Attention over a tile of keys, with four query vectors' accumulators in registers at a
// time, so each K or V vector loaded (and widened from int8) serves four:
//   scores_tile:       s[v lds + j] = q[v ldq : +dh] . k_j, K transposed: kt[i ldk + j] = k_j[i]
//                      (v < n_q, j < n_keys): prefill's block of query vectors
//   scores_rows:       s[v lds + j] = scale (q[v ldq : +dh] . k_j), the rows as stored, four
//                      rows per block (two on AVX2 / SSE): decode's query heads of one KV group
//   weighted_sum_tile: o[v ldo : +n] += sum_j p[v ldp + j] rows[j], j in order; a null
//                      rows[j] is skipped (never read: ReLU^2's V-skip)
void scores_tile(const float* q, int64_t ldq, int64_t n_q, const float* kt, int64_t ldk, int64_t n_keys, int64_t dh,
                 float* s, int64_t lds);
void scores_rows(const float* q, int64_t ldq, int64_t n_q, const CacheRows& k, int64_t n_rows, int64_t dh, float scale,
                 float* s, int64_t lds);
void weighted_sum_tile(const float* p, int64_t ldp, int64_t n_q, const CacheRows& rows, int64_t n_rows, int64_t n,
                       float* o, int64_t ldo);

// Query heads in int8, for scores against q8 cache rows by integer dot products: head v is
// q_v = scale[v] q[v ldq : +dh] (s = max|q_v| / 127, round half to even, as
// quantize_activation with one group per head), sum[v] = sum_i q[v ldq + i] (the VNNI
// paths' offset). at(v) views the heads from v on (none of none).
struct Int8Heads {
  const int8_t* q = nullptr;
  int64_t ldq = 0;
  const float* scale = nullptr;
  const int32_t* sum = nullptr;
  Int8Heads at(int64_t v) const { return q ? Int8Heads{q + v * ldq, ldq, scale + v, sum + v} : Int8Heads{}; }
};
// The n_q heads of x[v dh : +dh] into q[v dh ..], scale[v], sum[v] (an Int8Heads of ldq dh).
void quantize_heads(const float* x, int64_t n_q, int64_t dh, int8_t* q, float* scale, int32_t* sum);
//   scores_rows_int8: s[v lds + j] = scale q.scale[v] k_scale[j] (q_v . k_j) over int8 rows
//                     k_j, the int32 sum exact; on the active integer path (set_int8_path).
void scores_rows_int8(const Int8Heads& q, int64_t n_q, const int8_t* const* k, const float* k_scale,
                      int64_t n_rows, int64_t dh, float scale, float* s, int64_t lds);

// out = x / sqrt(mean(x^2) + eps) * g, with g = gain, (1 + gain) if unit_offset, or 1 if
// gain is null. In place allowed.
void rmsnorm(const float* x, const float* gain, int64_t n, float eps, bool unit_offset,
             float* out);
// out = x / sqrt(sum(x^2) + eps) (unit length, as FLA's l2norm). In place allowed.
void l2_normalize(const float* x, int64_t n, float eps, float* out);
// x = exp(x - max x) / sum exp(x - max x), in place. -inf entries get 0; if every entry is
// -inf the result is all 0 (a fully masked row has no weights).
void softmax(float* x, int64_t n);
// The unnormalised softmax attention's chunks carry (a running max and sum, combined later):
// max = max x, x = exp(x - max) in place, sum = sum of the new x. All -inf (or n = 0): max
// -inf, x all 0, sum 0.
struct ExpSum {
  float max;
  double sum;
};
ExpSum exp_below_max(float* x, int64_t n);

// Elementwise, in place allowed.
void exp(const float* x, int64_t n, float* out);       // e^x
void sigmoid(const float* x, int64_t n, float* out);   // 1 / (1 + e^-x)
inline float sigmoid(float x) { return 1.0f / (1.0f + std::exp(-x)); }
void silu(const float* x, int64_t n, float* out);      // x sigmoid(x)
void softplus(const float* x, int64_t n, float* out);  // log(1 + e^x) = max(x,0) + log1p(e^-|x|)
void relu2(const float* x, int64_t n, float* out);     // max(x, 0)^2
// out[j] = max(out[j], x[r ldx + j]) over rows r, j < n, each step as std::max(out[j], x): a
// NaN x leaves out[j] as it was. The largest score of a key over a group's heads.
void max_rows(const float* x, int64_t ldx, int64_t rows, int64_t n, float* out);

// ---- Rotary position embedding ----------------------------------------------------

// Llama-3 frequency scaling (factor 0: none). With wavelength lambda = 2 pi / f:
//   lambda > original_context / low_freq   ->  f / factor
//   lambda < original_context / high_freq  ->  f
//   otherwise, with s = (original_context / lambda - low_freq) / (high_freq - low_freq),
//                                             (1 - s) f / factor + s f
struct RopeScaling {
  double factor = 0.0, low_freq = 1.0, high_freq = 4.0;
  int original_context = 8192;
};
// f_i = theta^(-2i / rotary_dim), i < rotary_dim / 2, then scaled. rotary_dim must be even.
std::vector<float> rope_inv_freq(int rotary_dim, double theta, const RopeScaling& scaling = {});
// Rotates each head of x ([n_heads][head_dim]) in place, rotate-half layout (HF / Llama):
// with h = rotary_dim / 2 and a_i = pos * inv_freq[i], for i < h
//   x'[i] = x[i] cos a_i - x[i+h] sin a_i,   x'[i+h] = x[i+h] cos a_i + x[i] sin a_i;
// values from rotary_dim to head_dim pass through. Angles are formed in double.
void rope(float* x, int n_heads, int head_dim, int rotary_dim, const float* inv_freq,
          int64_t pos);

// ---- Selection -----------------------------------------------------------------------

// The indices of the k largest values, largest first; equal values: lower index first.
// NaN ranks below every number. k <= n. idx: [k]. Allocates nothing.
void top_k(const float* x, int64_t n, int k, int32_t* idx);
// The index of the largest value (top_k with k = 1: ties to the lower index, NaN below every
// number); 0 when n == 0. The greedy next token.
inline int32_t argmax(const float* x, int64_t n) {
  int32_t best = 0;
  if (n > 0) top_k(x, n, 1, &best);
  return best;
}
// The indices i < n with x[i] >= t, in increasing order, into idx, stopping once there are
// cap + 1 of them (the caller's "too many"); returns how many were written. NaN is never >= t,
// and no x is >= a NaN t. idx: room for min(n, cap + 1). The LM head's candidates (lm_head.cpp).
int64_t rows_at_least(const float* x, int64_t n, float t, int64_t cap, int32_t* idx);
// The same k indices in increasing order (sparse attention's selection), without ranking them:
// idx[0, k) on return; idx: [n], the rest used as scratch. Allocates nothing.
void top_k_in_order(const float* x, int64_t n, int k, int32_t* idx);

}  // namespace wren::kernels
