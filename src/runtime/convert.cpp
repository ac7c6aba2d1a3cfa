// Streaming conversion into a model directory (convert.h): values are read a block of rows at
// a time, encoded, and handed to the writer's sinks.
#include "runtime/convert.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>

#include "config/read_file.h"
#include "io/gguf_blocks.h"
#include "model/weights.h"
#include "runtime/gguf_import.h"

namespace wren {

namespace fs = std::filesystem;

namespace {

using kernels::DType;

// Rows per block: about 4 M values (16 MB of f32), at least one row.
int64_t block_rows(int64_t cols) { return std::max<int64_t>(1, (int64_t(1) << 22) / std::max<int64_t>(1, cols)); }

void check_stop(const ConvertOptions& o, const std::string& name) {
  if (o.stop && o.stop->load()) throw IoError("tensor " + name + ": interrupted; nothing was written");
}

// Decodes `n` elements of a source tensor from element `first`, then drops the pages read.
void decode_elements(const ElementRun& r, uint64_t first, uint64_t n, float* out) {
  if (r.stride != 1) {  // a transposed source (float types), one element at a time
    ElementRun one = r;
    one.stride = 1;
    for (uint64_t i = 0; i < n; ++i) decode_elements(one, first + i * r.stride, 1, out + i);
    return;
  }
  if (r.gguf) {
    const GgufTensor& t = *r.gguf;
    const uint64_t bv = uint64_t(ggml_block_values(t.type)), bb = uint64_t(ggml_block_bytes(t.type));
    const uint64_t block0 = first / bv, blocks = (first + n + bv - 1) / bv - block0;
    if (first % bv || n % bv) {
      // A run inside blocks (a column slice of a K-quant row): decode the blocks that hold it.
      std::vector<float> whole(static_cast<size_t>(blocks * bv));
      gguf_blocks::dequantize_row(t.type, t.data + block0 * bb, int64_t(whole.size()), whole.data());
      std::copy_n(whole.data() + (first - block0 * bv), n, out);
    } else {
      gguf_blocks::dequantize_row(t.type, t.data + block0 * bb, int64_t(n), out);
    }
    r.file->release_pages(uint64_t(t.data - r.file->data()) + block0 * bb, blocks * bb);
  } else {
    const TensorView& t = *r.tensor;
    const size_t size = dtype_size(t.dtype);
    const uint8_t* p = t.data + first * size;
    if (t.dtype == Dtype::F32) {
      std::memcpy(out, p, n * 4);
    } else if (t.dtype == Dtype::BF16 && reinterpret_cast<uintptr_t>(p) % alignof(kernels::BF16) == 0) {
      kernels::bf16_to_f32_row(reinterpret_cast<const kernels::BF16*>(p), int64_t(n), out);  // the SIMD widening
    } else {
      for (uint64_t i = 0; i < n; ++i) {
        uint16_t bits;
        std::memcpy(&bits, p + 2 * i, 2);
        out[i] = t.dtype == Dtype::BF16 ? kernels::bf16_to_f32(kernels::BF16{bits}) : kernels::f16_to_f32(kernels::F16{bits});
      }
    }
    r.file->release_pages(t.file_offset + first * size, n * size);
  }
  if (r.add != 0.0f)
    for (uint64_t i = 0; i < n; ++i) out[i] += r.add;
  if (r.log_of_negated)
    for (uint64_t i = 0; i < n; ++i) {
      if (!(out[i] < 0.0f) || !std::isfinite(out[i]))
        throw IoError(std::string("tensor ") + (r.gguf ? r.gguf->name : r.tensor->name) + ": value " + std::to_string(out[i]) +
                      " where -e^A (a negative number) was expected");
      out[i] = std::log(-out[i]);
    }
}

// GGUF Q8_0 (Q4_0) runs read as our q8 (q4) with group 32 are copied bit for bit.
bool blocks_copy(const TensorValues& src, DType type, int group) {
  if (src.runs.empty() || group != 32 || (type != DType::q8 && type != DType::q4)) return false;
  const GgmlType want = type == DType::q8 ? GgmlType::Q8_0 : GgmlType::Q4_0;
  return std::all_of(src.runs.begin(), src.runs.end(), [&](const ElementRun& r) {
    return r.gguf && r.gguf->type == want && r.add == 0.0f && !r.log_of_negated && r.stride == 1 && r.first % 32 == 0 &&
           r.count % 32 == 0;
  });
}

// The sinks of one weight: its values, and (q8 / q4) its group scales, filled in the same pass.
struct WeightSinks {
  const ByteSink& values;
  const ByteSink* scales = nullptr;
};

void copy_blocks(const TensorInfo& t, const TensorValues& src, DType type, const ConvertOptions& o,
                 const WeightSinks& sink) {
  const uint64_t bb = type == DType::q8 ? 34 : 18, chunk_blocks = uint64_t(1) << 16;
  std::vector<int8_t> q(static_cast<size_t>(chunk_blocks * 32));
  std::vector<kernels::F16> s(static_cast<size_t>(chunk_blocks));
  for (const ElementRun& r : src.runs)
    for (uint64_t b = r.first / 32; b < (r.first + r.count) / 32; b += chunk_blocks) {
      check_stop(o, t.name);
      const uint64_t n = std::min(chunk_blocks, (r.first + r.count) / 32 - b);
      const uint8_t* p = r.gguf->data + b * bb;
      if (type == DType::q8) gguf_blocks::q8_0_to_q8(p, int64_t(n * 32), q.data(), s.data());
      else gguf_blocks::q4_0_to_q4(p, int64_t(n * 32), reinterpret_cast<uint8_t*>(q.data()), s.data());
      sink.values(q.data(), type == DType::q8 ? n * 32 : n * 16);
      (*sink.scales)(s.data(), n * 2);
      r.file->release_pages(uint64_t(p - r.file->data()), n * bb);
    }
}

// Runs whose stored bytes are already `type`'s (BF16 -> bf16, F32 -> f32, safetensors or GGUF,
// nothing added, not strided) are copied as they are: bits, not a decode and re-encode.
bool bytes_copy(const TensorValues& src, DType type) {
  if (src.runs.empty() || (type != DType::bf16 && type != DType::f32)) return false;
  return std::all_of(src.runs.begin(), src.runs.end(), [&](const ElementRun& r) {
    if (r.add != 0.0f || r.log_of_negated || r.stride != 1) return false;
    if (r.gguf) return r.gguf->type == (type == DType::bf16 ? GgmlType::BF16 : GgmlType::F32);
    return r.tensor->dtype == (type == DType::bf16 ? Dtype::BF16 : Dtype::F32);
  });
}

void copy_bytes(const TensorInfo& t, const TensorValues& src, DType type, const ConvertOptions& o, const ByteSink& sink) {
  const uint64_t size = type == DType::bf16 ? 2 : 4, chunk = uint64_t(1) << 22;  // 4 M values a piece
  for (const ElementRun& r : src.runs) {
    const uint8_t* base = r.gguf ? r.gguf->data : r.tensor->data;
    for (uint64_t at = r.first; at < r.first + r.count; at += chunk) {
      check_stop(o, t.name);
      const uint64_t n = std::min(chunk, r.first + r.count - at);
      sink(base + at * size, n * size);
      r.file->release_pages(r.gguf ? uint64_t(base - r.file->data()) + at * size : r.tensor->file_offset + at * size, n * size);
    }
  }
}

// Reads the concatenated runs in order.
class RunReader {
 public:
  explicit RunReader(const std::vector<ElementRun>& runs) : runs_(runs) {}
  void read(float* out, uint64_t n) {
    while (n) {
      if (run_ >= runs_.size()) throw IoError("internal: the source runs hold fewer values than the tensor");
      const ElementRun& r = runs_[run_];
      const uint64_t take = std::min(n, r.count - at_);
      decode_elements(r, r.first + at_ * r.stride, take, out);
      out += take, n -= take, at_ += take;
      if (at_ == r.count) ++run_, at_ = 0;
    }
  }

 private:
  const std::vector<ElementRun>& runs_;
  size_t run_ = 0;
  uint64_t at_ = 0;
};

uint64_t run_elements(const std::vector<ElementRun>& runs) {
  uint64_t n = 0;
  for (auto& r : runs) n += r.count;
  return n;
}

// A stored weight copied as it is, a block of rows at a time: values and scales.
void copy_stored(const WeightView& w, const ConvertOptions& o, const WeightSinks& sink) {
  const kernels::MatrixView v = matrix_view(w);
  const uint64_t row = uint64_t(v.row_bytes()), scale_row = uint64_t(v.groups()) * 2;
  for (int64_t first = 0, step = block_rows(v.cols); first < v.rows; first += step) {
    check_stop(o, w.name);
    const int64_t n = std::min(step, v.rows - first);
    sink.values(w.data + uint64_t(first) * row, uint64_t(n) * row);
    if (sink.scales) (*sink.scales)(w.scales + uint64_t(first) * scale_row, uint64_t(n) * scale_row);
  }
}

// Sums of (x - decoded)^2 and x^2 over a tensor: the error its storage costs.
struct ErrorSums {
  double err = 0, ref = 0;
};

void add_error(const kernels::Matrix& m, const std::vector<float>& x, int64_t cols, ErrorSums& e) {
  std::vector<float> row(static_cast<size_t>(cols));
  const kernels::MatrixView v = m.view();
  for (int64_t r = 0; r < m.rows; ++r) {
    kernels::decode_row(v, r, row.data());
    for (int64_t k = 0; k < cols; ++k) {
      const double x0 = x[size_t(r * cols + k)], d = x0 - row[size_t(k)];
      e.err += d * d, e.ref += x0 * x0;
    }
  }
}

// The weight's values encoded as `type`, streamed into the sinks: each block of rows is read
// and encoded once, its values and (q8 / q4) scales handed on together.
void encode_stream(const TensorInfo& t, const TensorValues& src, DType type, int group, const ConvertOptions& o,
                   const WeightSinks& sink, ErrorSums* error = nullptr) {
  if (src.stored && src.stored->storage == type && (!is_quantized(type) || src.stored->group == group))
    return copy_stored(*src.stored, o, sink);
  if (blocks_copy(src, type, group)) return copy_blocks(t, src, type, o, sink);
  if (bytes_copy(src, type)) return copy_bytes(t, src, type, o, sink.values);
  const int64_t rows = matrix_rows(t), cols = matrix_cols(t);
  RunReader reader(src.runs);
  kernels::MatrixView stored;
  if (src.stored) stored = matrix_view(*src.stored);
  std::vector<float> values;
  for (int64_t first = 0, step = block_rows(cols); first < rows; first += step) {
    check_stop(o, t.name);
    const int64_t n = std::min(step, rows - first);
    values.resize(size_t(n * cols));
    if (src.stored)
      for (int64_t r = 0; r < n; ++r) kernels::decode_row(stored, first + r, values.data() + r * cols);
    else
      reader.read(values.data(), uint64_t(n * cols));
    kernels::Matrix m;
    try {
      m = kernels::encode_matrix(values.data(), n, cols, type, group);
    } catch (const kernels::KernelError& e) {
      throw IoError("tensor " + t.name + ": rows [" + std::to_string(first) + ", " + std::to_string(first + n) +
                    ") cannot be stored " + to_string(type) + ": " + e.what());
    }
    if (error) add_error(m, values, cols, *error);
    sink.values(m.values.data(), m.values.size());
    if (sink.scales) (*sink.scales)(m.scales.data(), m.scales.size() * sizeof(kernels::F16));
  }
}

}  // namespace

DType converted_storage(const TensorInfo& t, const ModelConfig& c, const ConvertOptions& o) {
  const bool head = t.name == "lm_head" || (t.name == "embed" && c.tie_embeddings);
  return storage_type(t, head && o.lm_head ? *o.lm_head : o.dtype, o.group);
}

void write_converted_model(const std::string& dir, const ModelConfig& c, const ValuesFor& values,
                           const ConvertOptions& o, ModelDirWriteOptions files) {
  const WeightMap map = build_weight_map(c);
  auto progress = std::make_shared<ConvertProgress>();
  progress->total = int(map.tensors.size());
  WeightSupplier supply = [&](const TensorInfo& t) {
    TensorValues src = values(t);
    if (!src.stored && run_elements(src.runs) != uint64_t(t.numel()))
      throw IoError("tensor " + t.name + " " + shape_text(t.shape) + ": the source holds " +
                    std::to_string(run_elements(src.runs)) + " values, expected " + std::to_string(t.numel()));
    const DType type = converted_storage(t, c, o);
    const int group = is_quantized(type) ? o.group : 0;
    WeightData d;
    d.storage = type;
    d.group = group;
    auto write = [=, &o](const ByteSink& values, const ByteSink* scales) {
      ErrorSums e;
      const ByteSink counted = [&](const void* p, size_t n) {
        values(p, n);
        progress->bytes += n;
      };
      encode_stream(t, src, type, group, o, {counted, scales}, o.measure_error ? &e : nullptr);
      ++progress->done;
      progress->tensor = t.name;
      progress->error = e.ref > 0 ? std::sqrt(e.err / e.ref) : 0.0;
      if (o.progress) o.progress(*progress);
    };
    if (group) d.values_and_scales = [write](const ByteSink& values, const ByteSink& scales) { write(values, &scales); };
    else d.data = [write](const ByteSink& values) { write(values, nullptr); };
    return d;
  };
  files.overwrite = o.overwrite;
  write_model_dir(dir, c, supply, files);
}

std::vector<std::string> convert_hf_checkpoint(const std::string& src, const std::string& dst, const ConvertOptions& o) {
  HfCheckpoint ck(src);
  const fs::path root(src);
  ModelDirWriteOptions files;
  auto tok = try_read_file((root / "tokenizer.json").string());
  if (!tok) throw IoError(src + ": no tokenizer.json (the converter needs the model's tokenizer)");
  files.tokenizer_json = std::move(*tok);
  for (const char* name : {"tokenizer_config.json", "generation_config.json"})
    if (auto f = try_read_file((root / name).string())) {
      try {
        [[maybe_unused]] const Json parsed = Json::parse(*f);  // checked, not used
      } catch (const nlohmann::json::exception& e) {
        throw IoError((root / name).string() + ": invalid JSON: " + e.what());
      }
      files.extra_files[name] = std::move(*f);
    }
  files.metadata = {{"wren.converted_from", "huggingface " + ck.model_type()}};
  write_converted_model(dst, ck.config(), [&](const TensorInfo& t) { return TensorValues{ck.runs(t), nullptr}; }, o,
                        std::move(files));
  return ck.unused(build_weight_map(ck.config()));
}

std::vector<std::string> convert_gguf_file(const std::string& src, const std::string& dst, ConvertOptions o) {
  GgufModel g(src);
  ModelDirWriteOptions files;
  files.tokenizer_json = g.tokenizer_json();
  files.extra_files["tokenizer_config.json"] = g.tokenizer_config_json();
  files.metadata = {{"wren.converted_from", "gguf " + g.architecture()}};
  o.measure_error = true;
  write_converted_model(dst, g.config(), [&](const TensorInfo& t) { return TensorValues{g.runs(t), nullptr}; }, o,
                        std::move(files));
  return g.unused(build_weight_map(g.config()));
}

void quantize_model_dir(const std::string& src, const std::string& dst, const ConvertOptions& o) {
  const ModelFiles in(src);
  ModelDirWriteOptions files;
  files.tokenizer_json = read_file(in.tokenizer_path());
  for (const auto& e : fs::directory_iterator(src)) {
    const std::string name = e.path().filename().string();
    if (e.is_regular_file() && e.path().extension() == ".json" && name != "config.json" && name != "tokenizer.json")
      files.extra_files[name] = read_file(e.path().string());
  }
  files.metadata = {{"wren.quantized_from", fs::path(src).filename().string()}};
  write_converted_model(dst, in.config(), [&](const TensorInfo& t) { return TensorValues{{}, &in.weight(t.name)}; }, o,
                        std::move(files));
}

}  // namespace wren
