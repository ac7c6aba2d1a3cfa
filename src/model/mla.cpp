// Multi-head latent attention: the latent cache, the query projection, and the two equal
// forms of the attention (reference with K/V formed from the latent, absorbed for decode).
// The equations are in model/mla.h.
#include "model/mla.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <stdexcept>
#include <string>

#include "kernels/ops.h"
#include "model/attention.h"
#include "model/output_gate.h"
#include "model/region.h"

namespace wren {

namespace {

void check_spec(const MixerSpec& m) {
  auto fail = [](const std::string& what) { throw std::runtime_error("MLA mixer: " + what); };
  if (m.kind != MixerKind::mla) fail(std::string("kind is ") + to_string(m.kind) + ", expected mla");
  if (m.n_heads <= 0) fail("n_heads = " + std::to_string(m.n_heads) + ", expected > 0");
  if (m.kv_lora_rank <= 0) fail("kv_lora_rank = " + std::to_string(m.kv_lora_rank) + ", expected > 0");
  if (m.qk_nope_dim < 0 || m.qk_rope_dim < 0 || m.qk_nope_dim + m.qk_rope_dim <= 0)
    fail("qk_nope_dim = " + std::to_string(m.qk_nope_dim) + ", qk_rope_dim = " + std::to_string(m.qk_rope_dim) +
         ", expected both >= 0 with a positive sum");
  if (m.v_head_dim <= 0) fail("v_head_dim = " + std::to_string(m.v_head_dim) + ", expected > 0");
}

int rotary_dim(const MixerSpec& m) { return m.rope->rotary_dim ? m.rope->rotary_dim : m.qk_rope_dim; }

// The wiring must have filled the rope table from mla_rope(spec).
void check_rope(const MlaWeights& w, const MixerSpec& m) {
  if (m.rope && w.rope.inv_freq.size() != size_t(rotary_dim(m) / 2))
    throw std::runtime_error("MLA mixer: the rope table holds " + std::to_string(w.rope.inv_freq.size()) +
                             " frequencies, expected " + std::to_string(rotary_dim(m) / 2) + " (fill it with mla_rope)");
}

// Rotates the rope part of each of `heads` vectors (stride apart) at pos, scaled by YaRN's
// magnitude when there is one.
void rotate(const MlaWeights& w, const MixerSpec& m, float* x, int heads, int stride, int64_t pos) {
  kernels::rope(x, heads, stride, rotary_dim(m), w.rope.inv_freq.data(), pos);
  if (w.rope.magnitude != 1.0f)
    for (int h = 0; h < heads; ++h)
      for (int i = 0; i < rotary_dim(m); ++i) x[h * stride + i] *= w.rope.magnitude;
}

void check_cache(const MlaCache& cache, const MixerSpec& m, int64_t pos) {
  if (cache.latent_dim != m.kv_lora_rank || cache.key_dim != m.qk_rope_dim)
    throw std::runtime_error("MLA cache holds " + std::to_string(cache.latent_dim) + " + " +
                             std::to_string(cache.key_dim) + " values per token, the layer needs " +
                             std::to_string(m.kv_lora_rank) + " + " + std::to_string(m.qk_rope_dim));
  if (pos < 0 || pos >= cache.count)
    throw std::runtime_error("MLA attention at position " + std::to_string(pos) + " but the cache holds " +
                             std::to_string(cache.count) + " tokens (append the token first)");
}

void check_scratch(const MlaScratch& s, const MixerSpec& m, int64_t pos) {
  const size_t h = size_t(m.n_heads);
  if (s.q.size() < h * size_t(m.qk_nope_dim + m.qk_rope_dim) || s.o_lat.size() < h * size_t(m.kv_lora_rank) ||
      s.q_cat.size() < h * size_t(m.kv_lora_rank + m.qk_rope_dim) ||
      s.o.size() < h * size_t(m.v_head_dim) || s.q_a.size() < size_t(m.q_lora_rank) ||
      s.rows.size() < h * size_t(m.qk_nope_dim) || s.heads < m.n_heads || pos >= s.context)
    throw std::runtime_error("MLA scratch is smaller than the layer needs at position " + std::to_string(pos) +
                             " (call MlaScratch::reserve with the layer's spec and the context)");
}

// q = W_q x, or W_qb RMSNorm(W_qa x); then each head's q_pe = q[i dqk + nope, (i+1) dqk) is
// rotated at pos when the layer has rope. `first` (W_q or W_qa) joins the products of x
// the caller runs in one region; finish_query does the rest.
Product query_product(const MlaWeights& w, const MixerSpec& m, const float* x, MlaScratch& s) {
  return m.q_lora_rank > 0 ? Product{w.wq_a, x, s.q_a.data()} : Product{w.wq, x, s.q.data()};
}

// Each head's q_pe = q[i dqk + nope, (i+1) dqk) rotated at pos when the layer has rope.
void rotate_query(const MlaWeights& w, const MixerSpec& m, int64_t pos, float* q) {
  if (m.rope) rotate(w, m, q + m.qk_nope_dim, m.n_heads, m.qk_nope_dim + m.qk_rope_dim, pos);
}

void finish_query(const MlaWeights& w, const MixerSpec& m, const ModelConfig& c, int64_t pos, MlaScratch& s,
                  kernels::ThreadPool* pool) {
  if (m.q_lora_rank > 0) {
    kernels::rmsnorm(s.q_a.data(), w.q_a_norm.data(), m.q_lora_rank, float(c.norm.eps), c.norm.unit_offset,
                     s.q_a.data());
    const Product up{w.wq_b, s.q_a.data(), s.q.data()};
    run_products(std::span(&up, 1), pool);
  }
  rotate_query(w, m, pos, s.q.data());
}

void project_query(const MlaWeights& w, const MixerSpec& m, const ModelConfig& c, const float* x, int64_t pos,
                   MlaScratch& s, kernels::ThreadPool* pool) {
  const Product first = query_product(w, m, x, s);
  run_products(std::span(&first, 1), pool);
  finish_query(w, m, c, pos, s, pool);
}

// The cache slot of this token after [c ; k_pe] = W_kva x: c = RMSNorm(c), k_pe rotated.
void finish_slot(const MlaWeights& w, const MixerSpec& m, const ModelConfig& c, int64_t pos, float* slot) {
  kernels::rmsnorm(slot, w.kv_a_norm.data(), m.kv_lora_rank, float(c.norm.eps), c.norm.unit_offset, slot);
  if (m.rope) rotate(w, m, slot + m.kv_lora_rank, 1, m.qk_rope_dim, pos);
}

void check_append(const MixerSpec& m, const MlaCache& cache, int64_t pos) {
  if (pos != cache.count)
    throw std::runtime_error("MLA append at position " + std::to_string(pos) + " but the cache holds " +
                             std::to_string(cache.count) + " tokens");
  if (cache.latent_dim != m.kv_lora_rank || cache.key_dim != m.qk_rope_dim)
    throw std::runtime_error("MLA cache was not initialised for this layer's widths");
}

constexpr int64_t kMinParallelWork = int64_t(1) << 15;
constexpr int kMlaTile = 64;   // cache rows decoded and scored per step of the running softmax (seed 002)
constexpr int kMlaParts = 4;   // the cache's tiles are split into at most this many parts (one per thread)
// Items of the absorbed attention at most: parts times head groups. Eight, not four: with
// four items of a short context the thread that finished first waited 20% of the region.
constexpr int kMlaItems = 8;

// An item's working memory in the absorbed form: kMlaTile decoded cache rows, then their scores
// for every head ([head][kMlaTile]). (Also the reference form's one decoded row.)
size_t absorbed_tile_floats(const MixerSpec& m) {
  return size_t(kMlaTile) * size_t(m.kv_lora_rank + m.qk_rope_dim + m.n_heads);
}

float softmax_scale(const MlaWeights& w, const MixerSpec& m) {
  return (m.scale > 0 ? float(m.scale) : 1.0f / std::sqrt(float(m.qk_nope_dim + m.qk_rope_dim))) * w.rope.score_scale;
}

// out = W_o (o * sigmoid(W_g x)) (gate only when wg is present), from the heads' outputs in s.o.
void project_output(const MlaWeights& w, const MixerSpec& m, const float* x, MlaScratch& s, float* out,
                    kernels::ThreadPool* pool) {
  gated_output(w.wg, w.wo, Vec{}, int64_t(m.n_heads) * m.v_head_dim, x, s.o.data(), s.gate.data(), out, pool);
}

}  // namespace

RopeTable mla_rope(const MixerSpec& m) {
  check_spec(m);
  if (!m.rope) return {};
  const int rd = rotary_dim(m);
  if (rd <= 0 || rd % 2 != 0 || rd > m.qk_rope_dim)
    throw std::runtime_error("MLA mixer: rope.rotary_dim = " + std::to_string(rd) + ", expected even, > 0 and <= " +
                             "qk_rope_dim = " + std::to_string(m.qk_rope_dim));
  return rope_table(*m.rope, rd);
}

void MlaCache::init(const MixerSpec& m, int64_t cap, KvType type) {
  check_spec(m);
  if (cap <= 0) throw std::runtime_error("MLA cache capacity = " + std::to_string(cap) + ", expected > 0");
  latent_dim = m.kv_lora_rank;
  key_dim = m.qk_rope_dim;
  capacity = cap;
  count = 0;
  // q8: one group size for both parts, their gcd, so no group straddles the two.
  const int group = key_dim == 0 ? latent_dim : std::gcd(latent_dim, key_dim);
  rows_.init(type, width(), group, cap);
  staged_.assign(size_t(width()), 0.0f);
}

float* MlaCache::stage() {
  if (count >= capacity)
    throw std::runtime_error("context full: the MLA cache holds " + std::to_string(capacity) + " tokens");
  return staged_.data();
}

void MlaCache::commit() {
  if (count >= capacity)
    throw std::runtime_error("context full: the MLA cache holds " + std::to_string(capacity) + " tokens");
  rows_.write(count, staged_.data());
  ++count;  // after the write: a row write refused (a value its type cannot hold) adds no position
}

void MlaScratch::reserve(const MixerSpec& m, int64_t ctx) {
  check_spec(m);
  const size_t h = size_t(m.n_heads);
  auto grow = [](auto& v, size_t n) {
    if (v.size() < n) v.resize(n);
  };
  grow(q_a, size_t(m.q_lora_rank));
  grow(q, h * size_t(m.qk_nope_dim + m.qk_rope_dim));
  grow(q_cat, h * size_t(m.kv_lora_rank + m.qk_rope_dim));
  grow(o_lat, h * size_t(m.kv_lora_rank));
  grow(k, h * size_t(m.qk_nope_dim));
  grow(v, h * size_t(m.v_head_dim));
  grow(o, h * size_t(m.v_head_dim));
  grow(gate, h * size_t(m.v_head_dim));
  const size_t old_rows = rows.size();
  grow(rows, h * size_t(m.qk_nope_dim));
  for (size_t i = old_rows; i < rows.size(); ++i) rows[i] = int32_t(i);
  // Scores are laid out [head][context] and hold nothing between calls, so growing either
  // dimension just re-sizes them.
  context = std::max(context, ctx);
  heads = std::max(heads, m.n_heads);
  grow(scores, size_t(heads) * size_t(context));
  grow(parts, size_t(kMlaParts) * h * size_t(m.kv_lora_rank + 2));
  grow(tiles, size_t(kMlaItems) * absorbed_tile_floats(m));
}

void mla_append(const MlaWeights& w, const MixerSpec& m, const ModelConfig& c, const float* x, int64_t pos,
                MlaCache& cache, MlaScratch& /*unused: the cache slot is the working memory*/,
                kernels::ThreadPool* pool) {
  check_rope(w, m);
  check_append(m, cache, pos);
  float* slot = cache.stage();
  const Product latent{w.wkv_a, x, slot};
  run_products(std::span(&latent, 1), pool);
  finish_slot(w, m, c, pos, slot);
  cache.commit();
}

void mla_attention(const MlaWeights& w, const MixerSpec& m, const ModelConfig& c, const float* x, int64_t pos,
                   const MlaCache& cache, MlaScratch& s, float* out, kernels::ThreadPool* pool) {
  check_rope(w, m);
  check_cache(cache, m, pos);
  check_scratch(s, m, pos);
  project_query(w, m, c, x, pos, s, pool);
  const int H = m.n_heads, nope = m.qk_nope_dim, rope = m.qk_rope_dim, dqk = nope + rope, dv = m.v_head_dim;
  const float scale = softmax_scale(w, m);
  const int64_t n = pos + 1;
  // Scores: K_i,t = [W_UK c_t ; k_pe_t] for every head at once, one position at a time.
  float* buf = s.tiles.data();
  for (int64_t t = 0; t < n; ++t) {
    const float* row = cache.row(t, buf);
    if (nope > 0) kernels::matvec(w.wk_b, row, s.k.data(), pool);
    for (int h = 0; h < H; ++h) {
      const float* q = s.q.data() + h * dqk;
      const float qk = kernels::dot(q, s.k.data() + h * nope, nope) + kernels::dot(q + nope, row + m.kv_lora_rank, rope);
      s.scores[size_t(h * s.context + t)] = qk * scale;
    }
  }
  for (int h = 0; h < H; ++h) kernels::softmax(s.scores.data() + h * s.context, n);
  // o_i = sum_t p_i,t V_i,t with V_t = W_UV c_t, again all heads per position.
  std::fill(s.o.begin(), s.o.begin() + H * dv, 0.0f);
  for (int64_t t = 0; t < n; ++t) {
    kernels::matvec(w.wv_b, cache.row(t, buf), s.v.data(), pool);
    for (int h = 0; h < H; ++h)
      kernels::axpy(s.scores[size_t(h * s.context + t)], s.v.data() + h * dv, dv, s.o.data() + h * dv);
  }
  project_output(w, m, x, s, out, pool);
}

namespace {

// One part of the absorbed attention: positions [begin, end) in tiles of kMlaTile rows, each
// row [c_t ; k_pe_t] read in place (q8: decoded once) for all heads, with a running softmax
// per head i:
//   s_i,t = (q~_i . c_t + q_pe_i . k_pe_t) scale = [q~_i ; q_pe_i] . [c_t ; k_pe_t] scale,
//   m_i' = max(m_i, max_t s_i,t),  l_i' = l_i e^(m_i - m_i') + sum_t e^(s_i,t - m_i'),
//   a_i' = a_i e^(m_i - m_i') + sum_t e^(s_i,t - m_i') c_t.
// Every head meets the tile at once, as the query heads of one KV group do (kernels'
// scores_rows and weighted_sum_tile: each row loaded once for four heads): the heads share the
// latent rows, so MLA's absorbed decode is attention with one KV head of width kv_lora + rope.
// Against one dot, exp and axpy call per head and position (48 us a layer at up to 256
// positions), Xeon with AMX, nenya q8 at 2 threads: tg32 at a depth of 4096 30.2-30.9 ->
// 36.7-38.4 tokens/s, pp1024 116 -> 126; at no depth the same.
// part: [H][L] accumulators a, then H maxima m and H sums l; this call fills heads [h0, h1).
void absorbed_part(const MixerSpec& m, float scale, const MlaCache& cache, const float* q_cat, int64_t begin,
                   int64_t end, int h0, int h1, float* tile, float* part) {
  const int H = m.n_heads, L = m.kv_lora_rank;
  const int width = cache.width(), heads = h1 - h0;
  float* acc = part;
  float* top = part + int64_t(H) * L;
  float* sum = top + H;
  std::fill(acc + int64_t(h0) * L, acc + int64_t(h1) * L, 0.0f);
  std::fill(top + h0, top + h1, -INFINITY);
  std::fill(sum + h0, sum + h1, 0.0f);
  float* rows_buf = tile;                                  // [kMlaTile][width]
  float* p = tile + int64_t(kMlaTile) * width;             // [heads][kMlaTile] scores, then weights
  const float* rows[kMlaTile];
  static_assert(kMlaTile <= KvTile::kRows);
  KvTile& in_place = thread_tile();  // this thread's, kept: no tile of ~2 KB set up per call
  for (int64_t t0 = begin; t0 < end; t0 += kMlaTile) {
    const int n = int(std::min<int64_t>(kMlaTile, end - t0));
    // f32, bf16 and f16 rows are read where they are stored; q8 rows decoded into rows_buf.
    kernels::CacheRows tile_rows{.f32 = rows};
    if (cache.to_tile(t0, n, in_place)) tile_rows = in_place.rows();
    else
      for (int r = 0; r < n; ++r) rows[r] = cache.row(t0 + r, rows_buf + int64_t(r) * width);
    kernels::scores_rows(q_cat + int64_t(h0) * width, width, heads, tile_rows, n, width, scale, p, kMlaTile);
    for (int h = h0; h < h1; ++h) {
      const float rescale = fold_into_softmax(p + int64_t(h - h0) * kMlaTile, n, top[h], sum[h]);
      float* a = acc + int64_t(h) * L;
      if (rescale != 1.0f)  // 0 on the first tile
        for (int i = 0; i < L; ++i) a[i] *= rescale;
    }
    kernels::weighted_sum_tile(p, kMlaTile, heads, tile_rows, n, L, acc + int64_t(h0) * L, L);
  }
}

// The groups of heads each part of the cache is split into (absorbed_values): the most, up to
// kMlaItems / parts, whose sizes are equal multiples of four; else the most up to that.
int64_t head_groups_of(int H, int64_t parts) {
  const int64_t most = std::min<int64_t>(H, kMlaItems / parts);
  for (int64_t g = most; g >= 1; --g)
    if (H % g == 0 && (H / g) % 4 == 0) return g;
  return most;
}

// The absorbed attention of the token at pos from its query in s.q: q~_i from wk_b's rows
// per head; the cache in up to kMlaParts parts of whole tiles (absorbed_part), merged as
//   o_lat_i = sum_p e^(m_p,i - M_i) a_p,i / sum_p e^(m_p,i - M_i) l_p,i,  M_i = max_p m_p,i;
// then o_i = W_UV_i o_lat_i per head, written to s.o.
void absorbed_values(const MlaWeights& w, const MixerSpec& m, int64_t pos, const MlaCache& cache, MlaScratch& s,
                     kernels::ThreadPool* pool) {
  const int H = m.n_heads, nope = m.qk_nope_dim, rope = m.qk_rope_dim, dqk = nope + rope, dv = m.v_head_dim;
  const int L = m.kv_lora_rank;
  const float scale = softmax_scale(w, m);
  const int64_t n = pos + 1;
  // Below kMinParallelWork multiply-adds over the cache (a short context) one thread does it all.
  const bool parallel = n * int64_t(H) * (L + rope) >= kMinParallelWork;
  kernels::ThreadPool* workers = parallel ? pool : nullptr;
  const int width = cache.width();  // L + rope (check_cache, check_append): q_cat rows match the cache's
  kernels::run_items(workers, H, [&](int64_t h) {  // q~_i = W_UK_i^T q_nope_i: a weighted sum of rows
    float* q_cat = s.q_cat.data() + h * width;
    std::fill(q_cat, q_cat + L, 0.0f);
    if (nope > 0) kernels::add_rows(w.wk_b, s.rows.data() + h * nope, s.q.data() + h * dqk, nope, q_cat, nullptr);
    std::copy_n(s.q.data() + h * dqk + nope, rope, q_cat + L);
  });
  const int64_t tiles = (n + kMlaTile - 1) / kMlaTile;
  // The split depends on the length alone, so 1 or 2 threads give the same bits. Each part's
  // heads are split into groups as well, up to kMlaItems items in all, so a short context keeps
  // every thread busy too: groups of a multiple of four heads where the head count allows (the
  // tile kernels take four heads at a time; one left over reads every row again on its own).
  const int64_t parts = std::min<int64_t>(tiles, kMlaParts);
  const int64_t head_groups = head_groups_of(H, parts);
  const int64_t part_floats = int64_t(H) * (L + 2), tile_floats = int64_t(absorbed_tile_floats(m));
  kernels::run_items(workers, parts * head_groups, [&](int64_t item) {
    const int64_t i = item / head_groups, g = item % head_groups;
    const int64_t begin = tiles * i / parts * kMlaTile, end = std::min(n, tiles * (i + 1) / parts * kMlaTile);
    absorbed_part(m, scale, cache, s.q_cat.data(), begin, end, int(H * g / head_groups),
                  int(H * (g + 1) / head_groups), s.tiles.data() + item * tile_floats, s.parts.data() + i * part_floats);
  });
  for (int h = 0; h < H; ++h) {
    float M = -INFINITY, l = 0;
    for (int64_t i = 0; i < parts; ++i) M = std::max(M, s.parts[size_t(i * part_floats + int64_t(H) * L + h)]);
    float* o_lat = s.o_lat.data() + int64_t(h) * L;
    std::fill(o_lat, o_lat + L, 0.0f);
    for (int64_t i = 0; i < parts; ++i) {
      const float* part = s.parts.data() + i * part_floats;
      const float f = std::exp(part[int64_t(H) * L + h] - M);
      l += f * part[int64_t(H) * L + H + h];
      kernels::axpy(f, part + int64_t(h) * L, L, o_lat);
    }
    const float inv = 1.0f / l;
    for (int i = 0; i < L; ++i) o_lat[i] *= inv;
  }
  kernels::run_items(workers, H, [&](int64_t h) {
    kernels::matvec(w.wv_b.slice_rows(h * dv, dv), s.o_lat.data() + h * L, s.o.data() + h * dv, nullptr);
  });
}

// absorbed_values, then the output gate and W_o; s.gate holds W_g x when the layer has an
// output gate.
void absorbed_heads(const MlaWeights& w, const MixerSpec& m, int64_t pos, const MlaCache& cache, MlaScratch& s,
                    float* out, kernels::ThreadPool* pool) {
  absorbed_values(w, m, pos, cache, s, pool);
  const int64_t width = int64_t(m.n_heads) * m.v_head_dim;
  if (present(w.wg)) {  // output gate: o *= sigmoid(W_g x)
    kernels::sigmoid(s.gate.data(), width, s.gate.data());
    for (int64_t i = 0; i < width; ++i) s.o[size_t(i)] *= s.gate[size_t(i)];
  }
  const Product output{w.wo, s.o.data(), out};
  run_products(std::span(&output, 1), pool);
}

}  // namespace

void mla_attention_absorbed(const MlaWeights& w, const MixerSpec& m, const ModelConfig& c, const float* x,
                            int64_t pos, const MlaCache& cache, MlaScratch& s, float* out, kernels::ThreadPool* pool) {
  check_rope(w, m);
  check_cache(cache, m, pos);
  check_scratch(s, m, pos);
  const Product first[] = {query_product(w, m, x, s), {w.wg, x, s.gate.data()}};
  run_products(first, pool);
  finish_query(w, m, c, pos, s, pool);
  absorbed_heads(w, m, pos, cache, s, out, pool);
}

void mla_decode(const MlaWeights& w, const MixerSpec& m, const ModelConfig& c, const float* x, int64_t pos,
                MlaCache& cache, MlaScratch& s, float* out, kernels::ThreadPool* pool) {
  check_rope(w, m);
  check_append(m, cache, pos);
  check_scratch(s, m, pos);
  float* slot = cache.stage();
  const Product first[] = {query_product(w, m, x, s), {w.wg, x, s.gate.data()}, {w.wkv_a, x, slot}};
  run_products(first, pool);
  finish_slot(w, m, c, pos, slot);
  cache.commit();
  finish_query(w, m, c, pos, s, pool);
  absorbed_heads(w, m, pos, cache, s, out, pool);
}

void mla_batch_inputs(const MlaBatchInput& in, MlaBatch& b, kernels::ThreadPool* pool) {
  const MlaWeights& w = in.w;
  const MixerSpec& m = in.m;
  check_spec(m);
  const auto grow = [](std::vector<float>& v, int64_t n) {
    if (v.size() < size_t(n)) v.resize(size_t(n));
  };
  const int64_t q_lora = m.q_lora_rank;
  b.q_width = int64_t(m.n_heads) * (m.qk_nope_dim + m.qk_rope_dim);
  b.o_width = int64_t(m.n_heads) * m.v_head_dim;
  b.kv_width = in.own_kv ? m.kv_lora_rank + m.qk_rope_dim : 0;
  grow(b.q, in.n_query * b.q_width), grow(b.o, in.n_query * b.o_width);
  BatchProduct first[3];
  int count = 0;
  if (q_lora > 0) {
    grow(b.q_a, in.n_query * q_lora);
    first[count++] = {w.wq_a, in.query_x, in.ldx, b.q_a.data(), q_lora, in.n_query};
  } else {
    first[count++] = {w.wq, in.query_x, in.ldx, b.q.data(), b.q_width, in.n_query};
  }
  if (present(w.wg)) {
    grow(b.gate, in.n_query * b.o_width);
    first[count++] = {w.wg, in.query_x, in.ldx, b.gate.data(), b.o_width, in.n_query};
  }
  if (in.own_kv) {
    grow(b.kv, in.n * b.kv_width);
    first[count++] = {w.wkv_a, in.x, in.ldx, b.kv.data(), b.kv_width, in.n};
  }
  run_batch_products(std::span(first, size_t(count)), pool);
  if (q_lora > 0 && in.n_query > 0) {  // q = W_qb RMSNorm(W_qa x), per row then one GEMM
    for (int64_t t = 0; t < in.n_query; ++t) {
      float* qa = b.q_a.data() + t * q_lora;
      kernels::rmsnorm(qa, w.q_a_norm.data(), q_lora, float(in.c.norm.eps), in.c.norm.unit_offset, qa);
    }
    const BatchProduct up{w.wq_b, b.q_a.data(), q_lora, b.q.data(), b.q_width, in.n_query};
    run_batch_products(std::span(&up, 1), pool);
  }
}

void mla_append_projected(const MlaWeights& w, const MixerSpec& m, const ModelConfig& c, const float* kv, int64_t pos,
                          MlaCache& cache) {
  check_rope(w, m);
  check_append(m, cache, pos);
  float* slot = cache.stage();
  std::copy_n(kv, cache.width(), slot);
  finish_slot(w, m, c, pos, slot);
  cache.commit();
}

void mla_attend_projected(const MlaWeights& w, const MixerSpec& m, const float* q, int64_t pos, const MlaCache& cache,
                          MlaScratch& s, float* o, kernels::ThreadPool* pool) {
  check_rope(w, m);
  check_cache(cache, m, pos);
  check_scratch(s, m, pos);
  const int64_t q_width = int64_t(m.n_heads) * (m.qk_nope_dim + m.qk_rope_dim);
  std::copy_n(q, q_width, s.q.data());
  rotate_query(w, m, pos, s.q.data());
  absorbed_values(w, m, pos, cache, s, pool);
  std::copy_n(s.o.data(), int64_t(m.n_heads) * m.v_head_dim, o);
}

void mla_batch_output(const MlaWeights& w, int64_t n_query, MlaBatch& b, float* y, int64_t ldy,
                      kernels::ThreadPool* pool) {
  if (present(w.wg)) gate_rows(b.o.data(), b.gate.data(), b.o_width, n_query);  // as project_output
  const BatchProduct output{w.wo, b.o.data(), b.o_width, y, ldy, n_query};
  run_batch_products(std::span(&output, 1), pool);
}

}  // namespace wren
