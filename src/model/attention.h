// model/: the three attention mechanisms of Embla (and the softmax attention of ordinary
// models), one file each, sharing the query/key projections declared here.
//
//   window_attention.cpp  softmax over the cache (sliding window or full), RoPE, GQA, sinks
//   relu2_attention.cpp   Sevren Sparse Attention: w_j = max(s_j, 0)^2, o = sum w v / (c + sum w)
//   sparse_attention.cpp  top-k keys by the full layer's scores + recent window, own softmax
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "config/model_config.h"
#include "kernels/threads.h"
#include "model/kv_cache.h"
#include "model/rope.h"
#include "model/sparsity_probe.h"
#include "model/tensor.h"

namespace wren {

struct AttentionWeights {  // attention, relu2_attention, sparse_reuse
  MatrixView wq, wk, wv, wg, wo;  // wk / wv absent without a cache of its own; wg with output_gate
  Vec bq, bk, bv, bo, q_norm, k_norm, sinks;
  RopeTable rope;  // RoPE layers (model/rope.h)
};


// V rows of ReLU^2 layers read and skipped (one row: one KV head's value at one key), and
// the bytes skipped in the cache's storage; counted by every relu2 step, for bench/sparsity.
struct VReads {
  int64_t read = 0, skipped = 0;
  double bytes_skipped = 0;
};

// Keys per work item of an attention step. A step splits each KV head's keys into chunks of
// this many, a fixed size, so the items' bounds, and the results' bits, never depend on the
// number of threads; each chunk's partial output is combined in chunk order.
constexpr int64_t kChunkKeys = 256;
// From this many chunks on, full attention's items take every KV head of a chunk
// (relu2_attention.cpp).
constexpr int64_t kWholeRowChunks = 8;
inline int64_t key_chunks(int64_t n) { return (n + kChunkKeys - 1) / kChunkKeys; }

// One work item's scratch (the rows it reads come through the thread's KvTile): its partial
// results per query head of the group: the partial output o_c[h] (un-normalised), the sum of
// its weights, and for a softmax the largest logit its exponentials were taken against.
struct ChunkScratch {
  float* o;       // [group][head_dim]
  double* sum;    // [group]
  float* max;     // [group]
  VReads* reads;
};

// Per-session working memory of the attention layers, sized once for the largest layer.
struct AttentionScratch {
  std::vector<float> q, k, v, o, gate;  // [heads * head_dim]
  std::vector<float> scores;            // [query heads][keys of the step]
  // The step's query heads in int8 (kernels::Int8Heads, int8_query below): [heads * head_dim],
  // one scale and sum per head.
  std::vector<int8_t> q8;
  std::vector<float> q8_scale;
  std::vector<int32_t> q8_sum;
  std::vector<int32_t> selected;        // [KV heads][context] a sparse layer's selection
  std::vector<int64_t> selected_count;  // [KV heads] its length
  bool v_skip = true;  // false (--no-vskip): value rows of zero weight are read too, to measure the saving
  // What `selected` holds: the selection by an owner's kept scores for one position. The
  // sparse layers that reuse one owner select by the same scores, so the later ones take it
  // from here; a layer that writes kept scores calls forget_selection().
  struct Selection {
    const float* scores = nullptr;
    int64_t pos = -1;
    int top_k = 0, recent = 0;
    bool operator==(const Selection&) const = default;
  } selection;
  void forget_selection() { selection = {}; }
  VReads v_reads;
  void reserve(const ModelConfig& c, int64_t context);
  // The work items' memory for steps of up to kv_heads x key_chunks(keys) items of `group`
  // query heads of head_dim values (reserve calls it; tests of the kernels below too).
  void reserve_chunks(int kv_heads, int group, int head_dim, int64_t keys);
  ChunkScratch chunk(int64_t item);

 private:
  int chunk_group_ = 0, chunk_head_ = 0;
  std::vector<float> chunk_o_, chunk_max_;
  std::vector<double> chunk_sum_;
  std::vector<VReads> chunk_reads_;
};

// A row's projections that its batch ran beforehand (prefill's chunk: one GEMM per matrix
// for all rows, attention_batch_inputs below): q = W_q x, k = W_k x, v = W_v x, before
// bias, QK-norm and RoPE (k, v only for a layer with its own cache).
struct Projected {
  const float* q = nullptr;
  const float *k = nullptr, *v = nullptr;
};

// One token through one attention layer: what every attention entry point reads.
struct AttentionStep {
  const AttentionWeights& w;
  const MixerSpec& m;
  const ModelConfig& c;
  const float* x;       // the normed sublayer input [d_model]
  int64_t pos;          // the token's position
  AttentionScratch& s;
  kernels::ThreadPool* pool = nullptr;
  // Set: the entry points take their products from here, and write to `out` the heads'
  // outputs o ([n_heads * value_dim]) instead of W_o(...): the batch's output GEMM follows
  // (attention_batch_output).
  const Projected* projected = nullptr;
};

// A full layer's per-KV-head scores, kept for the sparse layers that reuse its cache:
// data[g * stride + j] for KV head g and key position j. data == nullptr: not kept.
struct GroupScores {
  float* data = nullptr;
  int64_t stride = 0;
};

// The query after its product W_q x, in place: + b_q, QK-norm, RoPE at `pos`.
void finish_query(const AttentionWeights& w, const MixerSpec& m, const ModelConfig& c, int64_t pos, float* q);
// q = W_q x (+ b_q), QK-norm per head (or over the whole projection), RoPE at `pos`.
void project_query(const AttentionWeights& w, const MixerSpec& m, const ModelConfig& c, const float* x, int64_t pos,
                   float* q, kernels::ThreadPool* pool);
// This token's K and V from the K/V input a.x, stored as the layer reads them (RoPE'd or
// normalised), appended to `cache`.
void append_kv(const AttentionStep& a, KvCache& cache);
// Per-KV-head maxima of query-group scores (see relu2_attention): reset positions [0, end)
// to -inf, then fold in the scores of `heads` heads (head h's at scores[h ld ..]) of
// positions first, first + 1, ..., first + n - 1.
void clear_group_scores(GroupScores g, int kv_heads, int64_t end);
void record_group_scores(GroupScores g, int kv_head, int64_t first, const float* scores, int64_t ld, int heads,
                         int64_t n);
// out = W_o (o * sigmoid(W_g x) if W_g is present) (+ b_o): the output projection of every
// attention kind (o: the heads' outputs, `width` values; gate: scratch of as many).
void gated_output(const MatrixView& wg, const MatrixView& wo, const Vec& bo, int64_t width, const float* x, float* o,
                  float* gate, float* out, kernels::ThreadPool* pool);
// gated_output from the heads' outputs in s.o.
void project_output(const AttentionWeights& w, const MixerSpec& m, const float* x, AttentionScratch& s, float* out,
                    kernels::ThreadPool* pool);
// The entry points' two ends: s.q from a.x (project_query) or from a.projected; and
// project_output into out, or with a.projected the heads' outputs s.o copied to out.
void step_query(const AttentionStep& a);
void step_output(const AttentionStep& a, float* out);
// Whether attention over `cache` scores int8 queries against its int8 keys by integer dot
// products: a q8 cache, outside parity mode (kernels::f32_activations). Each head is then
// rounded as kernels::quantize_heads does (s = max|q_h| / 127), in decode and prefill alike.
bool int8_scores(const KvCache& cache);
// s.q's n_heads heads in int8 (s.q8 ...) when int8_scores(cache); no heads otherwise.
kernels::Int8Heads int8_query(AttentionScratch& s, const KvCache& cache, int n_heads, int head_dim);

// The running state of a block's query vectors, [KV head][row][head of the group].
struct BlockState {
  std::vector<float> o, max;
  std::vector<double> sum;
};

// ---- A batch's projections (prefill's chunk) -----------------------------------------
//
// The n rows' normed inputs x[t * ldx] meet each projection matrix once, as one GEMM per
// matrix (model/region.h run_batch_products): the weights are read once per chunk instead of
// once per token, and each row's values equal its own matvec's.
struct AttentionBatch {
  std::vector<float> q, k, v, gate, o;  // [n][width of each]
  int64_t q_width = 0, k_width = 0, v_width = 0, o_width = 0;
  // The projections of query row tq and of row t (k, v null without a cache of its own).
  Projected row(int64_t tq, int64_t t) const;
  float* o_row(int64_t t) { return o.data() + t * o_width; }
  // The block path (QueryBlock below): the attending rows' positions and kept scores, and
  // their running state.
  std::vector<int64_t> positions;
  std::vector<GroupScores> kept;
  BlockState block;
};
// q (and the gate) for the rows in `query`, k and v for every row of x when `own_kv`.
struct AttentionBatchInput {
  const AttentionWeights& w;
  const MixerSpec& m;
  const float* x;
  int64_t ldx, n;
  bool own_kv;
  const float* query_x;  // the rows that attend ([n_query][ldx]; x when every row does)
  int64_t n_query;
};
void attention_batch_inputs(const AttentionBatchInput& in, AttentionBatch& b, kernels::ThreadPool* pool);
// y[t * ldy] = W_o (o_t * sigmoid(gate_t)) (+ b_o) for the n_query rows, o_t = b.o_row(t).
void attention_batch_output(const AttentionWeights& w, int64_t n_query, AttentionBatch& b, float* y, int64_t ldy,
                            kernels::ThreadPool* pool);

// ---- A block of query rows (prefill's chunk of one session) ------------------------------
//
// The rows at positions pos[0] < pos[1] < ... attend the cache in tiles of kTileKeys keys:
// each K and V tile is decoded once for all the query vectors of a work item (kBlockVectors
// of them: its rows' query heads of one KV group) and multiplied as small matrices
// (kernels::scores_tile, weighted_sum_tile), where token-by-token each query row decodes
// every key again. Row t reads keys [lo_t, pos_t]: causal, and lo_t = pos_t + 1 - capacity
// for a window's ring. The keys come in ranges (attend_block_keys), so a layer can attend
// the keys cached before the chunk, append the chunk's own, then attend those: a ring
// overwrites the oldest as the chunk appends. Between ranges each query vector carries a
// running softmax (its largest logit m, its sum l, its output o, rescaled by e^(m - m') as
// m grows: the online softmax of flash attention) or ReLU^2's plain sums.
// Items are (KV head, block of rows): their bounds depend only on the work, so two threads
// give one thread's bits. The results equal decode's up to float rounding, not bit for bit.
constexpr int64_t kTileKeys = 64;

// One tile's logits p[0, n) folded into a running softmax (its largest logit m, its sum l):
//   m' = max(m, m_t),  p_j = e^(p_j - m_t) e^(m_t - m'),  l = l e^(m - m') + sum_j p_j,
// m_t the tile's max (kernels::exp_below_max takes the exponentials against it, so the
// factor e^(m_t - m') is 1 unless an earlier tile was larger). Returns e^(m - m'), the factor
// the running output takes (0 while m is -inf). A tile of -inf only leaves p 0, m and l as
// they were, and returns 1.
template <class Sum>
float fold_into_softmax(float* p, int64_t n, float& m, Sum& l) {
  const kernels::ExpSum e = kernels::exp_below_max(p, n);
  if (e.max == -INFINITY) return 1.0f;
  const float top = std::max(m, e.max);
  const float rescale = std::exp(m - top), to_top = std::exp(e.max - top);
  if (to_top != 1.0f)
    for (int64_t j = 0; j < n; ++j) p[j] *= to_top;
  l = Sum(l * rescale + e.sum * to_top);
  m = top;
  return rescale;
}

static_assert(kTileKeys <= KvTile::kRows, "a block's tile of values fits one KvTile");
constexpr int64_t kBlockVectors = 64;

struct QueryBlock {
  const AttentionWeights& w;
  const MixerSpec& m;      // attention (softmax) or relu2_attention
  const KvCache& cache;
  const float* q;          // finished queries (bias, QK-norm, RoPE) [n][ldq]
  int64_t ldq;
  const int64_t* pos;      // the rows' positions, ascending
  int64_t n;
  // Per row, where the sparse layers that reuse this cache find its per-KV-head maxima of the
  // logits (record_group_scores); null: no row keeps them.
  const GroupScores* kept = nullptr;
  BlockState& state;
  kernels::ThreadPool* pool = nullptr;
};
// Zeroes the state and clears each row's kept scores of positions [0, pos_t].
void start_block(const QueryBlock& b);
// Each row attends the keys of [key0, key1) it may read (all must be in the cache now).
void attend_block_keys(const QueryBlock& b, int64_t key0, int64_t key1);
// The heads' outputs o[t ldo + h value_dim ...]: softmax o / (l + e^(sink - m)) (sinks: the
// weights' per-head logit, when present); ReLU^2 o / (c + l).
void finish_block(const QueryBlock& b, float* o, int64_t ldo);
// The logit scale of a layer: softmax 1/sqrt(d_h) (or the config's) times the RoPE scaling's
// factor; ReLU^2 1/sqrt(d_h).
float attention_scale(const AttentionWeights& w, const MixerSpec& m);

// Softmax attention of the token at `pos` over the positions the cache holds (the window for
// a window layer): p = softmax(q.k / sqrt(d_h)) (with a per-head sink logit if present).
// `scores`, when kept, receives the per-KV-head scores as relu2_attention's does.
void window_attention(const AttentionStep& a, const KvCache& cache, GroupScores scores, float* out);

// The ReLU^2 weights of one head's scores, in place: w_j = max(s_j, 0)^2. Keys scored <= 0
// get exactly 0, so their values are never read.
void relu2_weights(float* scores, int64_t n);
// Sevren Sparse Attention over the whole cache. When `scores` are kept they receive, for the
// sparse layers that reuse this cache, scores.data[g * stride + j] = the maximum over KV head
// g's query heads of the pre-ReLU score s_j. `probe`, when not null, counts the weights (zero
// weights, V-skip groups).
void relu2_attention(const AttentionStep& a, const KvCache& cache, GroupScores scores, float* out,
                     Relu2Probe* probe = nullptr);

// ---- The work items of a step: one KV head's keys [j0, j1) --------------------------------
//
// KV head g's query heads q[heads][head_dim] against its keys 0 .. n-1 of the step, key j
// read at cache position at(j): first + j, or positions[j] (a sparse layer's selection).
// p[h n + j] receives head h's logit l_hj = scale q_h . k_j (cap tanh(l / cap) when cap > 0),
// then its weight. `kept`, when set, receives the per-KV-head maxima of the logits at their
// positions (record_group_scores; contiguous keys only, positions null).
struct GroupKeys {
  const KvCache& cache;
  int g;
  const float* q;
  int heads;
  int64_t n;
  float* p;
  float scale;
  float cap = 0;
  GroupScores kept = {};
  int64_t first = 0;
  const int32_t* positions = nullptr;
  kernels::Int8Heads q8 = {};  // q in int8 (int8_query), or none: f32 scores
  int64_t at(int64_t j) const { return positions ? positions[j] : first + j; }
};
// This thread's tile of cache rows, grown once (the chunk kernels and the block's items).
KvTile& thread_tile();
// The logits of keys [j0, j1) into p, and into kept: a tile of KvTile::kRows keys at a time
// (kernels::scores_rows, or scores_rows_int8 with int8 heads), each K row read as stored
// (int8 for q8) once for all heads. The
// first step of both chunk kernels below.
void score_keys(const GroupKeys& k, int64_t j0, int64_t j1);
// A softmax chunk: its logits (score_keys), then per head m = max_j p_hj, p_hj = exp(p_hj -
// m), sum = sum_j p_hj, o_c[h] = sum_j p_hj v_j (kernels::weighted_sum_tile: each V row read
// once for all heads).
void softmax_chunk(const GroupKeys& k, int64_t j0, int64_t j1, ChunkScratch c);
// The chunks 0 .. chunks-1 of one group (work items item0 ..) into the heads' outputs:
// M = max(sink_h, m_c), o_h = sum_c e^(m_c - M) o_c[h] / (e^(sink_h - M) + sum_c e^(m_c - M) sum_c).
// sinks: one logit per head that carries no value (gpt-oss), or null.
void combine_softmax(AttentionScratch& s, int64_t item0, int64_t chunks, int heads, int head_dim, const float* sinks,
                     float* o);
// A ReLU^2 chunk: its logits (score_keys), then p_hj = max(p_hj, 0)^2, sum = sum_j p_hj,
// o_c[h] = sum_j p_hj v_j, V row j read only when some head weights it (or always, without
// v_skip), counting reads and skips.
void relu2_chunk(const GroupKeys& k, int64_t j0, int64_t j1, bool v_skip, ChunkScratch c);
// o_h = sum_c o_c[h] / (c + sum_c sum_c).
void combine_relu2(AttentionScratch& s, int64_t item0, int64_t chunks, int heads, int head_dim, float c, float* o);
// One group's whole ReLU^2 attention through the chunk kernels, one chunk after another (what
// a step's items compute): scores and weights into s.scores[h n + j], o_h into o. For tests.
void relu2_group(const KvCache& cache, int g, const float* q, int heads, int64_t n, float c, AttentionScratch& s,
                 float* o);

// Sparse selection: the top_k keys by score, union the `recent` most recent of n keys; all
// n when n <= top_k + recent. Writes ascending positions to `out` ([n]: the top_k are
// found in it), returns their count.
int64_t select_keys(const float* scores, int64_t n, int top_k, int recent, int32_t* out);
// A sparse layer: per KV head g of the layer that owns the cache (`owner`), select keys by
// the owner's scores for g, then its own softmax(q^ . k^ / sqrt(d_h)) over the selection of
// the owner's cache.
void sparse_attention(const AttentionStep& a, const MixerSpec& owner, const KvCache& cache, GroupScores owner_scores,
                      float* out);

}  // namespace wren
