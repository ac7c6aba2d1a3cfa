// Gated DeltaNet (gdn) and Gated DeltaNet-2 (gdn2) over whole sequences, mirroring
// model/gated_deltanet.cpp. Per token (seed 002 A13, equations 1-8; plain gdn as arXiv 2412.06464):
//   (1) q, k, v = SiLU(Conv1d(W x)) over the current and K-1 previous tokens; q, k <- q/|q|, k/|k|
//   (2) g = -e^{A_h} softplus(W_f x + b_f)        gdn2: per key channel; gdn: one per head
//   (3) b = sigmoid(W_b x)                          gdn2: per key channel; gdn: beta per head
//   (4) w = sigmoid(W_w x)                          gdn2: per value channel; gdn: beta again
//   (5) S' = Diag(e^g) S
//   (6) S  = S' + k (w * v - S'^T (b * k))^T
//   (7) o  = S^T q / sqrt(d_k)
//   (8) y  = W_o [RMSNorm(o) * sigma(W_g x)]       sigma = sigmoid (gdn2) or SiLU (gdn)
// Value head h reads query/key head h / (h_v / h_q). |x| is sqrt(sum x^2 + 1e-6), as FLA's l2norm.
//
// Documents (NOTES.md 4): at a document's first token the state is zero (S_{t-1} := 0) and the
// conv taps that would reach before it read zeros, exactly as a fresh engine session.
//
// Plain gdn keeps its per-head g, b, w as a trailing dimension of 1, which broadcasts over the
// channels: the same code then computes both kinds.
#include "train/gated_deltanet.h"

#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>
#include <vector>

#include "config/weight_slots.h"

namespace wren::train {

namespace {

constexpr double kL2Eps = 1e-6;  // the engine's kL2Eps
constexpr double kNegInf = -std::numeric_limits<double>::infinity();

// What the recurrence reads, per value head: q, k [B, h_v, T, d_k], v [B, h_v, T, d_v],
// g, b [B, h_v, T, d_k] (gdn: [.., 1]), w [B, h_v, T, d_v] (gdn: [.., 1]); the output gate
// sigma(W_g x) [B, T, h_v, d_v].
struct Inputs {
  torch::Tensor q, k, v, g, b, w, gate;
};

void require(bool ok, const std::string& what) {
  if (!ok) throw std::invalid_argument("train::gated_deltanet: " + what);
}

std::string shape_str(torch::IntArrayRef shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

// The tensor `name` must be present with shape `want`.
void require_shape(const torch::Tensor& t, const char* name, std::vector<int64_t> want) {
  require(t.defined(), std::string("attn.") + name + " is missing");
  require(t.sizes() == torch::IntArrayRef(want), std::string("attn.") + name + " has shape " + shape_str(t.sizes()) +
                                                    ", expected " + shape_str(want));
}

// The projection `name` (out x in), full or as its rank-r factors X_a [r, in], X_b [out, r].
void require_projection(const torch::Tensor& full, const torch::Tensor& a, const torch::Tensor& b,
                        const std::string& name, int64_t out, int64_t in, int rank) {
  if (rank > 0) {
    require_shape(a, (name + "_a").c_str(), {rank, in});
    require_shape(b, (name + "_b").c_str(), {out, rank});
  } else {
    require_shape(full, name.c_str(), {out, in});
  }
}

void check(const GdnParams& p, const MixerSpec& m, const ModelConfig& c, const Layout& l, const torch::Tensor& xn) {
  require(m.kind == MixerKind::gdn || m.kind == MixerKind::gdn2,
          std::string("mixer kind ") + to_string(m.kind) + " is not gdn / gdn2");
  const int64_t hq = m.n_heads, hv = m.value_heads(), dk = m.head_dim, dv = m.value_dim(), K = m.conv_kernel;
  const int64_t d = c.d_model;
  require(hq > 0 && dk > 0 && dv > 0 && K > 0 && hv % hq == 0,
          "n_heads " + std::to_string(hq) + ", n_v_heads " + std::to_string(hv) +
              ": expected positive widths and n_v_heads a multiple of n_heads");
  require(xn.dim() == 3 && xn.size(2) == d, "xn has shape " + shape_str(xn.sizes()) + ", expected [B, T, " +
                                                std::to_string(d) + "]");
  require(l.pos.defined() && l.pos.dim() == 2 && l.pos.size(0) == xn.size(0) && l.pos.size(1) == xn.size(1) &&
              l.start.defined() && l.start.sizes() == l.pos.sizes(),
          "the layout does not match xn " + shape_str(xn.sizes()));
  require_shape(p.wq, "wq", {hq * dk, d});
  require_shape(p.wk, "wk", {hq * dk, d});
  require_shape(p.wv, "wv", {hv * dv, d});
  require_shape(p.conv_q, "conv_q", {hq * dk, K});
  require_shape(p.conv_k, "conv_k", {hq * dk, K});
  require_shape(p.conv_v, "conv_v", {hv * dv, K});
  require_shape(p.a_log, "a_log", {hv});
  if (m.kind == MixerKind::gdn2) {
    require_projection(p.w_decay, p.w_decay_a, p.w_decay_b, "w_decay", hv * dk, d, m.gate_rank);
    require_shape(p.decay_bias, "decay_bias", {hv * dk});
    require_projection(p.w_erase, p.w_erase_a, p.w_erase_b, "w_erase", hv * dk, d, m.gate_rank);
    require_projection(p.w_write, p.w_write_a, p.w_write_b, "w_write", hv * dv, d, m.gate_rank);
  } else {
    require_shape(p.w_decay, "w_decay", {hv, d});
    require_shape(p.decay_bias, "decay_bias", {hv});
    require_shape(p.w_beta, "w_beta", {hv, d});
  }
  require_projection(p.wg, p.wg_a, p.wg_b, "wg", hv * dv, d, m.out_gate_rank);
  require_shape(p.o_norm, "o_norm", {dv});
  require_shape(p.wo, "wo", {d, hv * dv});
}

// y = W x, or W_b (W_a x) when the projection is low-rank.
torch::Tensor project(const torch::Tensor& x, const torch::Tensor& full, const torch::Tensor& a,
                      const torch::Tensor& b) {
  return full.defined() ? linear_map(x, full) : linear_map(linear_map(x, a), b);
}

// [B, T, heads * dim] -> [B, heads, T, dim]
torch::Tensor split_heads(const torch::Tensor& x, int64_t heads) {
  return x.view({x.size(0), x.size(1), heads, -1}).transpose(1, 2);
}

// (1) SiLU of the causal depthwise conv inside each document (common.h).
torch::Tensor short_conv(const torch::Tensor& x, const torch::Tensor& taps, const Layout& l) {
  return torch::silu(causal_conv(x, taps, l));
}

// x / sqrt(sum x^2 + eps) over the last dimension.
torch::Tensor l2_normalise(const torch::Tensor& x) { return x * torch::rsqrt(x.pow(2).sum(-1, true) + kL2Eps); }

// Equations (1)-(4) and the output gate of (8) for the whole batch.
Inputs prepare(const GdnParams& p, const MixerSpec& m, const Layout& l, const torch::Tensor& xn) {
  const int64_t hq = m.n_heads, hv = m.value_heads(), group = hv / hq;
  Inputs in;
  // (1) q, k: per query/key head, then repeated so value head h reads head h / group.
  auto qk = [&](const torch::Tensor& w, const torch::Tensor& taps) {
    torch::Tensor h = l2_normalise(split_heads(short_conv(linear_map(xn, w), taps, l), hq));
    return group == 1 ? h : h.repeat_interleave(group, 1);
  };
  in.q = qk(p.wq, p.conv_q);
  in.k = qk(p.wk, p.conv_k);
  in.v = split_heads(short_conv(linear_map(xn, p.wv), p.conv_v, l), hv);
  const torch::Tensor decay_scale = -torch::exp(p.a_log).view({1, hv, 1, 1});  // -e^{A_h}
  if (m.kind == MixerKind::gdn2) {
    // (2) g = -e^{A_h} softplus(W_f x + b_f); (3) b = sigmoid(W_b x); (4) w = sigmoid(W_w x).
    torch::Tensor f = project(xn, p.w_decay, p.w_decay_a, p.w_decay_b) + p.decay_bias;
    in.g = decay_scale * torch::softplus(split_heads(f, hv));
    in.b = torch::sigmoid(split_heads(project(xn, p.w_erase, p.w_erase_a, p.w_erase_b), hv));
    in.w = torch::sigmoid(split_heads(project(xn, p.w_write, p.w_write_a, p.w_write_b), hv));
  } else {
    // g = -e^{A_h} softplus(w_a . x + dt_bias), b = w = beta = sigmoid(w_b . x): [B, h_v, T, 1].
    torch::Tensor a = torch::softplus(linear_map(xn, p.w_decay, p.decay_bias)).transpose(1, 2).unsqueeze(-1);
    in.g = decay_scale * a;
    in.b = in.w = torch::sigmoid(linear_map(xn, p.w_beta)).transpose(1, 2).unsqueeze(-1);
  }
  torch::Tensor gate = project(xn, p.wg, p.wg_a, p.wg_b);
  gate = m.kind == MixerKind::gdn2 ? torch::sigmoid(gate) : torch::silu(gate);
  in.gate = gate.view({xn.size(0), xn.size(1), hv, -1});
  return in;
}

// (8) y = W_o [RMSNorm(o) * gate], each head normalised with the shared gain. o: [B, h_v, T, d_v].
torch::Tensor finish(const GdnParams& p, const ModelConfig& c, const Inputs& in, const torch::Tensor& o) {
  torch::Tensor heads = rmsnorm(o.transpose(1, 2), p.o_norm, c) * in.gate;  // [B, T, h_v, d_v]
  return linear_map(heads.reshape({o.size(0), o.size(2), -1}), p.wo);
}

// One chunk of L tokens [t0, t0 + L) in the WY/UT form. With S0 the state after token t0 - 1
// and gamma_r = sum_{s <= r} g_s (within the chunk, per key channel), unrolling (5)-(6) with
// the document resets gives, for the corrections delta_r = w_r * v_r - S'_r^T (b_r * k_r),
//   S_r = Diag(e^{h_r}) S0 + sum_{s <= r} (e^{G_rs} * k_s) delta_s^T
// where G_rs = gamma_r - gamma_s if s and r share a document (else -inf: a reset lies between),
// and h_r = gamma_r if r's document began before the chunk (else -inf: S0 is another's). So
//   (I + A) Delta = w * V - (e^h * b * K) S0,   A_rs = sum_i b_ri k_ri k_si e^{G_rsi}  (s < r)
//   o_r = [S0^T (e^{h_r} * q_r) + sum_{s <= r} P_rs delta_s] / sqrt(d_k),  P_rs = sum_i q_ri k_si e^{G_rsi}
//   S  <- Diag(e^{h_last}) S0 + sum_s (e^{G_last,s} * k_s) delta_s^T
// (the UT transform T = (I + A)^-1 applied by a unit lower-triangular solve; REFERENCES.md's
// V' = U - W S0). Every finite exponent is gamma_r - gamma_s with r >= s or gamma_r: never
// positive, so nothing overflows however fast a channel decays.
// q, k, g, b: [B, h_v, L, d_k | 1]; v, w: [B, h_v, L, d_v | 1]; start [B, L]; S [B, h_v, d_k, d_v].
// Returns o [B, h_v, L, d_v] and advances S.
torch::Tensor chunk_wy(const Inputs& in, const torch::Tensor& start, int64_t t0, int64_t L, torch::Tensor& S) {
  torch::Tensor q = in.q.narrow(2, t0, L), k = in.k.narrow(2, t0, L), v = in.v.narrow(2, t0, L);
  torch::Tensor b = in.b.narrow(2, t0, L), w = in.w.narrow(2, t0, L);
  torch::Tensor gamma = in.g.narrow(2, t0, L).cumsum(2);
  const int64_t B = start.size(0);
  const bool per_channel = gamma.size(-1) > 1;
  const auto ids = torch::TensorOptions().dtype(torch::kInt64).device(start.device());
  const torch::Tensor r = torch::arange(L, ids);
  // same[b, 0, r, s]: s <= r and both in one document.
  torch::Tensor same = (start.unsqueeze(2) == start.unsqueeze(1)).logical_and(r.unsqueeze(1) >= r.unsqueeze(0));
  same = same.view({B, 1, L, L});
  torch::Tensor carry = (start < t0).view({B, 1, L, 1});
  torch::Tensor eh = torch::exp(gamma.masked_fill(carry.logical_not(), kNegInf));  // e^{h_r}
  // decayed(x)_rs = sum_i x_ri k_si e^{G_rsi}; kend_s = e^{G_last,s} * k_s.
  torch::Tensor Ek;  // gdn2: e^{G_rs} * k_s [B, h_v, L(r), L(s), d_k]
  torch::Tensor D;   // gdn:  e^{G_rs}        [B, h_v, L, L]
  torch::Tensor kend;
  if (per_channel) {
    torch::Tensor G = (gamma.unsqueeze(3) - gamma.unsqueeze(2)).masked_fill(same.unsqueeze(-1).logical_not(), kNegInf);
    Ek = torch::exp(G) * k.unsqueeze(2);
    kend = Ek.select(2, L - 1);
  } else {
    torch::Tensor c = gamma.squeeze(-1);
    D = torch::exp((c.unsqueeze(3) - c.unsqueeze(2)).masked_fill(same.logical_not(), kNegInf));
    kend = D.select(2, L - 1).unsqueeze(-1) * k;
  }
  auto decayed = [&](const torch::Tensor& x) {
    return per_channel ? torch::matmul(Ek, x.unsqueeze(-1)).squeeze(-1) : torch::matmul(x, k.transpose(-1, -2)) * D;
  };
  torch::Tensor bk = b * k;
  torch::Tensor A = decayed(bk).tril(-1);  // strictly lower: the unit diagonal is the solve's
  torch::Tensor P = decayed(q);
  torch::Tensor rhs = w * v - torch::matmul(eh * bk, S);
  torch::Tensor delta = torch::linalg_solve_triangular(A, rhs, /*upper=*/false, /*left=*/true, /*unitriangular=*/true);
  torch::Tensor o = (torch::matmul(eh * q, S) + torch::matmul(P, delta)) / std::sqrt(double(q.size(-1)));
  S = eh.select(2, L - 1).unsqueeze(-1) * S + torch::matmul(kend.transpose(-1, -2), delta);
  return o;
}

}  // namespace

void gdn_slots(std::map<std::string, torch::Tensor*>& slots, GdnParams& p) {
  slots::gdn(p, [&](const std::string& name, torch::Tensor& t) { slots[name] = &t; });
}

int64_t gdn_chunk_length(const MixerSpec& m) { return m.kind == MixerKind::gdn2 ? 16 : 64; }

torch::Tensor gated_deltanet_chunked(const GdnParams& p, const MixerSpec& m, const ModelConfig& c, const Layout& l,
                                     const torch::Tensor& xn, int64_t chunk) {
  check(p, m, c, l, xn);
  require(chunk >= 1, "chunk length " + std::to_string(chunk) + ", expected >= 1");
  const Inputs in = prepare(p, m, l, xn);
  const int64_t B = xn.size(0), T = xn.size(1);
  torch::Tensor S = torch::zeros({B, m.value_heads(), m.head_dim, m.value_dim()}, xn.options());
  std::vector<torch::Tensor> outs;
  for (int64_t t0 = 0; t0 < T; t0 += chunk) {
    const int64_t L = std::min(chunk, T - t0);
    outs.push_back(chunk_wy(in, l.start.narrow(1, t0, L), t0, L, S));
  }
  torch::Tensor o = T ? torch::cat(outs, 2) : torch::zeros({B, m.value_heads(), 0, m.value_dim()}, xn.options());
  return finish(p, c, in, o);
}

torch::Tensor gated_deltanet(const GdnParams& p, const MixerSpec& m, const ModelConfig& c, const Layout& l,
                             const torch::Tensor& xn) {
  return gated_deltanet_chunked(p, m, c, l, xn, gdn_chunk_length(m));
}

torch::Tensor gated_deltanet_recurrent(const GdnParams& p, const MixerSpec& m, const ModelConfig& c, const Layout& l,
                                       const torch::Tensor& xn) {
  check(p, m, c, l, xn);
  const Inputs in = prepare(p, m, l, xn);
  const int64_t B = xn.size(0), T = xn.size(1);
  const double scale = 1.0 / std::sqrt(double(m.head_dim));
  torch::Tensor S = torch::zeros({B, m.value_heads(), m.head_dim, m.value_dim()}, xn.options());
  std::vector<torch::Tensor> outs;
  for (int64_t t = 0; t < T; ++t) {
    // A document's first token starts from the zero state.
    S = S.masked_fill((l.pos.select(1, t) == 0).view({B, 1, 1, 1}), 0.0);
    torch::Tensor q = in.q.select(2, t), k = in.k.select(2, t), v = in.v.select(2, t);  // [B, h_v, d]
    torch::Tensor g = in.g.select(2, t), b = in.b.select(2, t), w = in.w.select(2, t);
    S = torch::exp(g).unsqueeze(-1) * S;                                                  // (5) S' = Diag(e^g) S
    torch::Tensor delta = w * v - torch::matmul((b * k).unsqueeze(-2), S).squeeze(-2);    // w * v - S'^T (b * k)
    S = S + k.unsqueeze(-1) * delta.unsqueeze(-2);                                        // (6) S = S' + k delta^T
    outs.push_back(torch::matmul(q.unsqueeze(-2), S).squeeze(-2) * scale);                // (7) o = S^T q / sqrt(d_k)
  }
  torch::Tensor o = T ? torch::stack(outs, 2) : torch::zeros({B, m.value_heads(), 0, m.value_dim()}, xn.options());
  return finish(p, c, in, o);
}

}  // namespace wren::train
