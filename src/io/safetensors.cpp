// Safetensors reading (validate everything, then hand out views) and writing (header padded
// with spaces so the data section starts at a multiple of 8; see safetensors.h).
#include "io/safetensors.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstring>
#include <limits>
#include <numeric>

#include "io/output_file.h"

namespace wren {

namespace {

struct DtypeInfo {
  Dtype dtype;
  const char* name;
  size_t size;
};
constexpr DtypeInfo kDtypes[] = {
    {Dtype::BOOL, "BOOL", 1}, {Dtype::U8, "U8", 1},     {Dtype::I8, "I8", 1},     {Dtype::F8_E4M3, "F8_E4M3", 1},
    {Dtype::F8_E5M2, "F8_E5M2", 1}, {Dtype::I16, "I16", 2}, {Dtype::U16, "U16", 2}, {Dtype::F16, "F16", 2},
    {Dtype::BF16, "BF16", 2}, {Dtype::I32, "I32", 4},   {Dtype::U32, "U32", 4},   {Dtype::F32, "F32", 4},
    {Dtype::F64, "F64", 8},   {Dtype::I64, "I64", 8},   {Dtype::U64, "U64", 8},
};

std::string num(uint64_t x) { return std::to_string(x); }

std::string known_dtypes() {
  std::string s;
  for (auto& d : kDtypes) s += (s.empty() ? "" : ", ") + std::string(d.name);
  return s;
}

// A short rendering of a JSON value for messages (long values are cut).
std::string brief(const nlohmann::json& v) {
  std::string s = v.dump();
  return s.size() > 60 ? s.substr(0, 57) + "..." : s;
}

// The header of a valid file nests at most three deep ({name: {shape: [..]}}); refusing
// deeper input early bounds the work a hostile header can cause.
constexpr int kMaxHeaderDepth = 8;

TensorView parse_entry(const std::string& name, const nlohmann::json& v, uint64_t data_size,
                       const std::string& origin) {
  const std::string where = origin + ": tensor " + name + ": ";
  auto fail = [&](const std::string& msg) { throw IoError(where + msg); };
  if (name.empty()) throw IoError(origin + ": a tensor has an empty name");
  if (!v.is_object()) fail("expected an object with dtype, shape and data_offsets, got " + brief(v));
  for (auto& [key, unused] : v.items())
    if (key != "dtype" && key != "shape" && key != "data_offsets") fail("unknown field \"" + key + "\"");
  for (const char* key : {"dtype", "shape", "data_offsets"})
    if (!v.contains(key)) fail(std::string("missing field \"") + key + "\"");

  TensorView t;
  t.name = name;
  const auto& dt = v["dtype"];
  if (!dt.is_string()) fail("dtype must be a string, got " + brief(dt));
  auto dtype = parse_dtype(dt.get<std::string>());
  if (!dtype) fail("unknown dtype " + brief(dt) + " (known: " + known_dtypes() + ")");
  t.dtype = *dtype;

  const auto& sh = v["shape"];
  if (!sh.is_array()) fail("shape must be a list of dimensions, got " + brief(sh));
  for (const auto& d : sh) {
    if (d.is_number_integer() && !d.is_number_unsigned()) fail("shape " + brief(sh) + " has a negative dimension");
    if (!d.is_number_unsigned() || d.get<uint64_t>() > uint64_t(std::numeric_limits<int64_t>::max()))
      fail("shape " + brief(sh) + " must hold non-negative integers");
    t.shape.push_back(int64_t(d.get<uint64_t>()));
  }

  const auto& off = v["data_offsets"];
  if (!off.is_array() || off.size() != 2 || !off[0].is_number_unsigned() || !off[1].is_number_unsigned())
    fail("data_offsets must be two non-negative integers [begin, end], got " + brief(off));
  const uint64_t begin = off[0].get<uint64_t>(), end = off[1].get<uint64_t>();
  const std::string range = "data_offsets [" + num(begin) + "," + num(end) + "]";
  if (begin > end) fail(range + ": begin is after end");
  if (end > data_size)
    fail(range + ": end is beyond the data section (" + num(data_size) + " bytes; file truncated?)");
  uint64_t bytes = 0;
  if (!tensor_bytes(t.dtype, t.shape, bytes)) fail("shape " + shape_text(t.shape) + " is too large");
  if (end - begin != bytes)
    fail(range + " hold " + num(end - begin) + " bytes, but shape " + shape_text(t.shape) + " of " +
         to_string(t.dtype) + " needs " + num(bytes));
  t.nbytes = bytes;
  t.file_offset = begin;  // made absolute by the caller
  return t;
}

// Passes a source's pieces for one tensor on, refusing more bytes than its shape holds and,
// at the end, fewer.
class EntrySink {
 public:
  EntrySink(const std::string& path, const std::string& name, uint64_t nbytes, std::string shape,
            std::function<void(const void*, size_t)> put)
      : path_(path), name_(name), shape_(std::move(shape)), nbytes_(nbytes), put_(std::move(put)) {}
  ByteSink sink() {
    return [this](const void* data, size_t n) {
      if (n > nbytes_ - produced_)
        throw IoError(path_ + ": tensor " + name_ + ": data source produced more than the " + num(nbytes_) +
                      " bytes of shape " + shape_);
      put_(data, n);
      produced_ += n;
    };
  }
  void check_complete() const {
    if (produced_ != nbytes_)
      throw IoError(path_ + ": tensor " + name_ + ": data source produced " + num(produced_) + " bytes, shape " +
                    shape_ + " needs " + num(nbytes_));
  }

 private:
  const std::string &path_, &name_;
  std::string shape_;
  uint64_t nbytes_, produced_ = 0;
  std::function<void(const void*, size_t)> put_;
};

}  // namespace

size_t dtype_size(Dtype t) { return kDtypes[int(t)].size; }
const char* to_string(Dtype t) { return kDtypes[int(t)].name; }

std::optional<Dtype> parse_dtype(std::string_view name) {
  for (auto& d : kDtypes)
    if (name == d.name) return d.dtype;
  return std::nullopt;
}

std::string shape_text(const Shape& s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) out += (i ? "," : "") + std::to_string(s[i]);
  return out + "]";
}

bool tensor_bytes(Dtype dtype, const Shape& shape, uint64_t& bytes) {
  uint64_t n = dtype_size(dtype);
  for (int64_t d : shape)
    if (d < 0 || __builtin_mul_overflow(n, uint64_t(d), &n)) return false;
  if (n > uint64_t(std::numeric_limits<int64_t>::max())) return false;
  bytes = n;
  return true;
}

int64_t TensorView::numel() const {
  return std::accumulate(shape.begin(), shape.end(), int64_t(1), std::multiplies<int64_t>());
}

SafetensorsHeader parse_safetensors_header(const uint8_t* head, uint64_t head_size, uint64_t file_size,
                                           const std::string& origin) {
  auto fail = [&](const std::string& msg) { throw IoError(origin + ": " + msg); };
  if (file_size < 8)
    fail("file is " + num(file_size) + " bytes, too short for the 8-byte header length (truncated?)");
  if (head_size < 8) fail("internal: fewer than 8 header bytes given");
  uint64_t n = 0;
  for (int i = 0; i < 8; ++i) n |= uint64_t(head[i]) << (8 * i);  // little-endian, any host
  if (n > kMaxSafetensorsHeader)
    fail("header length " + num(n) + " exceeds the limit of " + num(kMaxSafetensorsHeader) +
         " bytes (not a safetensors file?)");
  if (n > file_size - 8)
    fail("header length " + num(n) + " is beyond the file size " + num(file_size) + " (truncated?)");
  if (head_size < 8 + n) fail("internal: header bytes not all given");

  nlohmann::json j;
  try {
    auto limit_depth = [&](int depth, nlohmann::json::parse_event_t, nlohmann::json&) {
      if (depth > kMaxHeaderDepth) throw IoError(origin + ": header is nested too deeply to be a safetensors header");
      return true;
    };
    j = nlohmann::json::parse(head + 8, head + 8 + n, limit_depth);
  } catch (const nlohmann::json::exception& e) {
    fail("header is not valid JSON: " + std::string(e.what()));
  }
  if (!j.is_object()) fail("header is not a JSON object (got " + brief(j) + ")");

  SafetensorsHeader h;
  h.data_start = 8 + n;
  const uint64_t data_size = file_size - h.data_start;
  for (auto& [key, v] : j.items()) {
    if (key == "__metadata__") {
      if (!v.is_object()) fail("__metadata__ must be an object of strings, got " + brief(v));
      for (auto& [mk, mv] : v.items()) {
        if (!mv.is_string()) fail("__metadata__." + mk + " must be a string, got " + brief(mv));
        h.metadata[mk] = mv.get<std::string>();
      }
      continue;
    }
    h.tensors.push_back(parse_entry(key, v, data_size, origin));
  }

  // No two tensors may share a byte: sorted by (begin, end), each must end before the next begins.
  std::sort(h.tensors.begin(), h.tensors.end(), [](const TensorView& a, const TensorView& b) {
    return a.file_offset != b.file_offset ? a.file_offset < b.file_offset : a.nbytes < b.nbytes;
  });
  for (size_t i = 1; i < h.tensors.size(); ++i) {
    const TensorView &a = h.tensors[i - 1], &b = h.tensors[i];
    if (a.file_offset + a.nbytes > b.file_offset)
      fail("tensors " + a.name + " (data_offsets [" + num(a.file_offset) + "," + num(a.file_offset + a.nbytes) +
           "]) and " + b.name + " (data_offsets [" + num(b.file_offset) + "," + num(b.file_offset + b.nbytes) +
           "]) overlap");
  }
  for (auto& t : h.tensors) t.file_offset += h.data_start;
  return h;
}

SafetensorsFile::SafetensorsFile(const std::string& path) : file_(path) {
  SafetensorsHeader h = parse_safetensors_header(file_.data(), file_.size(), file_.size(), path);
  metadata_ = std::move(h.metadata);
  tensors_ = std::move(h.tensors);
  for (size_t i = 0; i < tensors_.size(); ++i) {
    tensors_[i].data = file_.data() + tensors_[i].file_offset;  // offset <= size: at most one past the end
    index_.emplace(tensors_[i].name, i);
  }
}

const TensorView* SafetensorsFile::find(const std::string& name) const {
  auto it = index_.find(name);
  return it == index_.end() ? nullptr : &tensors_[it->second];
}

const TensorView& SafetensorsFile::at(const std::string& name) const {
  const TensorView* t = find(name);
  if (!t) throw IoError(path() + ": no tensor named " + name);
  return *t;
}

// ---- Writer ---------------------------------------------------------------------------

uint64_t SafetensorsWriter::check(const std::string& name, Dtype dtype, const Shape& shape) const {
  auto fail = [&](const std::string& msg) { throw IoError("safetensors writer: tensor " + name + ": " + msg); };
  if (name.empty() || name == "__metadata__") fail("not a valid tensor name");
  for (auto& e : entries_)
    if (e.name == name) fail("added twice");
  uint64_t bytes = 0;
  if (!tensor_bytes(dtype, shape, bytes)) fail("shape " + shape_text(shape) + " is negative or too large");
  return bytes;
}

void SafetensorsWriter::set_metadata(const std::string& key, const std::string& value) { metadata_[key] = value; }

void SafetensorsWriter::add(const std::string& name, Dtype dtype, Shape shape, std::vector<uint8_t> bytes) {
  uint64_t n = check(name, dtype, shape);
  if (bytes.size() != n)
    throw IoError("safetensors writer: tensor " + name + ": " + num(bytes.size()) + " bytes given, shape " +
                  shape_text(shape) + " of " + to_string(dtype) + " needs " + num(n));
  entries_.push_back({name, dtype, std::move(shape), n,
                      std::make_shared<const std::vector<uint8_t>>(std::move(bytes)), nullptr, nullptr, 0, false});
}

void SafetensorsWriter::add(const std::string& name, Dtype dtype, Shape shape, const void* data, size_t n) {
  auto* p = static_cast<const uint8_t*>(data);
  add(name, dtype, std::move(shape), std::vector<uint8_t>(p, p + n));
}

void SafetensorsWriter::add(const std::string& name, Dtype dtype, Shape shape, ByteSource source) {
  uint64_t n = check(name, dtype, shape);
  if (!source) throw IoError("safetensors writer: tensor " + name + ": no data source");
  entries_.push_back({name, dtype, std::move(shape), n, nullptr, std::move(source), nullptr, 0, false});
}

void SafetensorsWriter::add_pair(Spec first, Spec second, PairedSource source) {
  uint64_t na = check(first.name, first.dtype, first.shape), nb = check(second.name, second.dtype, second.shape);
  if (first.name == second.name) throw IoError("safetensors writer: tensor " + first.name + ": added twice");
  if (!source) throw IoError("safetensors writer: tensor " + first.name + ": no data source");
  auto shared = std::make_shared<const PairedSource>(std::move(source));
  const size_t i = entries_.size();
  entries_.push_back({std::move(first.name), first.dtype, std::move(first.shape), na, nullptr, nullptr, shared, i + 1, true});
  entries_.push_back({std::move(second.name), second.dtype, std::move(second.shape), nb, nullptr, nullptr, shared, i, false});
}

uint64_t SafetensorsWriter::data_bytes() const {
  uint64_t total = 0;
  for (auto& e : entries_) total += e.nbytes;
  return total;
}

void SafetensorsWriter::write(const std::string& path) const {
  std::vector<size_t> order(entries_.size());
  std::iota(order.begin(), order.end(), size_t(0));
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return dtype_size(entries_[a].dtype) > dtype_size(entries_[b].dtype);
  });
  std::vector<uint64_t> begin(entries_.size());
  uint64_t offset = 0;
  for (size_t i : order) {
    begin[i] = offset;
    offset += entries_[i].nbytes;
  }

  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata_.empty()) header["__metadata__"] = metadata_;
  for (size_t i = 0; i < entries_.size(); ++i) {
    const Entry& e = entries_[i];
    header[e.name] = {{"dtype", to_string(e.dtype)},
                      {"shape", nlohmann::ordered_json(e.shape)},
                      {"data_offsets", {begin[i], begin[i] + e.nbytes}}};
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');  // 8 + N is a multiple of 8: the data section is aligned

  OutputFile out(path);
  uint8_t len[8];
  for (int i = 0; i < 8; ++i) len[i] = uint8_t(uint64_t(text.size()) >> (8 * i));
  out.write(len, 8);
  out.write(text.data(), text.size());
  const uint64_t data_start = 8 + text.size();
  std::vector<bool> written(entries_.size(), false);
  for (size_t i : order) {
    const Entry& e = entries_[i];
    if (written[i]) {  // the second of a pair, filled while its partner was written
      out.skip(e.nbytes);
    } else if (e.bytes) {
      out.write(e.bytes->data(), e.bytes->size());
    } else if (e.paired) {
      write_pair(out, path, i, data_start + begin[e.partner]);
      written[e.partner] = true;
    } else {
      EntrySink sink(path, e.name, e.nbytes, shape_text(e.shape) + " of " + to_string(e.dtype),
                     [&](const void* data, size_t n) { out.write(data, n); });
      e.source(sink.sink());
      sink.check_complete();
    }
  }
  out.commit();
}

void SafetensorsWriter::write_pair(OutputFile& out, const std::string& path, size_t i, uint64_t partner_offset) const {
  const Entry &e = entries_[i], &partner = entries_[e.partner];
  uint64_t at = partner_offset;
  EntrySink here(path, e.name, e.nbytes, shape_text(e.shape) + " of " + to_string(e.dtype),
                 [&](const void* data, size_t n) { out.write(data, n); });
  EntrySink there(path, partner.name, partner.nbytes, shape_text(partner.shape) + " of " + to_string(partner.dtype),
                  [&](const void* data, size_t n) {
                    out.write_at(at, data, n);
                    at += n;
                  });
  if (e.first) (*e.paired)(here.sink(), there.sink());
  else (*e.paired)(there.sink(), here.sink());
  here.check_complete();
  there.check_complete();
}

}  // namespace wren
