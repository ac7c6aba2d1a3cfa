// The Mamba-2 mixer over whole sequences (train/mamba2.h).
#include "train/mamba2.h"

#include <stdexcept>
#include <string>
#include <vector>

namespace wren::train {

namespace {

constexpr int64_t kChunk = 64;

void require_shape(const torch::Tensor& t, const std::string& name, std::vector<int64_t> shape) {
  if (!t.defined() || t.sizes() != torch::IntArrayRef(shape))
    throw std::invalid_argument("train::mamba2: attn." + name + " is missing or has the wrong shape");
}

void check(const Mamba2Params& p, const MixerSpec& m, const ModelConfig& c) {
  const int64_t h = m.n_heads, inner = h * m.head_dim, bc = int64_t(m.ssm_groups()) * m.state_dim, d = c.d_model;
  const int64_t K = m.conv_kernel;
  if (m.kind != MixerKind::mamba2 || h % m.ssm_groups())
    throw std::invalid_argument(std::string("train::mamba2: mixer kind ") + to_string(m.kind) + " or its groups do not fit");
  require_shape(p.wg, "wg", {inner, d}), require_shape(p.w_x, "w_x", {inner, d});
  require_shape(p.w_b, "w_b", {bc, d}), require_shape(p.w_c, "w_c", {bc, d}), require_shape(p.w_decay, "w_decay", {h, d});
  require_shape(p.conv_x, "conv_x", {inner, K}), require_shape(p.conv_b, "conv_b", {bc, K});
  require_shape(p.conv_c, "conv_c", {bc, K});
  for (const auto& [t, name] : {std::pair{&p.decay_bias, "decay_bias"}, {&p.a_log, "a_log"}, {&p.d_skip, "d_skip"}})
    require_shape(*t, name, {h});
  require_shape(p.o_norm, "o_norm", {inner}), require_shape(p.wo, "wo", {d, inner});
}

// SiLU(conv(x) + bias) inside each document.
torch::Tensor conv_silu(const torch::Tensor& x, const torch::Tensor& taps, const torch::Tensor& bias, const Layout& l) {
  torch::Tensor y = causal_conv(x, taps, l);
  return torch::silu(bias.defined() ? y + bias : y);
}

// One chunk [t0, t0 + L) of every head. x [B, h, L, P], b / cm [B, h, L, N], dt / a [B, h, L]
// (a = dt A, the log decays); start [B, L]; S [B, h, P, N] carried in and out.
torch::Tensor chunk_ssd(const torch::Tensor& x, const torch::Tensor& b, const torch::Tensor& cm, const torch::Tensor& dt,
                        const torch::Tensor& a, const torch::Tensor& start, int64_t t0, torch::Tensor& S) {
  const int64_t B = start.size(0), L = start.size(1);
  const auto ids = torch::TensorOptions().dtype(torch::kInt64).device(start.device());
  const torch::Tensor r = torch::arange(L, ids);
  // same[r, s]: s <= r and both in one document; carry[r]: r's document began before the chunk.
  const torch::Tensor same = (start.unsqueeze(2) == start.unsqueeze(1)).logical_and(r.unsqueeze(1) >= r.unsqueeze(0)).unsqueeze(1);
  const torch::Tensor carry = (start < t0).view({B, 1, L, 1}).to(x.scalar_type());
  const torch::Tensor cum = a.cumsum(-1);                                                 // [B, h, L]
  const torch::Tensor decay = (cum.unsqueeze(-1) - cum.unsqueeze(-2)).masked_fill(same.logical_not(), -INFINITY).exp();
  const torch::Tensor scores = torch::matmul(cm, b.transpose(-1, -2)) * decay * dt.unsqueeze(-2);  // [B, h, L, L]
  const torch::Tensor from_before = carry * cum.exp().unsqueeze(-1) * torch::matmul(cm, S.transpose(-1, -2));
  const torch::Tensor y = torch::matmul(scores, x) + from_before;                        // [B, h, L, P]
  // The state after the chunk: the last token's document's writes, and S if it began before.
  const torch::Tensor last = same.select(2, L - 1).to(x.scalar_type());                   // [B, 1, L]
  const torch::Tensor w = (cum.narrow(-1, L - 1, 1) - cum).exp() * dt * last;             // [B, h, L]
  S = carry.select(2, L - 1).unsqueeze(-1) * cum.narrow(-1, L - 1, 1).exp().unsqueeze(-1) * S +
      torch::matmul((x * w.unsqueeze(-1)).transpose(-1, -2), b);
  return y;
}

}  // namespace

torch::Tensor mamba2(const Mamba2Params& p, const MixerSpec& m, const ModelConfig& c, const Layout& l,
                     const torch::Tensor& xn) {
  check(p, m, c);
  const int64_t Bt = xn.size(0), T = xn.size(1), h = m.n_heads, P = m.head_dim, G = m.ssm_groups(), N = m.state_dim;
  const torch::Tensor z = linear_map(xn, p.wg);
  const torch::Tensor x = conv_silu(linear_map(xn, p.w_x), p.conv_x, p.conv_x_bias, l);
  const torch::Tensor b = conv_silu(linear_map(xn, p.w_b), p.conv_b, p.conv_b_bias, l);
  const torch::Tensor cm = conv_silu(linear_map(xn, p.w_c), p.conv_c, p.conv_c_bias, l);
  const torch::Tensor dt = torch::softplus(linear_map(xn, p.w_decay, p.decay_bias)).transpose(1, 2);  // [B, h, T]
  const torch::Tensor a = dt * -p.a_log.exp().view({1, h, 1});
  auto heads = [&](const torch::Tensor& v, int64_t n, int64_t width) {  // [B, T, n width] -> [B, h, T, width]
    torch::Tensor t = v.view({Bt, T, n, width}).transpose(1, 2);
    return n == h ? t : t.repeat_interleave(h / n, 1);
  };
  const torch::Tensor xh = heads(x, h, P), bh = heads(b, G, N), ch = heads(cm, G, N);
  torch::Tensor S = torch::zeros({Bt, h, P, N}, xn.options());
  std::vector<torch::Tensor> ys;
  for (int64_t t0 = 0; t0 < T; t0 += kChunk) {
    const int64_t L = std::min(kChunk, T - t0);
    ys.push_back(chunk_ssd(xh.narrow(2, t0, L), bh.narrow(2, t0, L), ch.narrow(2, t0, L), dt.narrow(2, t0, L),
                           a.narrow(2, t0, L), l.start.narrow(1, t0, L), t0, S));
  }
  torch::Tensor y = torch::cat(ys, 2) + p.d_skip.view({1, h, 1, 1}) * xh;  // [B, h, T, P]
  y = y.transpose(1, 2).reshape({Bt, T, G, h * P / G}) * torch::silu(z).view({Bt, T, G, h * P / G});
  y = (y * torch::rsqrt(y.pow(2).mean(-1, true) + c.norm.eps)).reshape({Bt, T, h * P});
  return linear_map(y * (c.norm.unit_offset ? p.o_norm + 1.0 : p.o_norm), p.wo);
}

}  // namespace wren::train
