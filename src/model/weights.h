// model/: where a Model's tensors come from. A WeightSource hands out each weight-map
// tensor as a kernels::MatrixView (matrices, tables, expert stacks) or as f32 values (norm
// gains, biases, convs: small tensors, converted once at load). Two sources exist: a model
// directory on disk (io/, memory-mapped) and OwnedWeights in memory (random init, tests).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "config/model_config.h"
#include "config/weight_map.h"
#include "kernels/huge_pages.h"
#include "kernels/types.h"

namespace wren {

// A tensor seen as a matrix: [rows, cols] = [product of all but the last dimension, last dimension].
inline int64_t matrix_rows(const TensorInfo& t) { return t.shape.size() <= 1 ? 1 : t.numel() / t.shape.back(); }
inline int64_t matrix_cols(const TensorInfo& t) { return t.shape.empty() ? 1 : t.shape.back(); }

class WeightSource {
 public:
  virtual ~WeightSource() = default;
  virtual kernels::MatrixView matrix(const TensorInfo& t) const = 0;
  // The tensor decoded to f32, row by row from matrix().
  std::vector<float> floats(const TensorInfo& t) const;
  // Says that the values of w (a view this source handed out; not its scales) are no longer
  // read on the hot paths, because a decode-order copy serves them: a memory-mapped source
  // drops their pages, which a later reader faults back in from the file. Memory of its own
  // a source keeps (the default).
  virtual void release(const kernels::MatrixView& w) const { (void)w; }
};

// Every tensor of a weight map held in memory, each in its own storage type.
class OwnedWeights : public WeightSource {
 public:
  kernels::MatrixView matrix(const TensorInfo& t) const override;

  void set(const std::string& name, kernels::Matrix m) { tensors_[name] = std::move(m); }
  const kernels::Matrix* find(const std::string& name) const;
  const std::map<std::string, kernels::Matrix>& tensors() const { return tensors_; }

 private:
  const kernels::Matrix& at(const TensorInfo& t) const;
  std::map<std::string, kernels::Matrix> tensors_;
};

// Decode-order copies (kernels::pack_for_dot) of a model's q8 / q4 matrices, made at load:
// the integer dot paths read these instead of the file's rows (the bytes are the same, in
// the order one 256-bit load wants). The files and every other reader keep the stored layout.
class PackedWeights {
 public:
  // Packs w into a buffer of this store and points w.packed at it; leaves a matrix that is
  // not packable (kernels::packable) as it is.
  void pack(kernels::MatrixView& w);
  // Copies a q8 / q4 / f32 / bf16 matrix as it is stored (values, then scales) into this
  // store and points w at the copy: for matrices read a row at a time at scattered rows
  // (ReLU^2 down rows, kernels::add_rows), whose rows then sit in huge pages too.
  void keep_rows(kernels::MatrixView& w);
  // A copy of an f32 / bf16 matrix transposed ([cols, rows], the same values) in this store,
  // for a product read by columns (x W as W^T x: mHC's phi).
  kernels::MatrixView transposed(const kernels::MatrixView& w);
  double bytes() const { return bytes_; }

 private:
  kernels::HugeArena arena_;  // the copies live in huge pages (kernels/huge_pages.h)
  double bytes_ = 0;
};

// Which storage type a tensor gets when a model is made in `matrices` precision (wren init,
// the trainer's export, init_weights): large matrices and tables take it; routers, norms,
// vectors and convs stay f32 (seed 002 keeps the router in f32; 1-D tensors are too small to
// matter). A row that `group` does not divide cannot be quantised: it is stored bf16.
kernels::DType storage_type(const TensorInfo& t, kernels::DType matrices, int group = kernels::kDefaultGroup);

// Draws every tensor from config/init_rule with a generator seeded by (seed, tensor name),
// so a tensor's values do not depend on which other tensors exist, then stores it in
// storage_type(t, matrices).
OwnedWeights init_weights(const ModelConfig& c, const WeightMap& w, uint64_t seed, kernels::DType matrices,
                          int group = kernels::kDefaultGroup);

// Rows [first, first + count) of a tensor's initial f32 values (rows as in matrix()). Each
// row has its own generator, so huge tensors (engram tables) can be made in pieces.
void init_rows(const ModelConfig& c, const TensorInfo& t, uint64_t seed, int64_t first, int64_t count, float* out);

}  // namespace wren
