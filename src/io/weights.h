// io/: weights as the engine sees them - a tensor of the weight map found in a set of
// safetensors files, with its storage type (kernels::DType, the one enum of storage layouts).
// On disk:
//
//   f32   name  F32   logical shape
//   bf16  name  BF16  logical shape
//   q8    name  I8    logical shape [..., cols]      + name.scales F16 [..., cols / G]
//   q4    name  U8    [..., cols / 2] (two values)   + name.scales F16 [..., cols / G]
//
// G, the group size along the last dimension, is derived from the two shapes and must divide
// cols (for q4 it must also be even, so no byte holds two groups). Nibble order inside a q4
// byte belongs to kernels/; io/ only moves the bytes.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "config/weight_map.h"
#include "io/safetensors.h"
#include "kernels/types.h"

namespace wren {

// The weight storage types are f32, bf16, q8 and q4 (f16 holds only group scales).
Dtype storage_dtype(kernels::DType s);  // dtype of the main entry
bool is_quantized(kernels::DType s);
// Shapes on disk for a logical shape; IoError (naming `name`) when group does not fit cols.
Shape stored_shape(kernels::DType s, const Shape& logical, const std::string& name);
Shape scales_shape(kernels::DType s, const Shape& logical, int64_t group, const std::string& name);

inline std::string scales_name(const std::string& name) { return name + ".scales"; }

// A typed view of one weight: pointers into a file's mapping.
struct WeightView {
  std::string name;
  kernels::DType storage = kernels::DType::f32;
  Shape shape;                       // logical, as in the weight map
  const uint8_t* data = nullptr;     // aligned to its element size (checked)
  int64_t group = 0;                 // q8 / q4: values per scale; 0 otherwise
  const uint8_t* scales = nullptr;   // q8 / q4: F16 bits, [..., cols / group], 2-byte aligned
  const TensorView* stored = nullptr;         // the main entry (dtype, stored shape, file offset)
  const TensorView* stored_scales = nullptr;  // the .scales entry, or nullptr
  std::string file;                  // path of the file holding both
};

// A weight as a kernel view into its mapping: [rows, cols] = [product of all but the last
// dimension, the last dimension].
kernels::MatrixView matrix_view(const WeightView& w);

// Several safetensors files read as one namespace of tensors.
class TensorSet {
 public:
  // Opens and validates a file; a tensor name already present in another file is an error.
  void add_file(const std::string& path);

  const std::vector<std::unique_ptr<SafetensorsFile>>& files() const { return files_; }
  // The tensor and the file holding it, or {nullptr, nullptr}.
  std::pair<const TensorView*, const SafetensorsFile*> find(const std::string& name) const;

  // The weight `info` in its stored form, checked against the weight map's logical shape:
  // dtype one of the storage types, shapes, scales, alignment. `required` restricts the
  // storage type (the router stays f32). Errors name the tensor, the file and what differs.
  WeightView weight(const TensorInfo& info, std::optional<kernels::DType> required = std::nullopt) const;

  // Every tensor must be a weight of `map` or the .scales of one: IoError naming the first
  // file and tensor that is not.
  void check_no_extra(const WeightMap& map) const;

 private:
  std::vector<std::unique_ptr<SafetensorsFile>> files_;
  std::unordered_map<std::string, std::pair<const TensorView*, const SafetensorsFile*>> index_;
};

}  // namespace wren
