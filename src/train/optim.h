// train/: the optimisers (NOTES.md 4; seed 002's optimiser table; REFERENCES.md "Muon").
//
// Muon, for matrices W [rows, cols] and stacks [..., rows, cols] orthogonalised per slice
// (seed 002's "MuonBatched": routed experts [E, out, in], one Newton-Schulz per expert):
//   B <- mu B + G;  U = G + mu B (Nesterov, mu = 0.95)
//   X = U / (||U||_F + 1e-7), transposed when rows > cols; 5 times:
//     A = X X^T;  X <- a X + (b A + c A^2) X,   (a, b, c) = (3.4445, -4.7750, 2.0315)
//   W <- (1 - lr wd) W - lr 0.2 sqrt(max(rows, cols)) X
// The quintic pushes every singular value of X into roughly [0.7, 1.2] (not exactly to 1:
// it trades accuracy for speed), so X ~ U V^T of U's SVD; 0.2 sqrt(max(rows, cols)) gives the
// update about AdamW's RMS (Moonlight), so both kinds of group share one lr scale.
//
// AdamW (decoupled weight decay, as torch.optim.AdamW):
//   W <- (1 - lr wd) W;  m <- b1 m + (1 - b1) G;  v <- b2 v + (1 - b2) G^2
//   W <- W - lr (m / (1 - b1^t)) / (sqrt(v / (1 - b2^t)) + eps)
//
// Both keep their state in named tensors per parameter and save / load it to a file, so a run
// resumed from a checkpoint continues bit-identically. Parameters are assigned to named groups
// by their weight-map entry (make_groups below).
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "config/weight_map.h"

namespace wren::train {

// An optimiser state file that is missing, unreadable or does not match the parameters.
struct OptimStateError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

enum class OptimizerKind { muon, adamw };

// Peak lr and decoupled weight decay of one group; the schedule multiplies lr.
struct GroupSettings {
  double lr = 0.0;
  double weight_decay = 0.0;
};

// Seed 002's table. Groups (by weight-map entry, see group_name):
//   muon            role matrix, 2-D, except the ones below
//   muon_batched    role matrix with leading stack dims: routed experts [E, out, in], per-stream keys
//   adamw_decay     short convolution kernels (GDN conv_q/k/v, engram conv)
//   adamw_no_decay  token embedding, router, norms, biases / vectors (A_log, dt_bias, mHC alpha
//                   and bias, attention-residual queries), and matrices with a dimension of 1
//   adamw_head      the LM head (AdamW per NOTES.md 4; the seed's table does not list it, its
//                   no-decay row counts the embedding alone, so it gets a group of its own)
//   adamw_engram    engram tables: no weight decay, 5x the AdamW lr
// Balancing biases (role buffer) are no parameters and join no group.
struct OptimSettings {
  GroupSettings muon{3e-3, 0.08};
  GroupSettings muon_batched{3e-3, 0.08};
  GroupSettings adamw_decay{6e-4, 0.4};
  GroupSettings adamw_no_decay{6e-4, 0.0};
  GroupSettings adamw_head{6e-4, 0.0};
  GroupSettings adamw_engram{3e-3, 0.0};
  double momentum = 0.95;  // Muon
  int ns_steps = 5;
  bool nesterov = true;
  double beta1 = 0.9, beta2 = 0.95, eps = 1e-8;  // AdamW
};

struct ParamGroup {
  std::string name;  // one of the group names above
  OptimizerKind kind = OptimizerKind::adamw;
  GroupSettings settings;
  std::vector<std::string> names;     // weight-map names, parallel to params
  std::vector<torch::Tensor> params;  // the tensors themselves (shared storage, not copies)
};

// The group a weight-map tensor belongs to, or "" for buffers.
std::string group_name(const TensorInfo& t);

// One weight-map tensor and its torch tensor (the fields of train::Param).
struct NamedTensor {
  TensorInfo info;
  torch::Tensor tensor;
};
// Groups in the fixed order of OptimSettings, empty groups left out. Throws std::runtime_error
// when a tensor's shape differs from its weight-map shape.
std::vector<ParamGroup> make_groups(const std::vector<NamedTensor>& params, const OptimSettings& s);
// The same for any list of records with .info and .tensor (train::Model::params()).
template <class P>
std::vector<ParamGroup> make_groups(const std::vector<P>& params, const OptimSettings& s) {
  std::vector<NamedTensor> v;
  v.reserve(params.size());
  for (const auto& p : params) v.push_back({p.info, p.tensor});
  return make_groups(v, s);
}

// The quintic Newton-Schulz iteration above on the last two dims of g (any leading dims are
// independent slices); returns float32 of g's shape.
torch::Tensor newton_schulz(const torch::Tensor& g, int steps = 5);

// Shared machinery: groups, per-parameter named state, step loop, save / load.
class Optimizer {
 public:
  virtual ~Optimizer() = default;
  // Updates every parameter that has a gradient, with lr = group peak lr * lr_multiplier.
  void step(double lr_multiplier = 1.0);
  void zero_grad();
  const std::vector<ParamGroup>& groups() const { return groups_; }
  // The state of parameter `name` ("momentum"; "exp_avg", "exp_avg_sq", "step").
  const torch::Tensor& state(const std::string& name, const std::string& key) const;
  // Writes every state tensor to `path` (a temporary name, then renamed).
  void save(const std::string& path) const;
  // Reads a file written by save() of the same kind for the same parameters (names, shapes).
  void load(const std::string& path);

 protected:
  Optimizer(std::vector<ParamGroup> groups, OptimizerKind kind, const OptimSettings& s,
            std::vector<std::string> state_keys);
  virtual void update(torch::Tensor& p, const torch::Tensor& grad, std::vector<torch::Tensor>& state,
                      const GroupSettings& g, double lr) = 0;
  const OptimSettings settings_;

 private:
  std::vector<ParamGroup> groups_;
  OptimizerKind kind_;
  std::vector<std::string> state_keys_;
  std::vector<std::vector<std::vector<torch::Tensor>>> state_;  // [group][param][key]
};

class Muon : public Optimizer {
 public:
  // Takes the Muon groups of `groups` (the others are left for AdamW).
  Muon(const std::vector<ParamGroup>& groups, const OptimSettings& s);

 private:
  void update(torch::Tensor& p, const torch::Tensor& grad, std::vector<torch::Tensor>& state,
              const GroupSettings& g, double lr) override;
};

class AdamW : public Optimizer {
 public:
  // Takes the AdamW groups of `groups`.
  AdamW(const std::vector<ParamGroup>& groups, const OptimSettings& s);

 private:
  void update(torch::Tensor& p, const torch::Tensor& grad, std::vector<torch::Tensor>& state,
              const GroupSettings& g, double lr) override;
};

}  // namespace wren::train
