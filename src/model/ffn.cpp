#include "model/ffn.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>

#include "kernels/ops.h"

namespace wren {

void FfnScratch::reserve(const ModelConfig& c) {
  size_t hidden = 0, experts = 0, width = size_t(c.d_model), n_terms = 1;
  for (auto& [name, f] : c.ffns) {
    hidden = std::max({hidden, size_t(f.hidden), size_t(f.top_k) * size_t(f.expert_hidden) +
                                                     size_t(f.n_shared) * size_t(f.shared_hidden)});
    experts = std::max(experts, size_t(f.n_experts));
    width = std::max(width, size_t(f.latent_dim));
    n_terms = std::max(n_terms, size_t(f.top_k) + 1);
  }
  gate.resize(hidden), up.resize(hidden), coeffs.resize(hidden), neurons.resize(hidden);
  logits.resize(experts), select.resize(experts), chosen.resize(experts), weights.resize(experts);
  expert_ids.resize(experts), gate_values.resize(experts);
  latent_in.resize(width), latent_out.resize(width);
  terms.reserve(n_terms);
  products.reserve(2 * n_terms + 4);
}

namespace {

float gelu_tanh(float x) { return 0.5f * x * (1.0f + std::tanh(0.7978845608f * (x + 0.044715f * x * x * x))); }

void add_bias(const float* b, int64_t n, float* y) {
  if (b)
    for (int64_t i = 0; i < n; ++i) y[i] += b[i];
}

const float* data_or_null(const Vec& v) { return v.empty() ? nullptr : v.data(); }
const float* data_or_null(const Vec& v, int64_t offset) { return v.empty() ? nullptr : v.data() + offset; }

// Each term's hidden buffers, one after another in the scratch.
void assign_buffers(FfnScratch& s) {
  size_t at = 0;
  for (FfnTerm& t : s.terms) {
    if (at + size_t(t.up.rows) > s.up.size())
      throw std::logic_error("ffn_add: the terms' hidden widths exceed the scratch (FfnScratch::reserve)");
    t.h_up = s.up.data() + at, t.h_gate = s.gate.data() + at;
    t.coeffs = s.coeffs.data() + at, t.neurons = s.neurons.data() + at;
    at += size_t(t.up.rows);
  }
}

// The gate / up products of `terms`, appended to s.products.
void add_up_products(const FfnSpec& spec, std::span<FfnTerm> terms, FfnScratch& s) {
  for (FfnTerm& t : terms) {
    s.products.push_back({t.up, t.x, t.h_up});
    if (spec.activation != Activation::relu2) s.products.push_back({t.gate, t.x, t.h_gate});
  }
}

// The hidden activation of a term: ReLU^2's fired neurons and their coefficients
// (dead_neuron_skip: y += sum over fired r of (scale relu(u_r)^2) W_down[r, :]), or
// silu(g) * u / gelu(g) * u.
void activate(const FfnSpec& spec, FfnTerm& t, bool neuron_skip) {
  const int64_t hidden = t.up.rows;
  float* u = t.h_up;
  add_bias(t.b_up, hidden, u);
  if (spec.activation == Activation::relu2) {
    t.fired = 0;
    for (int64_t r = 0; r < hidden; ++r)
      if (u[r] > 0.0f || !neuron_skip) {
        t.neurons[t.fired] = int32_t(r);
        t.coeffs[t.fired++] = u[r] > 0.0f ? t.scale * u[r] * u[r] : 0.0f;
      }
    return;
  }
  float* g = t.h_gate;
  add_bias(t.b_gate, hidden, g);
  if (spec.activation == Activation::geglu)
    for (int64_t r = 0; r < hidden; ++r) g[r] = gelu_tanh(g[r]) * u[r];
  else {
    kernels::silu(g, hidden, g);
    for (int64_t r = 0; r < hidden; ++r) g[r] *= u[r];
  }
  t.fired = hidden;
}

// The distinct outputs of the terms (a MoE layer with a latent space has two: the latent
// sum of the routed experts and y), in order of first use.
constexpr int kMaxTargets = 4;
struct Targets {
  float* y[kMaxTargets];
  int n = 0;
};
Targets targets_of(std::span<const FfnTerm> terms) {
  Targets t;
  for (const FfnTerm& term : terms) {
    if (std::find(t.y, t.y + t.n, term.y) != t.y + t.n) continue;
    if (t.n == kMaxTargets) throw std::logic_error("ffn_add: more than 4 distinct outputs");
    t.y[t.n++] = term.y;
  }
  return t;
}

// Rows per item of a gated down region's output: about kItemBytes over all its terms, but a
// run of at least kItemBytes / 2 from each term's matrix, since an item reads its rows from
// every term (a MoE layer's chosen experts): OLMoE-1B-7B's 8 experts in items of 16 rows read
// 8 runs of 9 KB each, which streamed at 28-31 tokens/s against 32-39 with runs of ~65-130 KB
// (q4, 2 threads, Zen 5, alternating). The run rule stops at rows / kMinItems, so it never
// leaves an output fewer items than that (the kItemBytes rule alone decides for small outputs).
int64_t down_item_rows(int64_t rows, int64_t bytes_per_row, int64_t largest_term_row) {
  constexpr int64_t kMinItems = 8;
  auto aligned = [](int64_t r) { return std::max(kItemRowAlign, r / kItemRowAlign * kItemRowAlign); };
  const int64_t by_bytes = kItemBytes / std::max<int64_t>(1, bytes_per_row);
  const int64_t by_run = std::min(kItemBytes / 2 / std::max<int64_t>(1, largest_term_row), rows / kMinItems);
  return aligned(std::max(by_bytes, by_run));
}

// Gated down projections: items are row chunks of each output, every term writing that
// output added in list order inside the item (no two threads write one row).
void gated_down(std::span<const FfnTerm> terms, kernels::ThreadPool* pool) {
  const Targets out = targets_of(terms);
  int64_t first[kMaxTargets + 1] = {0}, step[kMaxTargets], rows[kMaxTargets];
  for (int g = 0; g < out.n; ++g) {
    int64_t bytes = 0, largest = 0;
    rows[g] = 0;
    for (const FfnTerm& t : terms)
      if (t.y == out.y[g]) {
        const int64_t row = t.down.bytes() / std::max<int64_t>(1, t.down.rows);
        bytes += row, largest = std::max(largest, row), rows[g] = t.down.rows;
      }
    // In pieces of a quarter of an item, rounded up (run_products' kItemPieces): a thread's
    // run of up to kItemPieces pieces is one call per term, over at least an item's rows.
    const int64_t piece = (down_item_rows(rows[g], bytes, largest) + kItemPieces - 1) / kItemPieces;
    step[g] = (piece + kItemRowAlign - 1) / kItemRowAlign * kItemRowAlign;
    first[g + 1] = first[g] + (rows[g] + step[g] - 1) / step[g];
  }
  // Each term's hidden activation quantised once here for the integer path (q8 / q4), not
  // once per item; the items read the caller's buffers through the pointer.
  thread_local std::vector<kernels::QuantizedActivation> activation;
  if (activation.size() < terms.size()) activation.resize(terms.size());
  for (size_t i = 0; i < terms.size(); ++i) {
    const MatrixView& d = terms[i].down;
    if (d.type == kernels::DType::q8 || d.type == kernels::DType::q4)
      kernels::quantize_activation(terms[i].h_gate, d.cols, d.group, activation[i], kernels::activation_rows(d.type));
  }
  const kernels::QuantizedActivation* xq = activation.data();
  kernels::run_ranges(pool, first[out.n], kItemPieces, [&](int64_t begin, int64_t end) {
    piece_rows(first, step, rows, out.n, begin, end, [&](int64_t g, int64_t r0, int64_t r1) {
      for (size_t i = 0; i < terms.size(); ++i)
        if (terms[i].y == out.y[g])
          kernels::matvec_add_range(terms[i].down, terms[i].h_gate, xq + i, terms[i].scale, terms[i].y, r0, r1);
    });
  });
}

// Neurons per ReLU^2 down item: about four items' bytes of rows, as each item also writes
// (and the reduction reads) a partial sum as wide as the output.
int64_t relu2_chunk(const MatrixView& down) {
  const int64_t row = std::max<int64_t>(1, down.bytes() / std::max<int64_t>(1, down.rows));
  return std::max<int64_t>(32, 4 * kItemBytes / row);
}

// ReLU^2 down projections, y += sum_r c_r W_down[r, :] over the fired rows: items are chunks
// of each term's fired rows summed into their own partial row, then the partials are added
// into each output in item order.
void relu2_down(std::span<const FfnTerm> terms, FfnScratch& s, kernels::ThreadPool* pool) {
  const int64_t n_terms = int64_t(terms.size());
  int64_t width = 0, items = 0;
  for (const FfnTerm& t : terms) {
    width = std::max(width, t.down.cols);
    items += (t.fired + relu2_chunk(t.down) - 1) / relu2_chunk(t.down);
  }
  if (s.partials.size() < size_t(items * width)) s.partials.resize(size_t(items * width));
  float* partials = s.partials.data();
  // first[t]: term t's first item; item -> (term, chunk) by search.
  thread_local std::vector<int64_t> first_buf;
  first_buf.assign(size_t(n_terms + 1), 0);
  int64_t* first = first_buf.data();
  for (int64_t i = 0; i < n_terms; ++i) {
    const FfnTerm& t = terms[size_t(i)];
    first[i + 1] = first[i] + (t.fired + relu2_chunk(t.down) - 1) / relu2_chunk(t.down);
  }
  kernels::run_items(pool, items, [&](int64_t item) {
    const int64_t i = std::upper_bound(first + 1, first + n_terms + 1, item) - (first + 1);
    const FfnTerm& t = terms[size_t(i)];
    const int64_t chunk = relu2_chunk(t.down), c0 = (item - first[i]) * chunk;
    float* p = partials + item * width;
    std::fill(p, p + t.down.cols, 0.0f);
    kernels::add_rows(t.down, t.neurons + c0, t.coeffs + c0, std::min(chunk, t.fired - c0), p, nullptr);
  });
  // y[c] += partial_0[c] + partial_1[c] + ... in item order, on the caller: a few dozen rows
  // of d floats, less than a region's hand-off would cost.
  for (int64_t i = 0; i < n_terms; ++i) {
    const FfnTerm& t = terms[size_t(i)];
    for (int64_t it = first[i]; it < first[i + 1]; ++it) kernels::axpy(1.0f, partials + it * width, t.down.cols, t.y);
  }
}

// The down projections of every term, then their biases.
void down_all(const FfnSpec& spec, std::span<const FfnTerm> terms, FfnScratch& s, kernels::ThreadPool* pool) {
  if (spec.activation == Activation::relu2)
    relu2_down(terms, s, pool);
  else
    gated_down(terms, pool);
  for (const FfnTerm& t : terms)
    if (t.b_down) {
      const int64_t out = spec.activation == Activation::relu2 ? t.down.cols : t.down.rows;
      for (int64_t i = 0; i < out; ++i) t.y[i] += t.scale * t.b_down[i];
    }
}

void record_neurons(NeuronProbe& probe, const FfnTerm& t) { probe.record(t.neurons, t.fired); }

}  // namespace

void ffn_add(const FfnSpec& spec, FfnScratch& s, kernels::ThreadPool* pool) {
  assign_buffers(s);
  s.products.clear();
  add_up_products(spec, s.terms, s);
  run_products(s.products, pool);
  for (FfnTerm& t : s.terms) activate(spec, t, s.neuron_skip);
  down_all(spec, s.terms, s, pool);
}

void dense_ffn(const FfnWeights& w, const FfnCall& call) {
  FfnScratch& s = call.scratch;
  s.terms.clear();
  s.terms.push_back({.gate = w.w_gate, .up = w.w_up, .down = w.w_down, .b_gate = data_or_null(w.b_gate),
                     .b_up = data_or_null(w.b_up), .b_down = data_or_null(w.b_down), .x = call.x, .y = call.y});
  ffn_add(call.spec, s, call.pool);
  if (call.probe && call.probe->relu2) record_neurons(call.probe->dense, s.terms[0]);
}

void route(const FfnSpec& spec, const MoeWeights& w, const float* logits, int32_t* experts, float* gates,
           FfnScratch& s) {
  const int E = spec.n_experts, k = spec.top_k;
  float* score = s.select.data();
  // Scores: sigmoid per expert, or softmax over all experts; softmax_topk gates work on logits.
  std::copy(logits, logits + E, s.weights.data());
  float* unbiased = s.weights.data();
  add_bias(data_or_null(w.router_bias), E, unbiased);
  if (spec.score == RouterScore::sigmoid) kernels::sigmoid(unbiased, E, unbiased);
  else if (spec.gates != GateNorm::softmax_topk) kernels::softmax(unbiased, E);
  for (int e = 0; e < E; ++e) score[e] = unbiased[e] + (w.balance_bias.empty() ? 0.0f : w.balance_bias[size_t(e)]);
  if (spec.n_groups > 1) {
    // Group-limited routing: keep the topk_groups groups with the highest best score.
    const int per = E / spec.n_groups;
    std::vector<float>& best = s.latent_out;  // scratch of >= n_groups floats
    for (int g = 0; g < spec.n_groups; ++g) best[size_t(g)] = *std::max_element(score + g * per, score + (g + 1) * per);
    kernels::top_k(best.data(), spec.n_groups, spec.topk_groups, s.chosen.data());
    for (int g = 0; g < spec.n_groups; ++g)
      if (std::find(s.chosen.data(), s.chosen.data() + spec.topk_groups, g) == s.chosen.data() + spec.topk_groups)
        std::fill(score + g * per, score + (g + 1) * per, -INFINITY);
  }
  kernels::top_k(score, E, k, experts);
  for (int i = 0; i < k; ++i) gates[i] = unbiased[experts[i]];
  if (spec.gates == GateNorm::softmax_topk) {
    kernels::softmax(gates, k);
  } else if (spec.gates == GateNorm::normalize) {
    float sum = 0;
    for (int i = 0; i < k; ++i) sum += gates[i];
    sum = std::max(sum, 1e-20f);  // sigmoid scores can underflow to 0 together
    for (int i = 0; i < k; ++i) gates[i] /= sum;
  }
  for (int i = 0; i < k; ++i) gates[i] *= float(spec.routed_scale);
}

// Four regions: (1) what needs only x: the router, the latent down-projection, the shared
// experts' gate / up and their scalar gate; (2) the chosen experts' gate / up; (3) every
// down projection; (4) with a latent space, its up-projection.
void moe_ffn(const MoeWeights& w, int d, const FfnCall& call, int32_t* experts_out) {
  const FfnSpec& spec = call.spec;
  FfnScratch& s = call.scratch;
  const int k = spec.top_k, h = spec.expert_hidden;
  const bool latent = spec.latent_dim > 0, relu2 = spec.activation == Activation::relu2;
  const int64_t in = latent ? spec.latent_dim : d;
  float* acc = latent ? s.latent_out.data() : call.y;
  s.terms.clear();
  float shared_logit = 0.0f;
  if (spec.n_shared) {
    const FfnWeights& sh = w.shared;
    s.terms.push_back({.gate = sh.w_gate, .up = sh.w_up, .down = sh.w_down, .b_gate = data_or_null(sh.b_gate),
                       .b_up = data_or_null(sh.b_up), .b_down = data_or_null(sh.b_down), .x = call.x, .y = call.y});
  }
  // Room for the routed terms after the shared one: no reallocation moves the pointers.
  for (int i = 0; i < k; ++i) s.terms.push_back({});
  std::span<FfnTerm> shared(s.terms.data(), spec.n_shared ? 1 : 0), routed(s.terms.data() + shared.size(), size_t(k));
  // Buffers: shared first, then the routed experts, each expert_hidden wide.
  for (FfnTerm& t : routed) t.up.rows = h;
  assign_buffers(s);

  s.products.clear();
  s.products.push_back({w.router, call.x, s.logits.data()});
  if (latent) s.products.push_back({w.latent_down, call.x, s.latent_in.data()});
  if (present(w.shared_gate)) s.products.push_back({w.shared_gate, call.x, &shared_logit});
  add_up_products(spec, shared, s);
  run_products(s.products, call.pool);
  for (FfnTerm& t : shared) {
    if (present(w.shared_gate)) t.scale = kernels::sigmoid(shared_logit);
    activate(spec, t, s.neuron_skip);
  }

  int32_t* experts = s.expert_ids.data();
  float* gates = s.gate_values.data();
  route(spec, w, s.logits.data(), experts, gates, s);
  if (experts_out) std::copy(experts, experts + k, experts_out);
  if (call.probe) call.probe->record_route(experts, k);
  if (latent) std::fill(s.latent_out.begin(), s.latent_out.begin() + in, 0.0f);  // after route: its scratch
  const FfnWeights& st = w.experts;
  for (int i = 0; i < k; ++i) {
    const int64_t e = experts[i];
    FfnTerm& t = routed[size_t(i)];
    t.up = st.w_up.slice_rows(e * h, h);
    t.gate = relu2 ? MatrixView{} : st.w_gate.slice_rows(e * h, h);
    t.down = relu2 ? st.w_down.slice_rows(e * h, h) : st.w_down.slice_rows(e * in, in);
    t.b_gate = data_or_null(st.b_gate, e * h), t.b_up = data_or_null(st.b_up, e * h);
    t.b_down = data_or_null(st.b_down, e * in);
    t.x = latent ? s.latent_in.data() : call.x;
    t.y = acc;
    t.scale = gates[i];
  }
  s.products.clear();
  add_up_products(spec, routed, s);
  run_products(s.products, call.pool);
  for (FfnTerm& t : routed) activate(spec, t, s.neuron_skip);

  // The routed experts first, so they add into y in the order they always did.
  std::rotate(s.terms.begin(), s.terms.begin() + ptrdiff_t(shared.size()), s.terms.end());
  down_all(spec, s.terms, s, call.pool);
  if (latent) {
    const Product up{w.latent_up, s.latent_out.data(), call.y, 1.0f, true};
    run_products(std::span(&up, 1), call.pool);
  }
  if (call.probe && relu2) {
    for (int i = 0; i < k; ++i) record_neurons(call.probe->experts[size_t(experts[i])], s.terms[size_t(i)]);
    if (spec.n_shared) record_neurons(call.probe->shared, s.terms.back());
  }
}

// ---- Batches ------------------------------------------------------------------------

namespace {

template <class T>
T* grown(std::vector<T>& v, size_t n) {  // at least n elements; grows, never shrinks
  if (v.size() < n) v.resize(n);
  return v.data();
}

// A term of row t whose hidden values already sit in the batch buffers.
FfnTerm row_term(const FfnWeights& w, int64_t e, int64_t h, int64_t in, bool relu2) {
  FfnTerm t;
  t.up = w.w_up.slice_rows(e * h, h);
  t.gate = relu2 ? MatrixView{} : w.w_gate.slice_rows(e * h, h);
  t.down = relu2 ? w.w_down.slice_rows(e * h, h) : w.w_down.slice_rows(e * in, in);
  t.b_gate = data_or_null(w.b_gate, e * h), t.b_up = data_or_null(w.b_up, e * h);
  t.b_down = data_or_null(w.b_down, e * in);
  return t;
}

// ReLU^2 rows: each row's terms (hidden values in place) activated and projected down by
// their fired rows, as the single-row path does. terms[i].h_up is set by the caller.
void relu2_rows_down(const FfnSpec& spec, std::span<FfnTerm> terms, FfnScratch& s, kernels::ThreadPool* pool) {
  size_t at = 0;
  for (FfnTerm& t : terms) {
    t.coeffs = s.coeffs.data() + at, t.neurons = s.neurons.data() + at;
    at += size_t(t.up.rows);
    activate(spec, t, s.neuron_skip);
  }
  down_all(spec, terms, s, pool);
}

}  // namespace

void dense_ffn_batch(const FfnWeights& w, int d, const FfnBatchCall& call) {
  const FfnSpec& spec = call.spec;
  FfnBatchScratch& b = call.batch;
  const int64_t n = call.n, H = w.w_up.rows;
  const bool relu2 = spec.activation == Activation::relu2;
  float* up = grown(b.up, size_t(n * H));
  float* gate = grown(b.gate, size_t(n * H));
  b.products.clear();
  b.products.push_back({w.w_up, call.x, d, up, H, n});
  if (!relu2) b.products.push_back({w.w_gate, call.x, d, gate, H, n});
  run_batch_products(b.products, call.pool);
  for (int64_t t = 0; t < n; ++t) {
    FfnTerm term = row_term(w, 0, H, d, relu2);
    term.x = call.x + t * d, term.y = call.y + t * d;
    term.h_up = up + t * H, term.h_gate = gate + t * H;
    if (relu2) {
      relu2_rows_down(spec, std::span(&term, 1), call.scratch, call.pool);
      if (call.probe && call.probe->relu2) record_neurons(call.probe->dense, term);
    } else {
      activate(spec, term, call.scratch.neuron_skip);
    }
  }
  if (relu2) return;
  b.products.clear();
  b.products.push_back({w.w_down, gate, H, call.y, d, n, 1.0f, true});
  run_batch_products(b.products, call.pool);
  if (!w.b_down.empty())
    for (int64_t t = 0; t < n; ++t) add_bias(w.b_down.data(), d, call.y + t * d);
}

namespace {

// One MoE layer's batch: its shapes, and the buffers of FfnBatchScratch it works in, sized
// once per call. Slots: row t's i-th choice is slot t k + i; the slots ordered by expert put
// expert e's at [offset[e], offset[e + 1]), and slot[t k + i] is that place.
struct MoeBatch {
  const MoeWeights& w;
  const FfnBatchCall& call;
  int64_t d, n, k, h, E;
  int64_t in;  // the experts' input width: latent_dim, or d
  int64_t Hs;  // the shared experts' hidden width (0: none)
  bool latent, relu2, shared_gate;
  float *logits = nullptr, *latent_in = nullptr, *latent_out = nullptr;  // [n][E], [n][in], [n][in]
  float* shared_logit = nullptr;                                          // [n]
  float *up = nullptr, *gate = nullptr;  // [n][Hs] shared, then [n k][h] routed (up_routed, gate_routed)
  float *up_routed = nullptr, *gate_routed = nullptr;
  int32_t *experts = nullptr, *slot = nullptr, *offset = nullptr;  // [n][k], [n][k], [E + 1]
  float* gates = nullptr;   // [n][k]
  float* inputs = nullptr;  // [n k][in]: each slot's input, in expert order
};

MoeBatch moe_batch(const MoeWeights& w, int d, const FfnBatchCall& call) {
  const FfnSpec& spec = call.spec;
  FfnBatchScratch& b = call.batch;
  const int64_t n = call.n, k = spec.top_k, h = spec.expert_hidden, E = spec.n_experts;
  const bool latent = spec.latent_dim > 0;
  const int64_t in = latent ? spec.latent_dim : d, Hs = spec.n_shared ? w.shared.w_up.rows : 0;
  MoeBatch m{.w = w, .call = call, .d = d, .n = n, .k = k, .h = h, .E = E, .in = in, .Hs = Hs,
             .latent = latent, .relu2 = spec.activation == Activation::relu2, .shared_gate = present(w.shared_gate)};
  m.logits = grown(b.logits, size_t(n * E));
  m.latent_in = grown(b.latent_in, size_t(n * in));
  m.latent_out = grown(b.latent_out, size_t(n * in));
  m.shared_logit = grown(b.shared_logit, size_t(n));
  m.up = grown(b.up, size_t(n * Hs + n * k * h));
  m.gate = grown(b.gate, size_t(n * Hs + n * k * h));
  m.up_routed = m.up + n * Hs, m.gate_routed = m.gate + n * Hs;
  m.experts = grown(b.experts, size_t(n * k));
  m.gates = grown(b.gates, size_t(n * k));
  m.slot = grown(b.slot, size_t(n * k));
  m.offset = grown(b.offset, size_t(E + 1));
  m.inputs = grown(b.inputs, size_t(n * k * in));
  return m;
}

// Region (1): the router, the latent down-projection, the shared gate and the shared
// experts' gate / up, over all rows (they need only x).
void moe_inputs_region(const MoeBatch& m) {
  const MoeWeights& w = m.w;
  const float* x = m.call.x;
  std::vector<BatchProduct>& products = m.call.batch.products;
  products.clear();
  products.push_back({w.router, x, m.d, m.logits, m.E, m.n});
  if (m.latent) products.push_back({w.latent_down, x, m.d, m.latent_in, m.in, m.n});
  if (m.shared_gate) products.push_back({w.shared_gate, x, m.d, m.shared_logit, 1, m.n});
  if (m.Hs) {
    products.push_back({w.shared.w_up, x, m.d, m.up, m.Hs, m.n});
    if (!m.relu2) products.push_back({w.shared.w_gate, x, m.d, m.gate, m.Hs, m.n});
  }
  run_batch_products(products, m.call.pool);
}

// Routing per row (the single-row route), then the slots ordered by expert and each slot's
// input copied to its place.
void route_rows(const MoeBatch& m, int32_t* experts_out) {
  const int64_t n = m.n, k = m.k, E = m.E, in = m.in;
  std::fill(m.offset, m.offset + E + 1, 0);
  for (int64_t t = 0; t < n; ++t) {
    route(m.call.spec, m.w, m.logits + t * E, m.experts + t * k, m.gates + t * k, m.call.scratch);
    if (m.call.probe) m.call.probe->record_route(m.experts + t * k, int(k));
    for (int64_t i = 0; i < k; ++i) ++m.offset[m.experts[t * k + i] + 1];
  }
  if (experts_out) std::copy(m.experts, m.experts + n * k, experts_out);
  for (int64_t e = 0; e < E; ++e) m.offset[e + 1] += m.offset[e];
  thread_local std::vector<int32_t> fill_buf;
  int32_t* fill = grown(fill_buf, size_t(E));
  std::copy(m.offset, m.offset + E, fill);
  for (int64_t t = 0; t < n; ++t)
    for (int64_t i = 0; i < k; ++i) {
      const int32_t p = fill[m.experts[t * k + i]]++;
      m.slot[t * k + i] = p;
      const float* src = m.latent ? m.latent_in + t * in : m.call.x + t * m.d;
      std::copy(src, src + in, m.inputs + int64_t(p) * in);
    }
}

// Region (2): each chosen expert's gate / up over the slots that chose it.
void experts_up_region(const MoeBatch& m) {
  const FfnWeights& st = m.w.experts;
  std::vector<BatchProduct>& products = m.call.batch.products;
  products.clear();
  for (int64_t e = 0; e < m.E; ++e) {
    const int64_t first = m.offset[e], count = m.offset[e + 1] - first;
    if (!count) continue;
    const float* x = m.inputs + first * m.in;
    products.push_back({st.w_up.slice_rows(e * m.h, m.h), x, m.in, m.up_routed + first * m.h, m.h, count});
    if (!m.relu2)
      products.push_back({st.w_gate.slice_rows(e * m.h, m.h), x, m.in, m.gate_routed + first * m.h, m.h, count});
  }
  run_batch_products(products, m.call.pool);
}

// ReLU^2: per row, its terms' fired rows only, as the single-row path (into latent_out at
// latent width, else y).
void relu2_rows(const MoeBatch& m) {
  FfnScratch& s = m.call.scratch;
  FfnProbe* probe = m.call.probe;
  const int64_t k = m.k;
  for (int64_t t = 0; t < m.n; ++t) {
    s.terms.clear();
    for (int64_t i = 0; i < k; ++i) {
      FfnTerm term = row_term(m.w.experts, m.experts[t * k + i], m.h, m.in, true);
      term.h_up = m.up_routed + m.slot[t * k + i] * m.h, term.scale = m.gates[t * k + i];
      term.y = m.latent ? m.latent_out + t * m.in : m.call.y + t * m.d;
      s.terms.push_back(term);
    }
    if (m.Hs) {
      FfnTerm term = row_term(m.w.shared, 0, m.Hs, m.d, true);
      term.h_up = m.up + t * m.Hs, term.y = m.call.y + t * m.d;
      if (m.shared_gate) term.scale = kernels::sigmoid(m.shared_logit[t]);
      s.terms.push_back(term);
    }
    relu2_rows_down(m.call.spec, s.terms, s, m.call.pool);
    if (probe) {
      for (int64_t i = 0; i < k; ++i) record_neurons(probe->experts[size_t(m.experts[t * k + i])], s.terms[size_t(i)]);
      if (m.Hs) record_neurons(probe->shared, s.terms.back());
    }
  }
}

// SwiGLU / GeGLU: every slot's and every row's shared hidden values activated in place.
void activate_rows(const MoeBatch& m) {
  FfnScratch& s = m.call.scratch;
  for (int64_t t = 0; t < m.n; ++t) {
    for (int64_t i = 0; i < m.k; ++i) {
      const int64_t p = m.slot[t * m.k + i];
      FfnTerm term = row_term(m.w.experts, m.experts[t * m.k + i], m.h, m.in, false);
      term.h_up = m.up_routed + p * m.h, term.h_gate = m.gate_routed + p * m.h;
      activate(m.call.spec, term, s.neuron_skip);
    }
    if (m.Hs) {
      FfnTerm term = row_term(m.w.shared, 0, m.Hs, m.d, false);
      term.h_up = m.up + t * m.Hs, term.h_gate = m.gate + t * m.Hs;
      activate(m.call.spec, term, s.neuron_skip);
    }
  }
}

// Region (3), gated: each slot's expert output into `down` ([n k][in]), added to its row with
// the gate in choice order (and the expert's bias); then the shared experts into y with their
// scale.
void gated_down_rows(const MoeBatch& m) {
  FfnBatchScratch& b = m.call.batch;
  const FfnWeights& st = m.w.experts;
  const int64_t n = m.n, k = m.k, in = m.in, d = m.d;
  float* down = grown(b.down, size_t(n * k * in));
  b.products.clear();
  for (int64_t e = 0; e < m.E; ++e) {
    const int64_t first = m.offset[e], count = m.offset[e + 1] - first;
    if (count)
      b.products.push_back({st.w_down.slice_rows(e * in, in), m.gate_routed + first * m.h, m.h, down + first * in, in, count});
  }
  run_batch_products(b.products, m.call.pool);
  for (int64_t t = 0; t < n; ++t) {
    float* acc = m.latent ? m.latent_out + t * in : m.call.y + t * d;
    for (int64_t i = 0; i < k; ++i) kernels::axpy(m.gates[t * k + i], down + int64_t(m.slot[t * k + i]) * in, in, acc);
    if (!st.b_down.empty())
      for (int64_t i = 0; i < k; ++i) {
        const float* bias = st.b_down.data() + m.experts[t * k + i] * in;
        for (int64_t c = 0; c < in; ++c) acc[c] += m.gates[t * k + i] * bias[c];
      }
  }
  if (!m.Hs) return;
  b.products.clear();
  float* shared_down = grown(b.down, size_t(n * k * in + n * d)) + n * k * in;  // `down` is done with
  b.products.push_back({m.w.shared.w_down, m.gate, m.Hs, shared_down, d, n});
  run_batch_products(b.products, m.call.pool);
  const Vec& bias = m.w.shared.b_down;
  for (int64_t t = 0; t < n; ++t) {
    const float scale = m.shared_gate ? kernels::sigmoid(m.shared_logit[t]) : 1.0f;
    kernels::axpy(scale, shared_down + t * d, d, m.call.y + t * d);
    if (!bias.empty())
      for (int64_t c = 0; c < d; ++c) m.call.y[t * d + c] += scale * bias[size_t(c)];
  }
}

}  // namespace

// Four batched regions as moe_ffn's four: (1) router, latent down, shared gate and the
// shared experts' gate / up over all rows; (2) each chosen expert's gate / up over the rows
// that chose it (their inputs gathered by expert); (3) the down projections; (4) the latent
// up-projection.
void moe_ffn_batch(const MoeWeights& w, int d, const FfnBatchCall& call, int32_t* experts_out) {
  const MoeBatch m = moe_batch(w, d, call);
  moe_inputs_region(m);
  route_rows(m, experts_out);
  experts_up_region(m);
  if (m.latent) std::fill(m.latent_out, m.latent_out + m.n * m.in, 0.0f);
  if (m.relu2) {
    relu2_rows(m);
  } else {
    activate_rows(m);
    gated_down_rows(m);
  }
  if (m.latent) {
    call.batch.products.clear();
    call.batch.products.push_back({w.latent_up, m.latent_out, m.in, call.y, d, m.n, 1.0f, true});
    run_batch_products(call.batch.products, call.pool);
  }
}

}  // namespace wren
