// io/: our own GGUF reader and writer (the llama.cpp file format, versions 2 and 3).
//
//   "GGUF" u32 version  u64 tensor_count  u64 kv_count
//   kv_count x  { string key, u32 value_type, value }          metadata
//   tensor_count x { string name, u32 n_dims, u64 ne[n_dims], u32 ggml_type, u64 offset }
//   padding to general.alignment (default 32), then the data section; each tensor at
//   data_start + offset, offset a multiple of the alignment.
//   string = u64 length + bytes (no terminator); array = u32 element type, u64 count, elements.
//
// ne[0] is the innermost (contiguous) dimension: a [out, in] matrix has ne = {in, out}. Rows
// (ne[0] values) are stored as blocks of the tensor's ggml type (gguf_blocks.h).
//
// The reader treats the file as untrusted: every length, count, dimension, product, offset,
// alignment and type is checked against the file's size before use; errors name the file,
// the key or tensor, and what was expected.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "io/mapped_file.h"
#include "io/safetensors.h"

namespace wren {

enum class GgufType : uint32_t {
  u8 = 0, i8 = 1, u16 = 2, i16 = 3, u32 = 4, i32 = 5, f32 = 6, boolean = 7, string = 8, array = 9,
  u64 = 10, i64 = 11, f64 = 12,
};

// One metadata value. Integers (and booleans) are held in `i`, floats in `f`; arrays keep
// their elements in `ints`, `floats` or `strings` by element type (nested arrays are refused).
struct GgufValue {
  GgufType type = GgufType::u32;
  GgufType elem = GgufType::u32;  // arrays
  int64_t i = 0;
  double f = 0;
  std::string s;
  std::vector<int64_t> ints;
  std::vector<double> floats;
  std::vector<std::string> strings;
  bool is_int() const;
  bool is_float() const { return type == GgufType::f32 || type == GgufType::f64; }
  size_t size() const;  // arrays: element count
};

// The ggml tensor types we read (values of the file's u32; block layouts in io/gguf_blocks.h).
// We write F32, BF16, Q8_0 and Q4_0.
enum class GgmlType : uint32_t {
  F32 = 0, F16 = 1, Q4_0 = 2, Q4_1 = 3, Q5_0 = 6, Q5_1 = 7, Q8_0 = 8, Q2_K = 10, Q3_K = 11, Q4_K = 12, Q5_K = 13,
  Q6_K = 14, IQ4_NL = 20, IQ4_XS = 23, BF16 = 30
};
const char* to_string(GgmlType t);
std::string readable_ggml_types();  // "F32, F16, ...": the names of every type above
std::optional<GgmlType> ggml_type(uint32_t v);
int64_t ggml_block_values(GgmlType t);  // values per block (1 for F32 / F16 / BF16)
int64_t ggml_block_bytes(GgmlType t);   // bytes per block

struct GgufTensor {
  std::string name;
  std::vector<int64_t> ne;       // ne[0] innermost
  GgmlType type = GgmlType::F32;
  uint64_t offset = 0;           // from the data section's start
  uint64_t nbytes = 0;
  const uint8_t* data = nullptr;
  int64_t numel() const;
  int64_t row_values() const { return ne.empty() ? 1 : ne[0]; }
  int64_t rows() const { return ne.empty() ? 0 : numel() / ne[0]; }
  uint64_t row_bytes() const;
  Shape shape() const;           // outermost first, as safetensors and our weight map write it
};

// Limits beyond which a file is refused rather than trusted.
constexpr uint64_t kGgufMaxString = uint64_t(1) << 24;  // 16 MB (a chat template is a few KB)
constexpr uint64_t kGgufMaxArray = uint64_t(1) << 26;   // 64 M elements (vocabularies are ~10^5)
constexpr uint32_t kGgufMaxDims = 4;

class GgufFile {
 public:
  explicit GgufFile(const std::string& path);  // maps and validates; IoError naming the file

  const std::string& path() const { return file_.path(); }
  uint32_t version() const { return version_; }
  uint64_t alignment() const { return alignment_; }
  const std::map<std::string, GgufValue>& metadata() const { return kv_; }
  const std::vector<GgufTensor>& tensors() const { return tensors_; }
  const GgufTensor* find(const std::string& name) const;
  const MappedFile& mapping() const { return file_; }
  uint64_t data_start() const { return data_start_; }

  // Typed metadata reads: IoError naming the file and key when absent or of another type.
  const GgufValue* value(const std::string& key) const;
  std::string string(const std::string& key) const;
  int64_t integer(const std::string& key) const;
  std::optional<int64_t> integer_or_none(const std::string& key) const;
  std::optional<double> number_or_none(const std::string& key) const;

  // Parses a whole file held in memory (the fuzz target's entry; the constructor's work).
  static GgufFile parse(const uint8_t* data, uint64_t size, const std::string& origin);

 private:
  GgufFile() = default;
  void parse_all(const uint8_t* data, uint64_t size, const std::string& origin);
  MappedFile file_;
  uint32_t version_ = 0;
  uint64_t alignment_ = 32, data_start_ = 0;
  std::map<std::string, GgufValue> kv_;
  std::vector<GgufTensor> tensors_;
  std::unordered_map<std::string, size_t> index_;
};

// A GGUF file being written: metadata, then tensors whose bytes are produced at write time
// (in ggml blocks of their type). Writes path.tmp and renames it (io/output_file.h).
class GgufWriter {
 public:
  void set(const std::string& key, GgufValue v);
  void set_string(const std::string& key, const std::string& s);
  void set_u32(const std::string& key, uint32_t v);
  void set_f32(const std::string& key, float v);
  void set_bool(const std::string& key, bool v);
  // `shape` outermost first; `source` must produce exactly the tensor's bytes.
  void add_tensor(const std::string& name, GgmlType type, const Shape& shape, ByteSource source);
  void write(const std::string& path) const;

 private:
  struct Entry {
    std::string name;
    GgmlType type;
    std::vector<int64_t> ne;
    uint64_t nbytes;
    ByteSource source;
  };
  std::vector<std::pair<std::string, GgufValue>> kv_;
  std::vector<Entry> tensors_;
};

}  // namespace wren
