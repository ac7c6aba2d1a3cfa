// The attention mechanisms over whole sequences, each the batched form of the engine's
// per-token function of the same name (model/window_attention.cpp, relu2_attention.cpp,
// sparse_attention.cpp, attention.cpp). With q_i the query of token i and k_j, v_j the keys
// and values of its document up to i (M_ij: the mask):
//
//   window:  p_ij = softmax_j(cap(s q_i . k_j))  (+ sink logit),  o_i = sum_j p_ij v_j,
//            s = scale or 1/sqrt(d_h) (times YaRN's factor), cap(z) = c tanh(z / c)
//   relu2:   s_ij = q^_i . k^_j / sqrt(d_h),  w_ij = max(s_ij, 0)^2,
//            o_i = sum_j w_ij v_j / (c + sum_j w_ij)
//   sparse:  per KV head g, S_i = top_k_j(max_{h in g} s^full_hij) U {the `recent` latest j},
//            p_ij = softmax_{j in S_i}(q^_i . k^_j / sqrt(d_h)),  o_i = sum_{j in S_i} p_ij v_j
//
// GQA: query head h reads KV head h / (n_heads / n_kv_heads).
#include "train/attention.h"

#include <cmath>
#include <limits>

namespace wren::train {

namespace {

constexpr double kNegInf = -std::numeric_limits<double>::infinity();

// [B, T, heads * dim] -> [B, heads, T, dim]
torch::Tensor split_heads(const torch::Tensor& x, int64_t heads) {
  return x.view({x.size(0), x.size(1), heads, -1}).transpose(1, 2);
}

// QK-norm: each head's vector (or the whole projection) RMS-normalised with its gain.
// x: [B, T, heads * head_dim] -> [B, heads, T, head_dim].
torch::Tensor qk_normalise(const torch::Tensor& x, const torch::Tensor& gain, QkNorm mode, int heads,
                           const ModelConfig& c) {
  if (mode == QkNorm::full) return split_heads(rmsnorm(x, gain, c), heads);
  torch::Tensor h = split_heads(x, heads);
  return mode == QkNorm::head ? rmsnorm(h, gain, c) : h;
}

// RoPE, rotate-half layout: with a_i = pos inv_freq_i for i < r/2 (r = rotary_dim),
//   x'_i = x_i cos a_i - x_{i+r/2} sin a_i,   x'_{i+r/2} = x_{i+r/2} cos a_i + x_i sin a_i,
// the rotated part scaled by YaRN's or LongRoPE's magnitude (LongRoPE's frequencies chosen by
// position); dimensions from r on pass through. Angles are formed in double, as the engine's
// kernel forms them. x: [B, heads, T, head_dim].
torch::Tensor rotate(const AttentionParams& w, const MixerSpec& m, const Layout& l, const torch::Tensor& x) {
  if (!m.rope) return x;
  const int64_t half = int64_t(w.rope.inv_freq.size());
  auto doubles = [](const std::vector<float>& f) {
    return torch::tensor(std::vector<double>(f.begin(), f.end()), torch::kFloat64);
  };
  const torch::Tensor pos = l.pos.to(torch::kFloat64).unsqueeze(-1);
  torch::Tensor angle = pos * doubles(w.rope.inv_freq);  // [B, T, half]
  if (!w.rope.inv_freq_long.empty())  // LongRoPE: the long factors from position long_from on
    angle = torch::where(pos >= double(w.rope.long_from), pos * doubles(w.rope.inv_freq_long), angle);
  torch::Tensor cos = angle.cos().to(x.scalar_type()).unsqueeze(1), sin = angle.sin().to(x.scalar_type()).unsqueeze(1);
  torch::Tensor x1 = x.narrow(-1, 0, half), x2 = x.narrow(-1, half, half);
  torch::Tensor rotated = torch::cat({x1 * cos - x2 * sin, x2 * cos + x1 * sin}, -1);
  if (w.rope.magnitude != 1.0f) rotated = rotated * w.rope.magnitude;
  const int64_t rest = x.size(-1) - 2 * half;
  return rest ? torch::cat({rotated, x.narrow(-1, 2 * half, rest)}, -1) : rotated;
}

// [B, G, T, dh] -> [B, G * group, T, dh]: each KV head serves its query group.
torch::Tensor expand_kv(const torch::Tensor& x, int64_t n_heads) {
  const int64_t group = n_heads / x.size(1);
  return group == 1 ? x : x.repeat_interleave(group, 1);
}

// Per KV head, the maximum over its query group of scores [B, H, T, T], -inf where masked.
torch::Tensor group_max(const torch::Tensor& scores, const torch::Tensor& mask, int64_t kv_heads) {
  torch::NoGradGuard no_grad;
  torch::Tensor s = scores.detach().masked_fill(mask.logical_not(), kNegInf);
  return s.view({s.size(0), kv_heads, -1, s.size(2), s.size(3)}).amax(2);
}

}  // namespace

torch::Tensor project_query(const AttentionParams& w, const MixerSpec& m, const ModelConfig& c, const Layout& l,
                            const torch::Tensor& x) {
  torch::Tensor q = qk_normalise(linear_map(x, w.wq, w.bq), w.q_norm, m.qk_norm, m.n_heads, c);
  return rotate(w, m, l, q);
}

KvEntries project_kv(const AttentionParams& w, const MixerSpec& m, const ModelConfig& c, const Layout& l,
                     const torch::Tensor& x) {
  KvEntries kv;
  kv.k = rotate(w, m, l, qk_normalise(linear_map(x, w.wk, w.bk), w.k_norm, m.qk_norm, m.n_kv_heads, c));
  kv.v = split_heads(linear_map(x, w.wv, w.bv), m.n_kv_heads);
  return kv;
}

torch::Tensor project_output(const AttentionParams& w, const torch::Tensor& x, const torch::Tensor& o) {
  torch::Tensor heads = o.transpose(1, 2).reshape({o.size(0), o.size(2), -1});  // [B, T, H * dv]
  if (w.wg.defined()) heads = heads * torch::sigmoid(linear_map(x, w.wg));         // output gate
  return linear_map(heads, w.wo, w.bo);
}

torch::Tensor window_attention(const AttentionParams& w, const MixerSpec& m, const ModelConfig& c, const Layout& l,
                               const torch::Tensor& x, const KvEntries& kv, int window, torch::Tensor* group_scores) {
  torch::Tensor q = project_query(w, m, c, l, x);
  const double scale = (m.scale > 0 ? m.scale : 1.0 / std::sqrt(double(m.head_dim))) * w.rope.score_scale;
  torch::Tensor logits = torch::matmul(q, expand_kv(kv.k, m.n_heads).transpose(-1, -2)) * scale;  // [B, H, T, T]
  if (m.softcap > 0) logits = m.softcap * torch::tanh(logits / m.softcap);  // Gemma 2
  torch::Tensor mask = l.causal;
  if (window > 0) mask = mask.logical_and(l.offset < window);
  if (group_scores) *group_scores = group_max(logits, mask, kv.k.size(1));
  logits = logits.masked_fill(mask.logical_not(), kNegInf);
  torch::Tensor p;
  if (w.sinks.defined()) {  // one more logit per head in the denominator, carrying no value
    torch::Tensor sink = w.sinks.view({1, -1, 1, 1}).expand({logits.size(0), -1, logits.size(2), 1});
    p = torch::softmax(torch::cat({logits, sink}, -1), -1).narrow(-1, 0, logits.size(-1));
  } else {
    p = torch::softmax(logits, -1);
  }
  return project_output(w, x, torch::matmul(p, expand_kv(kv.v, m.n_heads)));
}

torch::Tensor relu2_attention(const AttentionParams& w, const MixerSpec& m, const ModelConfig& c, const Layout& l,
                              const torch::Tensor& x, const KvEntries& kv, torch::Tensor* group_scores) {
  torch::Tensor q = project_query(w, m, c, l, x);
  torch::Tensor s = torch::matmul(q, expand_kv(kv.k, m.n_heads).transpose(-1, -2)) / std::sqrt(double(m.head_dim));
  if (group_scores) *group_scores = group_max(s, l.causal, kv.k.size(1));
  torch::Tensor weights = torch::relu(s).pow(2).masked_fill(l.causal.logical_not(), 0.0);
  torch::Tensor o = torch::matmul(weights, expand_kv(kv.v, m.n_heads)) / (weights.sum(-1, true) + m.relu2_c);
  return project_output(w, x, o);
}

torch::Tensor select_keys(const torch::Tensor& group_scores, const Layout& l, int top_k, int recent) {
  torch::NoGradGuard no_grad;
  const torch::Tensor allowed = l.causal;                  // [B, 1, T, T]
  const torch::Tensor n = allowed.sum(-1, true);           // keys of the document up to the query
  const int64_t T = group_scores.size(-1);
  torch::Tensor chosen = torch::zeros_like(group_scores, torch::kBool);
  if (top_k > 0) {
    torch::Tensor best = std::get<1>(group_scores.topk(std::min<int64_t>(top_k, T), -1));
    chosen = chosen.scatter(-1, best, true).logical_and(allowed);  // rows with fewer keys picked some -inf
  }
  chosen = chosen.logical_or(allowed.logical_and(l.offset < recent));
  return torch::where(n <= int64_t(top_k) + recent, allowed, chosen);
}

torch::Tensor sparse_attention(const AttentionParams& w, const MixerSpec& m, const ModelConfig& c, const Layout& l,
                               const torch::Tensor& x, const KvEntries& kv, const torch::Tensor& group_scores) {
  torch::Tensor q = project_query(w, m, c, l, x);
  torch::Tensor selected = expand_kv(select_keys(group_scores, l, m.top_k, m.recent), m.n_heads);
  torch::Tensor logits = torch::matmul(q, expand_kv(kv.k, m.n_heads).transpose(-1, -2)) / std::sqrt(double(m.head_dim));
  torch::Tensor p = torch::softmax(logits.masked_fill(selected.logical_not(), kNegInf), -1);
  return project_output(w, x, torch::matmul(p, expand_kv(kv.v, m.n_heads)));
}

}  // namespace wren::train
