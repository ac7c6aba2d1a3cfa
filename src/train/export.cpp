// Export and import of model directories. Each weight-map tensor is encoded from the
// parameter's f32 values in its storage type (the same choice `wren init` makes); reading
// decodes every stored type back to f32.
#include "train/export.h"

#include <stdexcept>

#include "config/parse.h"
#include "io/model_dir.h"
#include "model/weights.h"

namespace wren::train {

namespace {

std::vector<uint8_t> bytes_of(const void* p, size_t n) {
  const auto* b = static_cast<const uint8_t*>(p);
  return std::vector<uint8_t>(b, b + n);
}

void check_same_map(const WeightMap& a, const WeightMap& b, const std::string& what) {
  if (a.tensors.size() != b.tensors.size())
    throw std::runtime_error(what + ": " + std::to_string(b.tensors.size()) + " tensors, the model has " +
                             std::to_string(a.tensors.size()));
  for (size_t i = 0; i < a.tensors.size(); ++i)
    if (a.tensors[i].name != b.tensors[i].name || a.tensors[i].shape != b.tensors[i].shape)
      throw std::runtime_error(what + ": tensor " + b.tensors[i].name + " does not match the model's " +
                               a.tensors[i].name + " (name or shape)");
}

}  // namespace

void export_model_dir(const Model& model, const ModelConfig& c, const std::string& dir,
                      const std::string& tokenizer_json, kernels::DType matrices, bool overwrite) {
  check_same_map(model.weight_map(), build_weight_map(c), "export to " + dir + ": the config's weight map");
  const int group = kernels::kDefaultGroup;
  WeightSupplier supply = [&](const TensorInfo& t) {
    const torch::Tensor values = model.tensor(t.name).detach().to(torch::kCPU, torch::kFloat32).contiguous();
    const int64_t rows = matrix_rows(t), cols = matrix_cols(t);
    const kernels::DType type = storage_type(t, matrices, group);
    const bool quantized = is_quantized(type);
    const kernels::Matrix m = kernels::encode_matrix(values.data_ptr<float>(), rows, cols, type, quantized ? group : 0);
    return weight_data(type, m.values,
                       bytes_of(m.scales.data(), m.scales.size() * sizeof(kernels::F16)), quantized ? group : 0);
  };
  ModelDirWriteOptions options;
  options.tokenizer_json = tokenizer_json;
  options.overwrite = overwrite;
  options.metadata = {{"wren.writer", "train::export_model_dir"}};
  write_model_dir(dir, c, supply, options);
}

void load_model_dir_into(Model& model, const std::string& dir) {
  const ModelFiles files(dir);
  // The weights mean the same only under the same config (hash seeds, RoPE, norms...): the
  // canonical JSON forms must agree except for the name.
  Json mine = to_json(model.config()), theirs = to_json(files.config());
  mine.erase("name"), theirs.erase("name");
  if (mine != theirs) throw std::runtime_error(dir + "/config.json: not the model's config (" + files.config().name + ")");
  check_same_map(model.weight_map(), files.weight_map(), dir);
  torch::NoGradGuard no_grad;
  for (const TensorInfo& t : files.weight_map().tensors) {
    const kernels::MatrixView v = matrix_view(files.weight(t.name));
    torch::Tensor values = torch::empty(t.shape, torch::kFloat32);
    for (int64_t r = 0; r < v.rows; ++r) kernels::decode_row(v, r, values.data_ptr<float>() + r * v.cols);
    const torch::Tensor& target = model.tensor(t.name);
    target.copy_(values.to(target.device()));
  }
}

}  // namespace wren::train
