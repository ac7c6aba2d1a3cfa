// Multi-head latent attention over whole sequences, the batched form of model/mla.cpp's
// mla_append + mla_attention (the equations are in train/mla.h). Tensors are
// [B, heads, T, width] inside, [B, T, d] outside.
#include "train/mla.h"

#include <cmath>
#include <limits>

namespace wren::train {

namespace {

// RoPE, rotate-half layout over the first r = 2 |inv_freq| values of the last dimension of x
// ([B, T, ..., width] or [B, heads, T, width] with pos broadcast accordingly): with a_i = pos f_i,
//   x'_i = x_i cos a_i - x_{i+r/2} sin a_i,   x'_{i+r/2} = x_{i+r/2} cos a_i + x_i sin a_i,
// the rotated part scaled by YaRN's magnitude; the rest passes through. Angles in double, as
// the engine's kernel forms them. `pos` is [B, T] shaped to broadcast against x's leading dims.
torch::Tensor rotate(const RopeTable& rope, const torch::Tensor& pos, const torch::Tensor& x) {
  const int64_t half = int64_t(rope.inv_freq.size());
  const torch::Tensor freq =
      torch::tensor(std::vector<double>(rope.inv_freq.begin(), rope.inv_freq.end()), torch::kFloat64).to(x.device());
  const torch::Tensor angle = pos.to(torch::kFloat64).unsqueeze(-1) * freq;
  const torch::Tensor cos = angle.cos().to(x.scalar_type()), sin = angle.sin().to(x.scalar_type());
  const torch::Tensor x1 = x.narrow(-1, 0, half), x2 = x.narrow(-1, half, half);
  torch::Tensor rotated = torch::cat({x1 * cos - x2 * sin, x2 * cos + x1 * sin}, -1);
  if (rope.magnitude != 1.0f) rotated = rotated * rope.magnitude;
  const int64_t rest = x.size(-1) - 2 * half;
  return rest ? torch::cat({rotated, x.narrow(-1, 2 * half, rest)}, -1) : rotated;
}

}  // namespace

MlaLatents mla_latents(const MlaParams& w, const MixerSpec& m, const ModelConfig& c, const Layout& l,
                       const torch::Tensor& x) {
  const torch::Tensor kv = linear_map(x, w.wkv_a);  // [B, T, kv_lora + rope]
  MlaLatents out;
  out.c = rmsnorm(kv.narrow(-1, 0, m.kv_lora_rank), w.kv_a_norm, c);
  out.k_pe = kv.narrow(-1, m.kv_lora_rank, m.qk_rope_dim);
  if (m.rope) out.k_pe = rotate(w.rope, l.pos, out.k_pe);
  return out;
}

torch::Tensor mla_attention(const MlaParams& w, const MixerSpec& m, const ModelConfig& c, const Layout& l,
                            const torch::Tensor& x, const MlaLatents& kv) {
  const int64_t B = x.size(0), T = x.size(1), H = m.n_heads, nope = m.qk_nope_dim, rope = m.qk_rope_dim;
  const torch::Tensor q_in = m.q_lora_rank > 0 ? linear_map(rmsnorm(linear_map(x, w.wq_a), w.q_a_norm, c), w.wq_b)
                                               : linear_map(x, w.wq);
  const torch::Tensor q = q_in.view({B, T, H, nope + rope}).transpose(1, 2);  // [B, H, T, nope + rope]
  torch::Tensor q_pe = q.narrow(-1, nope, rope);
  if (m.rope) q_pe = rotate(w.rope, l.pos.unsqueeze(1), q_pe);
  // q_i . K_i,t = q_nope_i . W_UK_i c_t + q_pe_i . k_pe_t (the shared key serves every head).
  torch::Tensor logits = torch::matmul(q_pe, kv.k_pe.unsqueeze(1).transpose(-1, -2));  // [B, H, T, T]
  if (nope > 0) {
    const torch::Tensor k_nope = linear_map(kv.c, w.wk_b).view({B, T, H, nope}).transpose(1, 2);
    logits = logits + torch::matmul(q.narrow(-1, 0, nope), k_nope.transpose(-1, -2));
  }
  const double scale = (m.scale > 0 ? m.scale : 1.0 / std::sqrt(double(nope + rope))) * w.rope.score_scale;
  logits = (logits * scale).masked_fill(l.causal.logical_not(), -std::numeric_limits<double>::infinity());
  const torch::Tensor v = linear_map(kv.c, w.wv_b).view({B, T, H, m.v_head_dim}).transpose(1, 2);
  torch::Tensor o = torch::matmul(torch::softmax(logits, -1), v).transpose(1, 2).reshape({B, T, -1});  // [B, T, H dv]
  if (w.wg.defined()) o = o * torch::sigmoid(linear_map(x, w.wg));  // output gate
  return linear_map(o, w.wo);
}

}  // namespace wren::train
