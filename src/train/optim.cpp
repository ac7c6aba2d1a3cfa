// train/: Muon and AdamW, their parameter groups and their state files (equations in optim.h).
#include "train/optim.h"

#include <algorithm>
#include <cmath>
#include <filesystem>

namespace wren::train {

// ---- Groups ------------------------------------------------------------------------------

std::string group_name(const TensorInfo& t) {
  switch (t.role) {
    case TensorRole::buffer: return "";
    case TensorRole::conv: return "adamw_decay";
    case TensorRole::norm:
    case TensorRole::vector: return "adamw_no_decay";
    case TensorRole::lookup: return t.component == Component::engram_tables ? "adamw_engram" : "adamw_no_decay";
    case TensorRole::matrix: break;
  }
  if (t.component == Component::lm_head) return "adamw_head";
  // The seed trains the router with AdamW (no decay); a [1, n] or [n, 1] "matrix" is a vector.
  if (t.component == Component::router) return "adamw_no_decay";
  const size_t n = t.shape.size();
  if (n < 2 || t.shape[n - 1] == 1 || t.shape[n - 2] == 1) return "adamw_no_decay";
  return n == 2 ? "muon" : "muon_batched";
}

std::vector<ParamGroup> make_groups(const std::vector<NamedTensor>& params, const OptimSettings& s) {
  std::vector<ParamGroup> groups = {
      {"muon", OptimizerKind::muon, s.muon, {}, {}},
      {"muon_batched", OptimizerKind::muon, s.muon_batched, {}, {}},
      {"adamw_decay", OptimizerKind::adamw, s.adamw_decay, {}, {}},
      {"adamw_no_decay", OptimizerKind::adamw, s.adamw_no_decay, {}, {}},
      {"adamw_head", OptimizerKind::adamw, s.adamw_head, {}, {}},
      {"adamw_engram", OptimizerKind::adamw, s.adamw_engram, {}, {}},
  };
  for (const NamedTensor& p : params) {
    if (!p.tensor.defined() || p.tensor.sizes().vec() != p.info.shape)
      throw std::runtime_error("make_groups: tensor '" + p.info.name + "' does not have its weight-map shape");
    const std::string g = group_name(p.info);
    if (g.empty()) continue;
    for (ParamGroup& group : groups)
      if (group.name == g) {
        group.names.push_back(p.info.name);
        group.params.push_back(p.tensor);
      }
  }
  std::erase_if(groups, [](const ParamGroup& g) { return g.params.empty(); });
  return groups;
}

// ---- Newton-Schulz -------------------------------------------------------------------------

torch::Tensor newton_schulz(const torch::Tensor& g, int steps) {
  TORCH_CHECK(g.dim() >= 2, "newton_schulz: needs a matrix or a stack of matrices");
  constexpr double a = 3.4445, b = -4.7750, c = 2.0315;
  torch::Tensor x = g.to(torch::kFloat32);
  const bool tall = g.size(-2) > g.size(-1);
  if (tall) x = x.transpose(-2, -1);
  // Frobenius norm of each slice, so every expert of a stack is scaled on its own.
  x = x / (torch::linalg_vector_norm(x, 2, std::vector<int64_t>{-2, -1}, true) + 1e-7);
  for (int i = 0; i < steps; ++i) {
    torch::Tensor A = torch::matmul(x, x.transpose(-2, -1));
    torch::Tensor B = b * A + c * torch::matmul(A, A);
    x = a * x + torch::matmul(B, x);
  }
  return tall ? x.transpose(-2, -1).contiguous() : x;
}

// ---- Shared machinery ----------------------------------------------------------------------

Optimizer::Optimizer(std::vector<ParamGroup> groups, OptimizerKind kind, const OptimSettings& s,
                     std::vector<std::string> state_keys)
    : settings_(s), kind_(kind), state_keys_(std::move(state_keys)) {
  for (ParamGroup& g : groups)
    if (g.kind == kind) groups_.push_back(std::move(g));
  torch::NoGradGuard no_grad;
  for (const ParamGroup& g : groups_) {
    auto& gs = state_.emplace_back();
    for (const torch::Tensor& p : g.params) {
      auto& ps = gs.emplace_back();
      for (const std::string& key : state_keys_)
        ps.push_back(key == "step" ? torch::zeros({}, torch::kInt64)
                                   : torch::zeros_like(p, torch::TensorOptions().dtype(torch::kFloat32)));
    }
  }
}

void Optimizer::step(double lr_multiplier) {
  torch::NoGradGuard no_grad;
  for (size_t gi = 0; gi < groups_.size(); ++gi) {
    ParamGroup& g = groups_[gi];
    for (size_t pi = 0; pi < g.params.size(); ++pi) {
      torch::Tensor& p = g.params[pi];
      if (!p.grad().defined()) continue;
      update(p, p.grad(), state_[gi][pi], g.settings, g.settings.lr * lr_multiplier);
    }
  }
}

void Optimizer::zero_grad() {
  for (ParamGroup& g : groups_)
    for (torch::Tensor& p : g.params)
      if (p.grad().defined()) p.mutable_grad() = torch::Tensor();
}

const torch::Tensor& Optimizer::state(const std::string& name, const std::string& key) const {
  for (size_t gi = 0; gi < groups_.size(); ++gi)
    for (size_t pi = 0; pi < groups_[gi].names.size(); ++pi)
      if (groups_[gi].names[pi] == name)
        for (size_t k = 0; k < state_keys_.size(); ++k)
          if (state_keys_[k] == key) return state_[gi][pi][k];
  throw std::out_of_range("optimizer: no state '" + key + "' for parameter '" + name + "'");
}

namespace {
const char* kind_name(OptimizerKind k) { return k == OptimizerKind::muon ? "muon" : "adamw"; }
// Archive keys are plain identifiers (weight-map names hold dots, which archives treat as paths);
// each parameter's name is stored beside its state and checked on load.
std::string key_of(size_t g, size_t p, const std::string& what) {
  return "g" + std::to_string(g) + "_p" + std::to_string(p) + "_" + what;
}
}  // namespace

void Optimizer::save(const std::string& path) const {
  torch::serialize::OutputArchive ar;
  ar.write("optimizer", c10::IValue(std::string(kind_name(kind_))));
  for (size_t gi = 0; gi < groups_.size(); ++gi) {
    ar.write("g" + std::to_string(gi) + "_name", c10::IValue(groups_[gi].name));
    for (size_t pi = 0; pi < groups_[gi].params.size(); ++pi) {
      ar.write(key_of(gi, pi, "name"), c10::IValue(groups_[gi].names[pi]));
      for (size_t k = 0; k < state_keys_.size(); ++k)
        ar.write(key_of(gi, pi, state_keys_[k]), state_[gi][pi][k], /*is_buffer=*/true);
    }
  }
  const std::string tmp = path + ".tmp";
  try {
    ar.save_to(tmp);
    std::filesystem::rename(tmp, path);
  } catch (const std::exception& e) {
    throw OptimStateError("optimizer state '" + path + "': cannot write: " + e.what());
  }
}

void Optimizer::load(const std::string& path) {
  auto fail = [&](const std::string& what) { throw OptimStateError("optimizer state '" + path + "': " + what); };
  torch::serialize::InputArchive ar;
  try {
    ar.load_from(path);
  } catch (const std::exception& e) {
    fail(std::string("cannot read: ") + e.what());
  }
  auto read_string = [&](const std::string& key) {
    c10::IValue v;
    if (!ar.try_read(key, v) || !v.isString()) fail("missing or non-string field '" + key + "'");
    return v.toStringRef();
  };
  if (read_string("optimizer") != kind_name(kind_))
    fail(std::string("is not a ") + kind_name(kind_) + " state (field 'optimizer')");
  // Read everything first, so that a bad file leaves the current state untouched.
  std::vector<std::vector<std::vector<torch::Tensor>>> loaded = state_;
  for (size_t gi = 0; gi < groups_.size(); ++gi) {
    const std::string gkey = "g" + std::to_string(gi) + "_name";
    if (read_string(gkey) != groups_[gi].name) fail("field '" + gkey + "' is not group '" + groups_[gi].name + "'");
    for (size_t pi = 0; pi < groups_[gi].params.size(); ++pi) {
      const std::string& name = groups_[gi].names[pi];
      if (read_string(key_of(gi, pi, "name")) != name)
        fail("field '" + key_of(gi, pi, "name") + "' is not parameter '" + name + "'");
      for (size_t k = 0; k < state_keys_.size(); ++k) {
        const std::string key = key_of(gi, pi, state_keys_[k]);
        torch::Tensor t;
        bool ok = false;
        try {
          ok = ar.try_read(key, t, /*is_buffer=*/true);
        } catch (const std::exception&) {
          ok = false;
        }
        const torch::Tensor& want = state_[gi][pi][k];
        if (!ok || !t.defined()) fail("missing tensor '" + key + "' (" + name + "." + state_keys_[k] + ")");
        if (t.sizes() != want.sizes() || t.scalar_type() != want.scalar_type())
          fail("tensor '" + key + "' (" + name + "." + state_keys_[k] + ") has shape " + c10::str(t.sizes()) +
               " " + c10::toString(t.scalar_type()) + ", expected " + c10::str(want.sizes()) + " " +
               c10::toString(want.scalar_type()));
        loaded[gi][pi][k] = t.clone();
      }
    }
  }
  state_ = std::move(loaded);
}

// ---- Muon ----------------------------------------------------------------------------------

Muon::Muon(const std::vector<ParamGroup>& groups, const OptimSettings& s)
    : Optimizer(groups, OptimizerKind::muon, s, {"momentum"}) {}

void Muon::update(torch::Tensor& p, const torch::Tensor& grad, std::vector<torch::Tensor>& state,
                  const GroupSettings& g, double lr) {
  const double mu = settings_.momentum;
  torch::Tensor& buf = state[0];
  torch::Tensor gf = grad.to(torch::kFloat32);
  buf.mul_(mu).add_(gf);
  torch::Tensor u = settings_.nesterov ? gf + mu * buf : buf;
  torch::Tensor x = newton_schulz(u, settings_.ns_steps);
  const double scale = 0.2 * std::sqrt(double(std::max(p.size(-2), p.size(-1))));
  p.mul_(1.0 - lr * g.weight_decay);
  p.add_(x.to(p.scalar_type()), -lr * scale);
}

// ---- AdamW ---------------------------------------------------------------------------------

AdamW::AdamW(const std::vector<ParamGroup>& groups, const OptimSettings& s)
    : Optimizer(groups, OptimizerKind::adamw, s, {"exp_avg", "exp_avg_sq", "step"}) {}

void AdamW::update(torch::Tensor& p, const torch::Tensor& grad, std::vector<torch::Tensor>& state,
                   const GroupSettings& g, double lr) {
  const double b1 = settings_.beta1, b2 = settings_.beta2;
  torch::Tensor &m = state[0], &v = state[1], &t = state[2];
  t.add_(1);
  const double step = double(t.item<int64_t>());
  torch::Tensor gf = grad.to(torch::kFloat32);
  p.mul_(1.0 - lr * g.weight_decay);
  m.mul_(b1).add_(gf, 1.0 - b1);
  v.mul_(b2).addcmul_(gf, gf, 1.0 - b2);
  const double bc1 = 1.0 - std::pow(b1, step), bc2 = 1.0 - std::pow(b2, step);
  torch::Tensor denom = (v / bc2).sqrt_().add_(settings_.eps);
  p.add_((m / denom).to(p.scalar_type()), -lr / bc1);
}

}  // namespace wren::train
