// model/: multi-head latent attention (DeepSeek-V2/V3, Nenya), as pure functions over the
// weights, a per-layer latent cache and per-session scratch.
//
// Per token t the layer caches only
//   [c_t ; k_pe_t] = W_kva x_t,   c_t <- RMSNorm(c_t) (gain kv_a_norm),   k_pe_t <- RoPE(k_pe_t, t) if rope,
// kv_lora_rank + qk_rope_dim values (352 for Nenya: a 320-d latent and a 32-d key shared by
// all heads). Head i of the token at `pos` then attends positions 0..pos with
//   q_i = [q_nope_i ; q_pe_i]   from W_q x, or W_qb RMSNorm(W_qa x); q_pe_i rotated if rope
//   K_i,t = [W_UK_i c_t ; k_pe_t],   V_i,t = W_UV_i c_t
//   p_i = softmax_t(q_i . K_i,t * scale),   o_i = sum_t p_i,t V_i,t
//   y = W_o (o * sigmoid(W_g x))   (the gate only with output_gate)
// with scale = spec.scale, or 1 / sqrt(qk_nope_dim + qk_rope_dim) when 0. W_UK_i and W_UV_i
// are head i's row blocks of wk_b [h nope, kv_lora] and wv_b [h v, kv_lora].
//
// mla_attention materialises K and V (the reference); mla_attention_absorbed gives the same
// result reading only the cache, since q_nope_i . W_UK_i c_t = (W_UK_i^T q_nope_i) . c_t and
// sum_t p_t W_UV_i c_t = W_UV_i (sum_t p_t c_t). Decode uses the absorbed form.
#pragma once

#include <cstdint>
#include <vector>

#include "config/model_config.h"
#include "kernels/threads.h"
#include "model/kv_cache.h"
#include "model/rope.h"
#include "model/tensor.h"

namespace wren {

struct MlaWeights {
  MatrixView wq;          // [h (nope + rope), d]; absent when q_lora_rank > 0
  MatrixView wq_a, wq_b;  // [q_lora, d], [h (nope + rope), q_lora]; present when q_lora_rank > 0
  MatrixView wkv_a;       // [kv_lora + rope, d]
  MatrixView wk_b;        // [h nope, kv_lora]; absent when qk_nope_dim == 0
  MatrixView wv_b;        // [h v, kv_lora]
  MatrixView wg;          // [h v, d]; present with output_gate
  MatrixView wo;          // [d, h v]
  Vec q_a_norm, kv_a_norm;           // [q_lora], [kv_lora]
  RopeTable rope;  // mla_rope(spec); no frequencies without rope
};

// RoPE of MLA's rotated part (rope.rotary_dim, or qk_rope_dim when 0), with the config's
// scaling (model/rope.h: Llama-3, linear, YaRN); no frequencies when the spec has no rope.
RopeTable mla_rope(const MixerSpec& m);

// One MLA layer's cache: per position the normalised latent c (kv_lora_rank values) followed
// by the shared key k_pe (qk_rope_dim, rotated when the layer has rope), one row of width()
// values in the cache's KvType (model/kv_cache.h: the latent and the shared key are separate
// q8 segments), so a decode step reads width() values per cached token.
struct MlaCache {
  int latent_dim = 0;  // kv_lora_rank
  int key_dim = 0;     // qk_rope_dim
  int64_t capacity = 0;
  int64_t count = 0;  // tokens appended so far (positions 0 .. count-1)

  // Room for `capacity` tokens, count = 0. Throws std::runtime_error on a spec that is not
  // MLA or has non-positive widths.
  void init(const MixerSpec& m, int64_t capacity, KvType type = KvType::f32);
  int width() const { return latent_dim + key_dim; }
  bool empty() const { return width() == 0; }
  KvType type() const { return rows_.type(); }
  // Position pos's row [c ; k_pe]: a pointer into the cache (f32) or decoded into buf[0, width()).
  const float* row(int64_t pos, float* buf) const { return rows_.read(pos, 0, width(), buf); }
  // Positions pos0 .. pos0 + n - 1 as rows 0 .. n - 1 of a tile, in place, where the type
  // allows it (f32, bf16, f16: true); a q8 row holds several groups, each with its scale, and
  // is read with row() instead (false).
  bool to_tile(int64_t pos0, int n, KvTile& t) const {
    if (type() == KvType::q8) return false;
    rows_.to_tile(pos0, n, 0, width(), t, 0);
    return true;
  }
  // The next position's slot ([c ; k_pe], width() f32 values, staged outside the store); the
  // caller fills it and then calls commit(), which stores it at position count. Throws
  // std::runtime_error when the cache is full.
  float* stage();
  void commit();
  double bytes_per_token() const { return rows_.bytes_per_row(); }
  size_t bytes() const { return rows_.bytes(); }
  KvRows& rows() { return rows_; }

 private:
  KvRows rows_;
  std::vector<float> staged_;  // [width()]
};

// Per-session working memory of the MLA layers. reserve() only grows, so one scratch serves
// every MLA layer of a model (call it once per distinct spec).
struct MlaScratch {
  std::vector<float> q_a;     // [q_lora]
  std::vector<float> q;       // [h (nope + rope)]
  std::vector<float> q_cat;   // absorbed queries [W_UK_i^T q_nope_i ; q_pe_i]: [h (kv_lora + rope)]
  std::vector<float> o_lat;   // the heads' latent outputs, before W_UV: [h kv_lora]
  std::vector<float> k, v;    // reference: one position's keys [h nope] and values [h v]
  std::vector<float> o, gate; // [h v]
  std::vector<float> scores;  // [h][context]
  std::vector<int32_t> rows;  // 0, 1, ..., h nope - 1: wk_b's rows, for add_rows
  std::vector<float> parts;   // absorbed form: per part of the cache [h][kv_lora] sums, h maxima, h totals
  std::vector<float> tiles;   // per item: a tile of decoded cache rows and its heads' scores
  int64_t context = 0;        // the scores' row stride
  int heads = 0;              // rows of scores
  void reserve(const MixerSpec& m, int64_t context);
};

// Appends the token at `pos` (which must be cache.count): [c ; k_pe] = W_kva x,
// c = RMSNorm(c) with gain kv_a_norm (config.norm.eps, unit_offset), k_pe rotated at pos if rope.
void mla_append(const MlaWeights& w, const MixerSpec& m, const ModelConfig& c, const float* x, int64_t pos,
                MlaCache& cache, MlaScratch& s, kernels::ThreadPool* pool);

// The reference form: K and V of every cached position are formed from the latent on each
// call. Attends positions 0..pos (the cache must hold them). out: [d]; may alias x.
void mla_attention(const MlaWeights& w, const MixerSpec& m, const ModelConfig& c, const float* x, int64_t pos,
                   const MlaCache& cache, MlaScratch& s, float* out, kernels::ThreadPool* pool);

// The absorbed form (decode): score_t = (q~_i . c_t + q_pe_i . k_pe_t) scale with
// q~_i = W_UK_i^T q_nope_i; o_lat_i = sum_t p_t c_t; o_i = W_UV_i o_lat_i. Same contract and
// result as mla_attention up to f32 rounding.
void mla_attention_absorbed(const MlaWeights& w, const MixerSpec& m, const ModelConfig& c, const float* x,
                            int64_t pos, const MlaCache& cache, MlaScratch& s, float* out, kernels::ThreadPool* pool);

// Decode of the token at `pos` with its own cache: mla_append, then mla_attention_absorbed,
// with W_kva, W_q (or W_qa) and W_g in one parallel region (model/region.h), the heads in a
// second and W_o in a third.
void mla_decode(const MlaWeights& w, const MixerSpec& m, const ModelConfig& c, const float* x, int64_t pos,
                MlaCache& cache, MlaScratch& s, float* out, kernels::ThreadPool* pool);

// ---- A batch's MLA (prefill's chunk) -----------------------------------------------
//
// The n rows' normed inputs x[t * ldx] meet each projection matrix once (model/region.h
// run_batch_products), as attention_batch_inputs does for the other attention kinds: W_kva
// for every row when the layer fills its own cache; W_q (or W_qa, the per-row RMSNorm, then
// W_qb) and W_g for the rows that attend; W_o for their heads' outputs at the end. Each
// row's values equal its own matvecs', so the batch equals mla_decode row by row.
struct MlaBatch {
  std::vector<float> q_a, q, gate, o, kv;  // [n][q_lora], [n][h dqk], [n][h v], [n][h v], [n][kv_lora + rope]
  int64_t q_width = 0, o_width = 0, kv_width = 0;
  const float* q_row(int64_t t) const { return q.data() + t * q_width; }
  const float* kv_row(int64_t t) const { return kv.data() + t * kv_width; }
  float* o_row(int64_t t) { return o.data() + t * o_width; }
};
struct MlaBatchInput {
  const MlaWeights& w;
  const MixerSpec& m;
  const ModelConfig& c;
  const float* x;  // [n][ldx]: the K/V input of every row
  int64_t ldx, n;
  bool own_kv;
  const float* query_x;  // [n_query][ldx]: the rows that attend
  int64_t n_query;
};
void mla_batch_inputs(const MlaBatchInput& in, MlaBatch& b, kernels::ThreadPool* pool);
// Row t's cache entry at `pos` from its W_kva product kv ([kv_lora + rope]): RMSNorm of the
// latent, RoPE of the shared key, appended (pos must be cache.count).
void mla_append_projected(const MlaWeights& w, const MixerSpec& m, const ModelConfig& c, const float* kv, int64_t pos,
                          MlaCache& cache);
// The absorbed attention of a query row at `pos` from its projection q ([h dqk], unrotated):
// the heads' outputs o_i = W_UV_i o_lat_i to o ([h v]), before the gate and W_o.
void mla_attend_projected(const MlaWeights& w, const MixerSpec& m, const float* q, int64_t pos, const MlaCache& cache,
                          MlaScratch& s, float* o, kernels::ThreadPool* pool);
// y[t * ldy] = W_o (o_t * sigmoid(gate_t)) for the n_query rows (the gate only with output_gate).
void mla_batch_output(const MlaWeights& w, int64_t n_query, MlaBatch& b, float* y, int64_t ldy,
                      kernels::ThreadPool* pool);

}  // namespace wren
