// io/: our own safetensors reader and writer. The format (huggingface/safetensors):
//
//   [8 bytes: N, unsigned little-endian] [N bytes: JSON header, may end in spaces] [data]
//   header = {"__metadata__": {string: string}?,
//             name: {"dtype": "F32", "shape": [d0, d1, ...], "data_offsets": [begin, end]}, ...}
//
// Offsets are relative to the start of the data section (byte 8 + N). A file is validated in
// full before any tensor is handed out; tensors are then views into the read-only mapping.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "io/mapped_file.h"

namespace wren {

// Element types of the format. Names as in the JSON ("BF16", ...).
enum class Dtype { BOOL, U8, I8, F8_E4M3, F8_E5M2, I16, U16, F16, BF16, I32, U32, F32, F64, I64, U64 };

size_t dtype_size(Dtype t);
const char* to_string(Dtype t);
std::optional<Dtype> parse_dtype(std::string_view name);

using Shape = std::vector<int64_t>;
std::string shape_text(const Shape& s);  // "[64,32]"

// Largest header we accept (the reference implementation's limit).
constexpr uint64_t kMaxSafetensorsHeader = uint64_t(100) << 20;

// One tensor of an open file: a view into the mapping, valid while the file is open.
struct TensorView {
  std::string name;
  Dtype dtype = Dtype::F32;
  Shape shape;
  const uint8_t* data = nullptr;  // aligned to dtype_size only if the writer aligned it (ours does)
  uint64_t nbytes = 0;
  uint64_t file_offset = 0;       // of the first byte in the file, for pread
  int64_t numel() const;
};

// A parsed, validated header: tensors in file (offset) order, offsets made absolute.
struct SafetensorsHeader {
  uint64_t data_start = 0;  // 8 + N
  std::map<std::string, std::string> metadata;
  std::vector<TensorView> tensors;  // data pointers not set
};

// Validates the first bytes of a safetensors file of `file_size` bytes. `head` holds at least
// min(file_size, 8 + N) bytes (pass the whole mapping). Errors name `origin`.
SafetensorsHeader parse_safetensors_header(const uint8_t* head, uint64_t head_size, uint64_t file_size,
                                           const std::string& origin);

// A safetensors file, mapped and validated.
class SafetensorsFile {
 public:
  explicit SafetensorsFile(const std::string& path);

  const std::string& path() const { return file_.path(); }
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  const std::vector<TensorView>& tensors() const { return tensors_; }  // in offset order
  const TensorView* find(const std::string& name) const;  // nullptr when absent
  const TensorView& at(const std::string& name) const;    // IoError naming the file when absent
  const MappedFile& mapping() const { return file_; }

 private:
  MappedFile file_;
  std::map<std::string, std::string> metadata_;
  std::vector<TensorView> tensors_;
  std::unordered_map<std::string, size_t> index_;
};

// Streaming sources of tensor bytes: a source calls the sink with consecutive pieces.
using ByteSink = std::function<void(const void* data, size_t n)>;
using ByteSource = std::function<void(const ByteSink& sink)>;
// A source of two tensors made in one pass (a quantized weight's values and its scales): it
// calls each sink with that tensor's consecutive pieces, interleaved as it likes.
using PairedSource = std::function<void(const ByteSink& first, const ByteSink& second)>;

// Collects tensors, then writes one file. Data is laid out by element size, largest first
// (stable within a size), so every tensor starts at a multiple of its element size given the
// 8-byte aligned data section - the reference writer's rule, with no gaps between tensors.
class OutputFile;

class SafetensorsWriter {
 public:
  void set_metadata(const std::string& key, const std::string& value);
  void add(const std::string& name, Dtype dtype, Shape shape, std::vector<uint8_t> bytes);
  void add(const std::string& name, Dtype dtype, Shape shape, const void* data, size_t n);
  // `source` is called during write() and must produce exactly numel * dtype_size bytes.
  void add(const std::string& name, Dtype dtype, Shape shape, ByteSource source);
  // Two tensors from one source, called once during write(): wherever the layout puts them,
  // the one laid out first is written in sequence and the other at its offset.
  struct Spec {
    std::string name;
    Dtype dtype;
    Shape shape;
  };
  void add_pair(Spec first, Spec second, PairedSource source);

  size_t count() const { return entries_.size(); }
  uint64_t data_bytes() const;  // the data section's size so far
  // Writes path.tmp, fsyncs, renames to path. Throws IoError naming the file or tensor.
  void write(const std::string& path) const;

 private:
  struct Entry {
    std::string name;
    Dtype dtype;
    Shape shape;
    uint64_t nbytes;
    std::shared_ptr<const std::vector<uint8_t>> bytes;  // owned data, or
    ByteSource source;                                   // data produced at write time, or
    std::shared_ptr<const PairedSource> paired;          // shared with the partner entry
    size_t partner = 0;                                  // (paired) the other entry's index
    bool first = false;                                  // (paired) the source's first sink
  };
  uint64_t check(const std::string& name, Dtype dtype, const Shape& shape) const;
  // Runs a paired source: entry i's bytes in sequence, its partner's at their offset.
  void write_pair(OutputFile& out, const std::string& path, size_t i, uint64_t partner_offset) const;
  std::vector<Entry> entries_;
  std::map<std::string, std::string> metadata_;
};

// Bytes of numel elements of `dtype` for `shape`; false on overflow or a negative dimension.
bool tensor_bytes(Dtype dtype, const Shape& shape, uint64_t& bytes);

}  // namespace wren
