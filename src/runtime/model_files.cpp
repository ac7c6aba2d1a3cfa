#include "runtime/model_files.h"

#include <algorithm>
#include <cstring>

#include "kernels/ops.h"
#include "kernels/threads.h"

namespace wren {

namespace {


// The index of the first NaN or Inf among n stored values, or -1: its exponent bits are all
// ones (`mask`: 0x7f800000 for f32, 0x7f80 for bf16, 0x7c00 for f16). q8 / q4 values are
// integers: only their f16 scales can hold one.
template <typename Bits>
int64_t first_non_finite(const uint8_t* p, int64_t n, Bits mask) {
  for (int64_t i = 0; i < n; ++i) {
    Bits b;
    std::memcpy(&b, p + i * int64_t(sizeof(Bits)), sizeof(Bits));
    if ((b & mask) == mask) return i;
  }
  return -1;
}

// NaN / Inf weights would decode to NaN logits and print garbage: refuse them at load, naming
// the file and tensor. One pass over the dense weights (engram tables, read by row, are left
// to the logits check of generation.h).
void check_finite_weights(const ModelFiles& files) {
  for (const TensorInfo& info : files.weight_map().tensors) {
    if (info.engram_file) continue;
    const WeightView& w = files.weight(info.name);
    int64_t n = 1;
    for (int64_t d : w.shape) n *= d;
    using kernels::DType;
    int64_t bad = -1;
    std::string what = "value";
    if (w.storage == DType::f32) bad = first_non_finite<uint32_t>(w.data, n, 0x7f800000u);
    else if (w.storage == DType::bf16) bad = first_non_finite<uint16_t>(w.data, n, 0x7f80);
    else if (w.storage == DType::f16) bad = first_non_finite<uint16_t>(w.data, n, 0x7c00);
    else if (w.scales && w.group > 0) {
      bad = first_non_finite<uint16_t>(w.scales, n / w.group, 0x7c00);
      what = "scale";
    }
    if (bad >= 0)
      throw IoError(w.file + ": tensor " + info.name + ": " + what + " " + std::to_string(bad) +
                    " is NaN or Inf (a model must hold finite weights)");
  }
}

// The weights of an open model directory, as kernel views into its mappings.
class DirWeights : public WeightSource {
 public:
  explicit DirWeights(const std::string& dir) : files_(dir) { check_finite_weights(files_); }
  const ModelFiles& files() const { return files_; }
  ModelFiles& files() { return files_; }

  kernels::MatrixView matrix(const TensorInfo& t) const override { return matrix_view(files_.weight(t.name)); }
  void release(const kernels::MatrixView& w) const override {
    const auto* p = static_cast<const uint8_t*>(w.data);
    for (const auto& f : files_.tensors().files()) {
      const MappedFile& m = f->mapping();
      if (p >= m.data() && p < m.data() + m.size())
        return m.release_pages(uint64_t(p - m.data()), uint64_t(w.rows * w.row_bytes()));
    }
  }

 private:
  ModelFiles files_;
};

// Rows of a tensor's initial values, encoded chunk by chunk: the values into `values`, and
// for q8 / q4 their group scales into `scales` (one pass: the values are drawn once).
void stream_init(const ModelConfig& c, const TensorInfo& t, uint64_t seed, kernels::DType type, int group,
                 kernels::ThreadPool& pool, const ByteSink& values, const ByteSink* scales) {
  const int64_t rows = matrix_rows(t), cols = t.shape.back();
  const int64_t chunk = std::max<int64_t>(1, (int64_t(1) << 22) / cols);
  std::vector<float> drawn;
  for (int64_t first = 0; first < rows; first += chunk) {
    const int64_t n = std::min(chunk, rows - first);
    drawn.resize(size_t(n * cols));
    // Rows have independent generators, so threads can share a chunk without changing a value.
    kernels::parallel_rows(&pool, n, 1, [&](int64_t b, int64_t e) {
      init_rows(c, t, seed, first + b, e - b, drawn.data() + b * cols);
    });
    const kernels::Matrix m = kernels::encode_matrix(drawn.data(), n, cols, type, group);
    values(m.values.data(), m.values.size());
    if (scales) (*scales)(m.scales.data(), m.scales.size() * sizeof(kernels::F16));
  }
}

}  // namespace

std::shared_ptr<const Model> open_model(const std::string& dir) {
  auto weights = std::make_shared<DirWeights>(dir);
  weights->files().take_tokenizer_json();  // not needed here: free it
  return load_model(weights->files().config(), weights);
}

OpenedModel open_model_and_tokenizer(const std::string& dir) {
  auto weights = std::make_shared<DirWeights>(dir);
  text::Tokenizer tok = text::Tokenizer::from_json(weights->files().take_tokenizer_json(), weights->files().tokenizer_path());
  return {load_model(weights->files().config(), weights), std::move(tok)};
}

void write_random_model(const std::string& dir, const ModelConfig& c, uint64_t seed, kernels::DType matrices,
                        int group, const std::string& tokenizer_json, bool overwrite, int threads) {
  kernels::ThreadPool pool(std::max(1, threads));
  WeightSupplier supply = [&](const TensorInfo& t) {
    const kernels::DType type = storage_type(t, matrices, group);
    WeightData d;
    d.storage = type;
    d.group = is_quantized(type) ? group : 0;
    if (d.group)
      d.values_and_scales = [=, &c, &pool](const ByteSink& values, const ByteSink& scales) {
        stream_init(c, t, seed, type, group, pool, values, &scales);
      };
    else
      d.data = [=, &c, &pool](const ByteSink& values) { stream_init(c, t, seed, type, group, pool, values, nullptr); };
    return d;
  };
  ModelDirWriteOptions options;
  options.tokenizer_json = tokenizer_json;
  options.overwrite = overwrite;
  options.metadata = {{"wren.init_seed", std::to_string(seed)}};
  write_model_dir(dir, c, supply, options);
}

}  // namespace wren
