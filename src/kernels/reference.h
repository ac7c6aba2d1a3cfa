// kernels/: plain scalar reference versions of every SIMD kernel (ops.h, types.h codecs).
// Written for obviousness, not speed: one loop per equation, sums in double. Tests
// compare the dispatched kernels against these; nothing in the engine should call them.
#pragma once

#include <cstdint>

#include "kernels/ops.h"
#include "kernels/types.h"

namespace wren::kernels::ref {

void quantize_q8_row(const float* x, int64_t n, int group, int8_t* q, F16* scales);
void dequantize_q8_row(const int8_t* q, const F16* scales, int64_t n, int group, float* out);
void quantize_q4_row(const float* x, int64_t n, int group, uint8_t* q, F16* scales);
void dequantize_q4_row(const uint8_t* q, const F16* scales, int64_t n, int group, float* out);
void f32_to_bf16_row(const float* x, int64_t n, BF16* out);
void bf16_to_f32_row(const BF16* x, int64_t n, float* out);

float weight(const MatrixView& w, int64_t r, int64_t c);  // W[r, c] as f32

void matvec(const MatrixView& w, const float* x, float* y);
void matvec_add(const MatrixView& w, const float* x, float alpha, float* y);
float dot_row(const MatrixView& w, int64_t row, const float* x);
// W[row,:] . (the activation xq stands for), summed in double from the decoded weights:
// sum_c W[row,c] s_x[c / G] q_x[c]. The oracle of the integer paths (quantized_dot.h).
double dot_row_quantized(const MatrixView& w, int64_t row, const QuantizedActivation& xq);
void add_rows(const MatrixView& w, const int32_t* rows, const float* coeffs, int64_t n_rows,
              float* y);
void matmul(const MatrixView& w, const float* x, int64_t n_tokens, float* y);

float dot(const float* a, const float* b, int64_t n);
void axpy(float a, const float* x, int64_t n, float* y);
void axpby(float a, const float* x, float b, int64_t n, float* y);
void state_products(const float* S, int64_t rows, int64_t cols, const float* a, const float* b, float* ya, float* yb);
void state_decay_add(float* S, int64_t rows, int64_t cols, const float* decay, const float* k, const float* delta);
void rmsnorm(const float* x, const float* gain, int64_t n, float eps, bool unit_offset,
             float* out);
void l2_normalize(const float* x, int64_t n, float eps, float* out);
void softmax(float* x, int64_t n);
ExpSum exp_below_max(float* x, int64_t n);
void exp(const float* x, int64_t n, float* out);
void sigmoid(const float* x, int64_t n, float* out);
void silu(const float* x, int64_t n, float* out);
void softplus(const float* x, int64_t n, float* out);
void relu2(const float* x, int64_t n, float* out);
void rope(float* x, int n_heads, int head_dim, int rotary_dim, const float* inv_freq,
          int64_t pos);
void top_k(const float* x, int64_t n, int k, int32_t* idx);  // a full stable sort
int64_t rows_at_least(const float* x, int64_t n, float t, int64_t cap, int32_t* idx);

}  // namespace wren::kernels::ref
