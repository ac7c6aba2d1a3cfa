// GGUF reading (bounds-checked cursor over the mapping) and writing (gguf.h has the layout).
#include "io/gguf.h"

#include <algorithm>
#include <cstring>

#include "io/output_file.h"

namespace wren {

namespace {

std::string num(uint64_t x) { return std::to_string(x); }

// A cursor over untrusted bytes: every read checks that the bytes exist.
class Cursor {
 public:
  Cursor(const uint8_t* p, uint64_t n, const std::string& origin) : p_(p), n_(n), origin_(origin) {}
  [[noreturn]] void fail(const std::string& what) const {
    throw IoError(origin_ + ": " + what + " (at byte " + num(at_) + " of " + num(n_) + ")");
  }
  void need(uint64_t k, const std::string& what) const {
    if (k > n_ - at_) fail(what + ": " + num(k) + " bytes needed, " + num(n_ - at_) + " left in the file");
  }
  template <class T>
  T get(const std::string& what) {
    need(sizeof(T), what);
    T v;
    std::memcpy(&v, p_ + at_, sizeof(T));
    at_ += sizeof(T);
    return v;
  }
  std::string string(const std::string& what) {
    const uint64_t len = get<uint64_t>(what + " length");
    if (len > kGgufMaxString) fail(what + ": string of " + num(len) + " bytes, more than the limit " + num(kGgufMaxString));
    need(len, what);
    std::string s(reinterpret_cast<const char*>(p_ + at_), size_t(len));
    at_ += len;
    return s;
  }
  uint64_t at() const { return at_; }
  uint64_t left() const { return n_ - at_; }

 private:
  const uint8_t* p_;
  uint64_t n_, at_ = 0;
  const std::string& origin_;
};

size_t scalar_size(GgufType t) {
  switch (t) {
    case GgufType::u8: case GgufType::i8: case GgufType::boolean: return 1;
    case GgufType::u16: case GgufType::i16: return 2;
    case GgufType::u32: case GgufType::i32: case GgufType::f32: return 4;
    case GgufType::u64: case GgufType::i64: case GgufType::f64: return 8;
    default: return 0;
  }
}

// One scalar of `type` into v.i / v.f / v.s.
void read_scalar(Cursor& c, GgufType type, GgufValue& v, const std::string& what) {
  switch (type) {
    case GgufType::u8: v.i = c.get<uint8_t>(what); break;
    case GgufType::i8: v.i = c.get<int8_t>(what); break;
    case GgufType::u16: v.i = c.get<uint16_t>(what); break;
    case GgufType::i16: v.i = c.get<int16_t>(what); break;
    case GgufType::u32: v.i = c.get<uint32_t>(what); break;
    case GgufType::i32: v.i = c.get<int32_t>(what); break;
    case GgufType::i64: v.i = c.get<int64_t>(what); break;
    case GgufType::u64: {
      const uint64_t u = c.get<uint64_t>(what);
      if (u > uint64_t(INT64_MAX)) c.fail(what + ": u64 value " + num(u) + " is beyond the range we accept (2^63 - 1)");
      v.i = int64_t(u);
      break;
    }
    case GgufType::boolean: {
      const uint8_t b = c.get<uint8_t>(what);
      if (b > 1) c.fail(what + ": bool byte " + num(b) + ", expected 0 or 1");
      v.i = b;
      break;
    }
    case GgufType::f32: v.f = c.get<float>(what); break;
    case GgufType::f64: v.f = c.get<double>(what); break;
    case GgufType::string: v.s = c.string(what); break;
    default: c.fail(what + ": value type " + num(uint32_t(type)) + " is not a GGUF scalar type (0..8, 10..12)");
  }
}

GgufType read_type(Cursor& c, const std::string& what) {
  const uint32_t t = c.get<uint32_t>(what + " type");
  if (t > 12) c.fail(what + ": value type " + num(t) + ", expected 0..12");
  return GgufType(t);
}

GgufValue read_value(Cursor& c, const std::string& what) {
  GgufValue v;
  v.type = read_type(c, what);
  if (v.type != GgufType::array) {
    read_scalar(c, v.type, v, what);
    return v;
  }
  v.elem = read_type(c, what + " element");
  if (v.elem == GgufType::array) c.fail(what + ": nested arrays are not supported");
  const uint64_t n = c.get<uint64_t>(what + " count");
  // Every element takes at least one byte (a string at least 8): a count the file cannot hold is refused.
  const uint64_t min_bytes = v.elem == GgufType::string ? 8 : scalar_size(v.elem);
  if (n > kGgufMaxArray || n > c.left() / min_bytes)
    c.fail(what + ": array of " + num(n) + " elements does not fit the file (or exceeds " + num(kGgufMaxArray) + ")");
  GgufValue e;
  for (uint64_t k = 0; k < n; ++k) {
    read_scalar(c, v.elem, e, what);
    if (v.elem == GgufType::string) v.strings.push_back(std::move(e.s));
    else if (v.elem == GgufType::f32 || v.elem == GgufType::f64) v.floats.push_back(e.f);
    else v.ints.push_back(e.i);
  }
  return v;
}

}  // namespace

bool GgufValue::is_int() const {
  switch (type) {
    case GgufType::u8: case GgufType::i8: case GgufType::u16: case GgufType::i16: case GgufType::u32:
    case GgufType::i32: case GgufType::u64: case GgufType::i64: return true;
    default: return false;
  }
}

size_t GgufValue::size() const { return strings.size() + ints.size() + floats.size(); }

namespace {
constexpr GgmlType kReadTypes[] = {GgmlType::F32,  GgmlType::F16,  GgmlType::BF16, GgmlType::Q8_0,   GgmlType::Q4_0,
                                   GgmlType::Q4_1, GgmlType::Q5_0, GgmlType::Q5_1, GgmlType::Q2_K,   GgmlType::Q3_K,
                                   GgmlType::Q4_K, GgmlType::Q5_K, GgmlType::Q6_K, GgmlType::IQ4_NL, GgmlType::IQ4_XS};
}  // namespace

const char* to_string(GgmlType t) {
  switch (t) {
    case GgmlType::F32: return "F32";
    case GgmlType::F16: return "F16";
    case GgmlType::Q4_0: return "Q4_0";
    case GgmlType::Q4_1: return "Q4_1";
    case GgmlType::Q5_0: return "Q5_0";
    case GgmlType::Q5_1: return "Q5_1";
    case GgmlType::Q8_0: return "Q8_0";
    case GgmlType::Q2_K: return "Q2_K";
    case GgmlType::Q3_K: return "Q3_K";
    case GgmlType::Q4_K: return "Q4_K";
    case GgmlType::Q5_K: return "Q5_K";
    case GgmlType::Q6_K: return "Q6_K";
    case GgmlType::IQ4_NL: return "IQ4_NL";
    case GgmlType::IQ4_XS: return "IQ4_XS";
    case GgmlType::BF16: return "BF16";
  }
  return "?";
}

std::string readable_ggml_types() {
  std::string s;
  for (GgmlType t : kReadTypes) s += (s.empty() ? "" : ", ") + std::string(to_string(t));
  return s;
}

std::optional<GgmlType> ggml_type(uint32_t v) {
  for (GgmlType t : kReadTypes)
    if (uint32_t(t) == v) return t;
  return std::nullopt;
}

int64_t ggml_block_values(GgmlType t) {
  switch (t) {
    case GgmlType::F32: case GgmlType::F16: case GgmlType::BF16: return 1;
    case GgmlType::Q4_0: case GgmlType::Q4_1: case GgmlType::Q5_0: case GgmlType::Q5_1: case GgmlType::Q8_0:
    case GgmlType::IQ4_NL: return 32;
    case GgmlType::Q2_K: case GgmlType::Q3_K: case GgmlType::Q4_K: case GgmlType::Q5_K: case GgmlType::Q6_K:
    case GgmlType::IQ4_XS: return 256;
  }
  return 1;
}

int64_t ggml_block_bytes(GgmlType t) {
  switch (t) {
    case GgmlType::F32: return 4;
    case GgmlType::F16: case GgmlType::BF16: return 2;
    case GgmlType::Q4_0: return 18;    // f16 d, 16 bytes of nibbles
    case GgmlType::Q4_1: return 20;    // f16 d, f16 m, 16 bytes of nibbles
    case GgmlType::Q5_0: return 22;    // f16 d, 4 bytes of fifth bits, 16 bytes of nibbles
    case GgmlType::Q5_1: return 24;    // f16 d, f16 m, 4 bytes of fifth bits, 16 bytes of nibbles
    case GgmlType::Q8_0: return 34;    // f16 d, 32 int8
    case GgmlType::Q2_K: return 84;    // 16 bytes of 4-bit scales / mins, 64 bytes of 2-bit values, f16 d, f16 dmin
    case GgmlType::Q3_K: return 110;   // 32 bytes of high bits, 64 bytes of 2-bit values, 12 bytes of 6-bit scales, f16 d
    case GgmlType::Q4_K: return 144;   // f16 d, f16 dmin, 12 bytes of 6-bit scales / mins, 128 bytes of nibbles
    case GgmlType::Q5_K: return 176;   // as Q4_K + 32 bytes of fifth bits
    case GgmlType::Q6_K: return 210;   // 128 bytes low nibbles, 64 bytes high 2 bits, 16 int8 scales, f16 d
    case GgmlType::IQ4_NL: return 18;  // f16 d, 16 bytes of nibbles (indices into a 16-entry table)
    case GgmlType::IQ4_XS: return 136; // f16 d, u16 + 4 bytes of 6-bit scales, 128 bytes of nibbles
  }
  return 0;
}

int64_t GgufTensor::numel() const {
  int64_t n = 1;
  for (int64_t d : ne) n *= d;
  return n;
}

uint64_t GgufTensor::row_bytes() const { return uint64_t(row_values() / ggml_block_values(type) * ggml_block_bytes(type)); }

Shape GgufTensor::shape() const { return Shape(ne.rbegin(), ne.rend()); }

GgufFile::GgufFile(const std::string& path) {
  file_ = MappedFile(path);
  parse_all(file_.data(), file_.size(), path);
}

GgufFile GgufFile::parse(const uint8_t* data, uint64_t size, const std::string& origin) {
  GgufFile f;
  f.parse_all(data, size, origin);
  return f;
}

void GgufFile::parse_all(const uint8_t* data, uint64_t size, const std::string& origin) {
  Cursor c(data, size, origin);
  const uint32_t magic = c.get<uint32_t>("magic");
  if (magic != 0x46554747u) c.fail("not a GGUF file (the first 4 bytes are not \"GGUF\")");
  version_ = c.get<uint32_t>("version");
  if (version_ != 2 && version_ != 3) c.fail("GGUF version " + num(version_) + ", expected 2 or 3");
  const uint64_t n_tensors = c.get<uint64_t>("tensor_count"), n_kv = c.get<uint64_t>("kv_count");
  // A key-value pair takes at least 8 + 4 + 1 bytes; a tensor info at least 8 + 4 + 8 + 4 + 8.
  if (n_kv > c.left() / 13) c.fail("kv_count " + num(n_kv) + " does not fit the file");
  if (n_tensors > c.left() / 32) c.fail("tensor_count " + num(n_tensors) + " does not fit the file");
  for (uint64_t k = 0; k < n_kv; ++k) {
    std::string key = c.string("metadata key " + num(k));
    GgufValue v = read_value(c, "metadata " + key);
    if (!kv_.emplace(key, std::move(v)).second) c.fail("metadata key " + key + " appears twice");
  }
  if (const GgufValue* a = value("general.alignment")) {
    if (!a->is_int() || a->i < 1 || a->i > 65536 || (a->i & (a->i - 1)))
      throw IoError(origin + ": general.alignment must be a power of two in [1, 65536]");
    alignment_ = uint64_t(a->i);
  }
  for (uint64_t k = 0; k < n_tensors; ++k) {
    GgufTensor t;
    t.name = c.string("tensor " + num(k) + " name");
    const std::string what = "tensor " + t.name;
    const uint32_t dims = c.get<uint32_t>(what + " n_dims");
    if (dims < 1 || dims > kGgufMaxDims) c.fail(what + ": n_dims " + num(dims) + ", expected 1.." + num(kGgufMaxDims));
    uint64_t numel = 1;
    for (uint32_t d = 0; d < dims; ++d) {
      const uint64_t n = c.get<uint64_t>(what + " ne");
      if (n < 1 || n > (uint64_t(1) << 40) || numel > (uint64_t(1) << 48) / n)
        c.fail(what + ": dimension " + num(d) + " = " + num(n) + " (expected >= 1, total elements < 2^48)");
      numel *= n;
      t.ne.push_back(int64_t(n));
    }
    const uint32_t type = c.get<uint32_t>(what + " type");
    auto gt = ggml_type(type);
    if (!gt) c.fail(what + ": ggml type " + num(type) + " is not one we read (" + readable_ggml_types() + ")");
    t.type = *gt;
    if (t.ne[0] % ggml_block_values(t.type))
      c.fail(what + ": row length ne[0] = " + num(uint64_t(t.ne[0])) + " is not a multiple of the " + to_string(t.type) +
             " block of " + num(uint64_t(ggml_block_values(t.type))));
    t.offset = c.get<uint64_t>(what + " offset");
    if (t.offset % alignment_) c.fail(what + ": offset " + num(t.offset) + " is not a multiple of the alignment " + num(alignment_));
    t.nbytes = numel / uint64_t(ggml_block_values(t.type)) * uint64_t(ggml_block_bytes(t.type));
    if (!index_.emplace(t.name, tensors_.size()).second) c.fail(what + ": the name appears twice");
    tensors_.push_back(std::move(t));
  }
  data_start_ = (c.at() + alignment_ - 1) / alignment_ * alignment_;
  if (data_start_ > size && n_tensors) c.fail("the data section starts at " + num(data_start_) + ", beyond the end");
  const uint64_t data_size = size - std::min(size, data_start_);
  std::vector<const GgufTensor*> by_offset;
  for (GgufTensor& t : tensors_) {
    if (t.offset > data_size || t.nbytes > data_size - t.offset)
      throw IoError(origin + ": tensor " + t.name + ": bytes [" + num(t.offset) + ", " + num(t.offset) + " + " +
                    num(t.nbytes) + ") lie outside the data section of " + num(data_size) + " bytes");
    t.data = data + data_start_ + t.offset;
    by_offset.push_back(&t);
  }
  std::sort(by_offset.begin(), by_offset.end(), [](auto* a, auto* b) { return a->offset < b->offset; });
  for (size_t k = 1; k < by_offset.size(); ++k)
    if (by_offset[k - 1]->offset + by_offset[k - 1]->nbytes > by_offset[k]->offset)
      throw IoError(origin + ": tensors " + by_offset[k - 1]->name + " and " + by_offset[k]->name + " overlap");
}

const GgufTensor* GgufFile::find(const std::string& name) const {
  auto it = index_.find(name);
  return it == index_.end() ? nullptr : &tensors_[it->second];
}

const GgufValue* GgufFile::value(const std::string& key) const {
  auto it = kv_.find(key);
  return it == kv_.end() ? nullptr : &it->second;
}

std::string GgufFile::string(const std::string& key) const {
  const GgufValue* v = value(key);
  if (!v || v->type != GgufType::string) throw IoError(path() + ": metadata " + key + ": expected a string" + (v ? "" : ", missing"));
  return v->s;
}

int64_t GgufFile::integer(const std::string& key) const {
  auto v = integer_or_none(key);
  if (!v) throw IoError(path() + ": metadata " + key + ": missing (expected an integer)");
  return *v;
}

std::optional<int64_t> GgufFile::integer_or_none(const std::string& key) const {
  const GgufValue* v = value(key);
  if (!v) return std::nullopt;
  if (!v->is_int()) throw IoError(path() + ": metadata " + key + ": expected an integer");
  return v->i;
}

std::optional<double> GgufFile::number_or_none(const std::string& key) const {
  const GgufValue* v = value(key);
  if (!v) return std::nullopt;
  if (v->is_float()) return v->f;
  if (v->is_int()) return double(v->i);
  throw IoError(path() + ": metadata " + key + ": expected a number");
}

// ---- Writing ------------------------------------------------------------------------------

namespace {

struct Out {
  OutputFile& f;
  template <class T>
  void put(T v) { f.write(&v, sizeof v); }
  void str(const std::string& s) { put<uint64_t>(s.size()), f.write(s.data(), s.size()); }
  void scalar(GgufType t, const GgufValue& v, size_t k = SIZE_MAX) {
    const bool el = k != SIZE_MAX;
    const bool is_float = t == GgufType::f32 || t == GgufType::f64;
    const int64_t i = !el ? v.i : (is_float || t == GgufType::string) ? 0 : v.ints[k];
    const double fl = !el ? v.f : is_float ? v.floats[k] : 0.0;
    switch (t) {
      case GgufType::u8: case GgufType::boolean: put<uint8_t>(uint8_t(i)); break;
      case GgufType::i8: put<int8_t>(int8_t(i)); break;
      case GgufType::u16: put<uint16_t>(uint16_t(i)); break;
      case GgufType::i16: put<int16_t>(int16_t(i)); break;
      case GgufType::u32: put<uint32_t>(uint32_t(i)); break;
      case GgufType::i32: put<int32_t>(int32_t(i)); break;
      case GgufType::u64: put<uint64_t>(uint64_t(i)); break;
      case GgufType::i64: put<int64_t>(i); break;
      case GgufType::f32: put<float>(float(fl)); break;
      case GgufType::f64: put<double>(fl); break;
      case GgufType::string: str(el ? v.strings[k] : v.s); break;
      case GgufType::array: break;
    }
  }
  void value(const GgufValue& v) {
    put<uint32_t>(uint32_t(v.type));
    if (v.type != GgufType::array) return scalar(v.type, v);
    put<uint32_t>(uint32_t(v.elem));
    put<uint64_t>(v.size());
    for (size_t k = 0; k < v.size(); ++k) scalar(v.elem, v, k);
  }
};

}  // namespace

void GgufWriter::set(const std::string& key, GgufValue v) {
  for (auto& [k, old] : kv_)
    if (k == key) {
      old = std::move(v);
      return;
    }
  kv_.emplace_back(key, std::move(v));
}
namespace {
GgufValue scalar_value(GgufType type, int64_t i, double f, std::string s = {}) {
  GgufValue v;
  v.type = type, v.i = i, v.f = f, v.s = std::move(s);
  return v;
}
}  // namespace

void GgufWriter::set_string(const std::string& key, const std::string& s) { set(key, scalar_value(GgufType::string, 0, 0, s)); }
void GgufWriter::set_u32(const std::string& key, uint32_t x) { set(key, scalar_value(GgufType::u32, x, 0)); }
void GgufWriter::set_f32(const std::string& key, float x) { set(key, scalar_value(GgufType::f32, 0, x)); }
void GgufWriter::set_bool(const std::string& key, bool x) { set(key, scalar_value(GgufType::boolean, x, 0)); }

void GgufWriter::add_tensor(const std::string& name, GgmlType type, const Shape& shape, ByteSource source) {
  Entry e{name, type, std::vector<int64_t>(shape.rbegin(), shape.rend()), 0, std::move(source)};
  if (e.ne.empty() || e.ne[0] % ggml_block_values(type))
    throw IoError("tensor " + name + " " + shape_text(shape) + ": the last dimension is not a multiple of the " +
                  to_string(type) + " block");
  int64_t n = 1;
  for (int64_t d : e.ne) n *= d;
  e.nbytes = uint64_t(n / ggml_block_values(type) * ggml_block_bytes(type));
  tensors_.push_back(std::move(e));
}

void GgufWriter::write(const std::string& path) const {
  constexpr uint64_t kAlign = 32;
  OutputFile f(path);
  Out o{f};
  o.put<uint32_t>(0x46554747u), o.put<uint32_t>(3);
  o.put<uint64_t>(tensors_.size()), o.put<uint64_t>(kv_.size());
  for (auto& [k, v] : kv_) o.str(k), o.value(v);
  uint64_t offset = 0;
  for (const Entry& e : tensors_) {
    o.str(e.name);
    o.put<uint32_t>(uint32_t(e.ne.size()));
    for (int64_t d : e.ne) o.put<uint64_t>(uint64_t(d));
    o.put<uint32_t>(uint32_t(e.type));
    o.put<uint64_t>(offset);
    offset += (e.nbytes + kAlign - 1) / kAlign * kAlign;
  }
  static const uint8_t zeros[kAlign] = {};
  auto pad = [&] {
    if (f.written() % kAlign) f.write(zeros, size_t(kAlign - f.written() % kAlign));
  };
  pad();
  for (const Entry& e : tensors_) {
    const uint64_t start = f.written();
    e.source([&](const void* p, size_t n) { f.write(p, n); });
    if (f.written() - start != e.nbytes)
      throw IoError(path + ": tensor " + e.name + ": " + num(f.written() - start) + " bytes produced, expected " + num(e.nbytes));
    pad();
  }
  f.commit();
}

}  // namespace wren
