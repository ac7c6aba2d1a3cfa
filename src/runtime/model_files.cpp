#include "runtime/model_files.h"

#include <algorithm>
#include <cstring>
#include <thread>

#include "kernels/ops.h"

namespace wren {

kernels::DType kernel_type(StorageType s) {
  switch (s) {
    case StorageType::f32: return kernels::DType::f32;
    case StorageType::bf16: return kernels::DType::bf16;
    case StorageType::q8: return kernels::DType::q8;
    case StorageType::q4: return kernels::DType::q4;
  }
  return kernels::DType::f32;
}

StorageType storage_of(kernels::DType t) {
  switch (t) {
    case kernels::DType::bf16: return StorageType::bf16;
    case kernels::DType::q8: return StorageType::q8;
    case kernels::DType::q4: return StorageType::q4;
    default: return StorageType::f32;
  }
}

namespace {


// The weights of an open model directory, as kernel views into its mappings.
class DirWeights : public WeightSource {
 public:
  explicit DirWeights(const std::string& dir) : files_(dir) {}
  const ModelFiles& files() const { return files_; }

  kernels::MatrixView matrix(const TensorInfo& t) const override { return matrix_view(files_.weight(t.name), t); }

 private:
  ModelFiles files_;
};

// Rows of a tensor's initial values, encoded chunk by chunk into `sink`: the values of every
// row (scales == false) or only their group scales (scales == true).
void stream_init(const ModelConfig& c, const TensorInfo& t, uint64_t seed, kernels::DType type, int group, bool scales,
                 int threads, const ByteSink& sink) {
  const int64_t rows = matrix_rows(t), cols = t.shape.back();
  const int64_t chunk = std::max<int64_t>(1, (int64_t(1) << 22) / cols);
  std::vector<float> values;
  for (int64_t first = 0; first < rows; first += chunk) {
    const int64_t n = std::min(chunk, rows - first);
    values.resize(size_t(n * cols));
    // Rows have independent generators, so threads can share a chunk without changing a value.
    std::vector<std::thread> pool;
    const int workers = int(std::min<int64_t>(std::max(1, threads), n));
    for (int w = 0; w < workers; ++w)
      pool.emplace_back([&, w] {
        const int64_t b = n * w / workers, e = n * (w + 1) / workers;
        init_rows(c, t, seed, first + b, e - b, values.data() + b * cols);
      });
    for (auto& th : pool) th.join();
    const kernels::Matrix m = kernels::encode_matrix(values.data(), n, cols, type, group);
    if (scales) sink(m.scales.data(), m.scales.size() * sizeof(kernels::F16));
    else sink(m.values.data(), m.values.size());
  }
}

}  // namespace

kernels::MatrixView matrix_view(const WeightView& w, const TensorInfo& t) {
  kernels::MatrixView v;
  v.type = kernel_type(w.storage);
  v.data = w.data;
  v.scales = reinterpret_cast<const kernels::F16*>(w.scales);
  v.rows = matrix_rows(t);
  v.cols = matrix_cols(t);
  v.group = int(w.group);
  return v;
}

std::shared_ptr<const Model> open_model(const std::string& dir) {
  auto weights = std::make_shared<DirWeights>(dir);
  return load_model(weights->files().config(), weights);
}

void write_random_model(const std::string& dir, const ModelConfig& c, uint64_t seed, kernels::DType matrices,
                        int group, const std::string& tokenizer_json, bool overwrite, int threads) {
  WeightSupplier supply = [&](const TensorInfo& t) {
    kernels::DType type = storage_type(t, matrices);
    const bool grouped = type == kernels::DType::q8 || type == kernels::DType::q4;
    if (grouped && t.shape.back() % group) type = kernels::DType::bf16;  // rows too short for a group
    WeightData d;
    d.storage = storage_of(type);
    d.group = grouped && type != kernels::DType::bf16 ? group : 0;
    d.data = [=, &c](const ByteSink& sink) { stream_init(c, t, seed, type, group, false, threads, sink); };
    if (d.group) d.scales = [=, &c](const ByteSink& sink) { stream_init(c, t, seed, type, group, true, threads, sink); };
    return d;
  };
  ModelDirWriteOptions options;
  options.tokenizer_json = tokenizer_json;
  options.overwrite = overwrite;
  options.metadata = {{"wren.init_seed", std::to_string(seed)}};
  write_model_dir(dir, c, supply, options);
}

}  // namespace wren
