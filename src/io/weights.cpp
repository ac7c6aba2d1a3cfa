// Finding weights in safetensors files and checking them against the weight map (weights.h).
#include "io/weights.h"

#include <algorithm>
#include <cstdint>
#include <unordered_set>

namespace wren {

namespace {

using kernels::DType;

std::optional<DType> storage_of(Dtype d) {
  switch (d) {
    case Dtype::F32: return DType::f32;
    case Dtype::BF16: return DType::bf16;
    case Dtype::I8: return DType::q8;
    case Dtype::U8: return DType::q4;
    default: return std::nullopt;
  }
}

bool aligned(const uint8_t* p, size_t a) { return reinterpret_cast<uintptr_t>(p) % a == 0; }

}  // namespace

Dtype storage_dtype(DType s) {
  switch (s) {
    case DType::f32: return Dtype::F32;
    case DType::bf16: return Dtype::BF16;
    case DType::f16: return Dtype::F16;
    case DType::q8: return Dtype::I8;
    case DType::q4: return Dtype::U8;
  }
  return Dtype::F32;
}

bool is_quantized(DType s) { return s == DType::q8 || s == DType::q4; }

Shape stored_shape(DType s, const Shape& logical, const std::string& name) {
  if (!is_quantized(s)) return logical;
  if (logical.empty())
    throw IoError("tensor " + name + ": a scalar cannot be stored " + to_string(s) + " (group scales need a last dimension)");
  Shape out = logical;
  if (s == DType::q4) {
    if (logical.back() % 2)
      throw IoError("tensor " + name + ": logical shape " + shape_text(logical) +
                    " has an odd last dimension; 4-bit storage packs two values per byte");
    out.back() /= 2;
  }
  return out;
}

Shape scales_shape(DType s, const Shape& logical, int64_t group, const std::string& name) {
  stored_shape(s, logical, name);  // the same preconditions
  const int64_t cols = logical.back();
  if (group < 1 || cols % group)
    throw IoError("tensor " + name + ": group size " + std::to_string(group) + " does not divide the last dimension " +
                  std::to_string(cols) + " of " + shape_text(logical));
  if (s == DType::q4 && group % 2)
    throw IoError("tensor " + name + ": 4-bit group size " + std::to_string(group) + " must be even");
  Shape out = logical;
  out.back() = cols / group;
  return out;
}

void TensorSet::add_file(const std::string& path) {
  auto file = std::make_unique<SafetensorsFile>(path);
  for (const TensorView& t : file->tensors()) {
    auto it = index_.find(t.name);
    if (it != index_.end())
      throw IoError(path + ": tensor " + t.name + " is also in " + it->second.second->path() +
                    " (each tensor must be stored once)");
  }
  for (const TensorView& t : file->tensors()) index_[t.name] = {&t, file.get()};
  files_.push_back(std::move(file));
}

std::pair<const TensorView*, const SafetensorsFile*> TensorSet::find(const std::string& name) const {
  auto it = index_.find(name);
  if (it == index_.end()) return {nullptr, nullptr};
  return it->second;
}

WeightView TensorSet::weight(const TensorInfo& info, std::optional<DType> required) const {
  const std::string& name = info.name;
  auto [t, file] = find(name);
  if (!t) {
    std::string list;
    for (auto& f : files_) list += (list.empty() ? "" : ", ") + f->path();
    throw IoError("tensor " + name + " (shape " + shape_text(info.shape) + " in the weight map) is missing: it is in none of " +
                  (list.empty() ? std::string("the files (no files)") : list));
  }
  const std::string in = " in " + file->path();
  auto fail = [&](const std::string& msg) { throw IoError("tensor " + name + ": " + msg); };

  auto storage = storage_of(t->dtype);
  if (!storage)
    fail(std::string("dtype ") + to_string(t->dtype) + in +
         " is not a weight storage type (F32, BF16, I8 with .scales, U8 with .scales)");
  if (required && *storage != *required)
    fail(std::string("stored as ") + to_string(*storage) + " (" + to_string(t->dtype) + ")" + in + ", expected " +
         to_string(*required));
  const Shape expect = stored_shape(*storage, info.shape, name);
  if (t->shape != expect)
    fail("shape " + shape_text(t->shape) + in + ", expected " + shape_text(expect) +
         (*storage == DType::q4 ? " (the weight map's " + shape_text(info.shape) + " packed two 4-bit values per byte)"
                                      : std::string(" from the weight map")));

  WeightView w;
  w.name = name;
  w.storage = *storage;
  w.shape = info.shape;
  w.data = t->data;
  w.stored = t;
  w.file = file->path();
  if (!aligned(t->data, dtype_size(t->dtype)))
    fail("data" + in + " is not aligned to " + std::to_string(dtype_size(t->dtype)) + " bytes (rewrite the file)");

  const std::string sname = scales_name(name);
  auto [s, sfile] = find(sname);
  if (!is_quantized(*storage)) {
    if (s) fail(std::string("has ") + sname + " in " + sfile->path() + ", but " + to_string(t->dtype) + " takes no scales");
    return w;
  }
  if (!s) fail(std::string("dtype ") + to_string(t->dtype) + in + " needs scales " + sname + " (F16), which are missing");
  if (sfile != file) fail("scales " + sname + " are in " + sfile->path() + ", not beside the weights" + in);
  if (s->dtype != Dtype::F16) fail(std::string("scales ") + sname + " have dtype " + to_string(s->dtype) + in + ", expected F16");
  const Shape& ss = s->shape;
  const int64_t cols = info.shape.back();
  bool leading_ok = ss.size() == info.shape.size() && std::equal(ss.begin(), ss.end() - 1, info.shape.begin());
  if (!leading_ok || ss.back() < 1 || cols % ss.back())
    fail("scales " + sname + " have shape " + shape_text(ss) + in + ", which does not group the weight map's " +
         shape_text(info.shape) + " (expected [..., " + std::to_string(cols) + " / G] with G dividing " +
         std::to_string(cols) + ")");
  w.group = cols / ss.back();
  if (*storage == DType::q4 && w.group % 2)
    fail("4-bit group size " + std::to_string(w.group) + " (from scales shape " + shape_text(ss) + in + ") must be even");
  if (!aligned(s->data, 2)) fail("scales " + sname + in + " are not aligned to 2 bytes (rewrite the file)");
  w.scales = s->data;
  w.stored_scales = s;
  return w;
}

void TensorSet::check_no_extra(const WeightMap& map) const {
  std::unordered_set<std::string> names;
  for (auto& t : map.tensors) names.insert(t.name);
  const std::string suffix = ".scales";
  for (auto& f : files_)
    for (const TensorView& t : f->tensors()) {
      if (names.count(t.name)) continue;
      if (t.name.size() > suffix.size() && t.name.compare(t.name.size() - suffix.size(), suffix.size(), suffix) == 0) {
        std::string base = t.name.substr(0, t.name.size() - suffix.size());
        auto [b, bf] = find(base);
        if (names.count(base) && b && (b->dtype == Dtype::I8 || b->dtype == Dtype::U8)) continue;
      }
      throw IoError(f->path() + ": unexpected tensor " + t.name + " " + shape_text(t.shape) +
                    ": it is not in the weight map of this config");
    }
}

kernels::MatrixView matrix_view(const WeightView& w) {
  kernels::MatrixView v;
  v.type = w.storage;
  v.data = w.data;
  v.scales = reinterpret_cast<const kernels::F16*>(w.scales);
  v.cols = w.shape.empty() ? 1 : w.shape.back();
  v.rows = 1;
  for (size_t i = 0; i + 1 < w.shape.size(); ++i) v.rows *= w.shape[i];
  v.group = int(w.group);
  return v;
}

}  // namespace wren
