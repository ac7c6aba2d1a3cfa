// Loading: walk the weight map and put each tensor in its slot by name (config/weight_slots.h).
// The weight map is the one list of what exists, so a slot without a tensor stays empty (absent).
#include "model/model.h"

#include <stdexcept>

#include "config/layer_plan.h"
#include "config/weight_slots.h"
#include "model/rope.h"

namespace wren {

namespace {

// The engine's slots by name: kernel views for matrices, tables and expert stacks; f32
// vectors for the small tensors.
struct Slots {
  std::map<std::string, MatrixView*> matrices;
  std::map<std::string, Vec*> vectors;
  void operator()(const std::string& name, MatrixView& m) { matrices[name] = &m; }
  void operator()(const std::string& name, Vec& v) { vectors[name] = &v; }
};

// Every tensor of the model's weight map into its slot (`top` or its layer's): matrices as
// the source's views, vectors as f32.
void fill_slots(const Model& m, const WeightSource& source, Slots& top, std::vector<Slots>& per_layer) {
  for (const TensorInfo& t : m.map.tensors) {
    auto [layer, local] = slots::split_name(t.name);
    Slots& s = layer < 0 ? top : per_layer[size_t(layer)];
    if (auto it = s.matrices.find(local); it != s.matrices.end()) {
      *it->second = source.matrix(t);
    } else if (auto jt = s.vectors.find(local); jt != s.vectors.end()) {
      *jt->second = source.floats(t);
    } else {
      throw std::runtime_error("model " + m.config.name + ": tensor " + t.name + " has no place in the engine");
    }
  }
}

// Decode-order copies of every matrix a matvec reads; the embedding and engram tables are
// read by row (lookups), so they keep the stored layout only. Matvec and GEMM read only the
// copy, so the stored values are released as soon as each is packed: resident memory
// holds each matrix once (a tied head's rows come back one by one as the embedding reads them).
void place_matrices(Model& m, const WeightSource& source, const Slots& top, const std::vector<Slots>& per_layer) {
  const ModelConfig& c = m.config;
  const auto looked_up = [](const std::string& name) { return name == "embed" || name.ends_with("engram.tables"); };
  auto packed = std::make_shared<PackedWeights>();
  const auto keep_rows = [&](MatrixView& w) {
    const MatrixView stored = w;
    packed->keep_rows(w);
    if (w.data != stored.data) source.release(stored);
  };
  // A matrix no integer path packs (nenya's f32 routers, bf16 rows too short for a group) is
  // still read whole every token: its rows are copied into huge pages too. From the file's
  // 4 KiB pages nenya's routers read at about half the rate of the packed rows beside them
  // (a TLB miss every 4 KiB, a nested page walk under a hypervisor); copied, nenya gained
  // 2-4% (docs/engine.md, "Unpacked matrices into huge pages").
  const auto place = [&](MatrixView& w) {
    packed->pack(w);
    if (w.packed) source.release(w);
    else keep_rows(w);
  };
  // mHC's f32 / bf16 phi is read only through its transposed copy (mhc.cpp project): the copy
  // goes into the arena and phi keeps its shape alone (no values to place or to hold).
  const auto transpose = [&](MhcWeights& b) {
    if (!present(b.phi) || (b.phi.type != kernels::DType::f32 && b.phi.type != kernels::DType::bf16)) return;
    b.phi_t = packed->transposed(b.phi);
    source.release(b.phi);
    b.phi.data = nullptr;
  };
  for (LayerWeights& l : m.layers) transpose(l.attn_mhc), transpose(l.ffn_mhc);
  transpose(m.final_mhc);
  // A ReLU^2 FFN's down projection is read only by its fired rows (kernels::add_rows, in
  // decode and prefill): it keeps its stored layout, copied into huge pages, where scattered
  // rows of 2 KB do not each cost a TLB miss as the file's 4 KiB pages do.
  const auto by_rows = [&](int layer, const std::string& name) {
    return c.ffn(layer).activation == Activation::relu2 && name.ends_with("w_down");
  };
  for (auto& [name, w] : top.matrices)  // "lm_head" is the embedding's view when tied
    if (!looked_up(name)) place(*w);
  for (int i = 0; i < c.n_layers(); ++i)
    for (auto& [name, w] : per_layer[size_t(i)].matrices)
      if (by_rows(i, name)) keep_rows(*w);
      else if (!looked_up(name)) place(*w);
  m.packed = std::move(packed);
}

}  // namespace

std::shared_ptr<const Model> load_model(const ModelConfig& c, std::shared_ptr<const WeightSource> source) {
  check_supported(c, "engine");
  auto model = std::make_shared<Model>();
  Model& m = *model;
  m.config = c;
  m.map = build_weight_map(c);
  m.prefill_exit = c.prefill_exit_layer();
  m.storage = source;
  m.layers.resize(size_t(c.n_layers()));
  m.bridges_at = bridges_at(c);

  Slots top;
  slots::top(m, top);
  std::vector<Slots> per_layer(size_t(c.n_layers()));
  for (int i = 0; i < c.n_layers(); ++i) slots::layer(c.mixer(i).kind, m.layers[size_t(i)], per_layer[size_t(i)]);
  fill_slots(m, *source, top, per_layer);
  if (c.tie_embeddings) m.lm_head = m.embed;
  m.lm_head_prescore = make_lm_head_prescore(m.lm_head);  // reads the head's stored rows once
  place_matrices(m, *source, top, per_layer);
  m.engram = residual_engram_hasher(c);
  for (int i = 0; i < c.n_layers(); ++i) {
    LayerWeights& l = m.layers[size_t(i)];
    if (c.mixer(i).kind == MixerKind::mla) l.mla.rope = layer_rope(c.mixer(i));
    else l.attn.rope = layer_rope(c.mixer(i));
    l.engram_hasher = layer_engram_hasher(c, i);
  }
  return model;
}

}  // namespace wren
