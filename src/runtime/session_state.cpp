// A session's state as bytes (runtime/session_state.h): the one list of its mutable buffers,
// and the checked format that carries it.
#include "runtime/session_state.h"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <stdexcept>
#include <type_traits>

#include "config/parse.h"
#include "io/output_file.h"

namespace wren {

namespace {

template <class T>
std::span<std::byte> vector_bytes(std::vector<T>& v) {
  static_assert(std::is_trivially_copyable_v<T>);
  return std::as_writable_bytes(std::span<T>(v));
}

template <class T>
std::span<std::byte> value_bytes(T& v) {
  static_assert(std::is_trivially_copyable_v<T>);
  return std::as_writable_bytes(std::span<T, 1>(&v, 1));
}

// FNV-1a over a byte string: h = (h ^ byte) * 1099511628211.
struct Fnv {
  uint64_t h = 14695981039346656037ull;
  void add(const void* data, size_t n) {
    const auto* p = static_cast<const unsigned char*>(data);
    for (size_t i = 0; i < n; ++i) h = (h ^ p[i]) * 1099511628211ull;
  }
  template <class T>
  void add_value(const T& v) { add(&v, sizeof v); }
};

constexpr char kMagic[8] = {'W', 'R', 'E', 'N', 'S', 'E', 'S', 'S'};
constexpr size_t kHeaderBytes = sizeof kMagic + 4 + 4 + 8 + 8 + 8;

// The session's buffers at `position` tokens and then the caller's.
std::vector<StateBuffer> layout(Session& s, int64_t position, std::span<const StateBuffer> extra) {
  std::vector<StateBuffer> list = s.state(position);
  list.insert(list.end(), extra.begin(), extra.end());
  return list;
}

size_t encoded_bytes(const std::vector<StateBuffer>& list) {
  size_t n = kHeaderBytes;
  for (const StateBuffer& b : list) n += 2 + b.name.size() + 8 + b.bytes.size();
  return n;
}

class Writer {
 public:
  explicit Writer(size_t reserve) { out_.reserve(reserve); }
  void put(const void* data, size_t n) {
    const auto* p = static_cast<const std::byte*>(data);
    out_.insert(out_.end(), p, p + n);
  }
  template <class T>
  void put_value(T v) { put(&v, sizeof v); }
  std::vector<std::byte> take() { return std::move(out_); }

 private:
  std::vector<std::byte> out_;
};

class Reader {
 public:
  explicit Reader(std::span<const std::byte> data) : data_(data) {}
  void get(void* out, size_t n, const std::string& what) {
    if (n > data_.size() - at_)
      throw std::runtime_error("session state: truncated at byte " + std::to_string(at_) + " (reading " + what + ", " +
                               std::to_string(data_.size()) + " bytes in all)");
    if (n > 0) std::memcpy(out, data_.data() + at_, n);  // an empty buffer (no q8 scales) may have no storage
    at_ += n;
  }
  template <class T>
  T get_value(const std::string& what) {
    T v;
    get(&v, sizeof v, what);
    return v;
  }
  size_t at() const { return at_; }
  size_t left() const { return data_.size() - at_; }

 private:
  std::span<const std::byte> data_;
  size_t at_ = 0;
};

std::string hex(uint64_t v) {
  char buf[19];
  std::snprintf(buf, sizeof buf, "0x%016llx", (unsigned long long)v);
  return buf;
}

}  // namespace

std::vector<StateBuffer> Session::state(int64_t position) {
  if (position < 0 || position > context_)
    throw std::out_of_range("session state: position " + std::to_string(position) + " outside 0.." +
                            std::to_string(context_));
  history_.resize(size_t(position));  // within the capacity reserved for the context
  std::vector<StateBuffer> list;
  auto add = [&](std::string name, std::span<std::byte> bytes) { list.push_back({std::move(name), bytes}); };
  add("history", vector_bytes(history_));
  for (size_t i = 0; i < kv_.size(); ++i) {
    const std::string layer = "layer" + std::to_string(i) + ".";
    if (KvCache& kv = kv_[i]; !kv.empty()) {
      const std::string type = std::string(".") + to_string(kv.type());
      add(layer + "kv.count", value_bytes(kv.count));
      add(layer + "kv.k" + type, kv.keys().stored_values());
      add(layer + "kv.k_scales" + type, kv.keys().stored_scales());
      add(layer + "kv.v" + type, kv.values().stored_values());
      add(layer + "kv.v_scales" + type, kv.values().stored_scales());
    }
    if (MlaCache& m = mla_[i]; !m.empty()) {
      const std::string type = std::string(".") + to_string(m.type());
      add(layer + "mla.count", value_bytes(m.count));
      add(layer + "mla.cache" + type, m.rows().stored_values());
      add(layer + "mla.scales" + type, m.rows().stored_scales());
    }
    if (GdnState& g = gdn_[i]; !g.S.empty()) {
      add(layer + "gdn.conv_q", vector_bytes(g.conv_q));
      add(layer + "gdn.conv_k", vector_bytes(g.conv_k));
      add(layer + "gdn.conv_v", vector_bytes(g.conv_v));
      add(layer + "gdn.S", vector_bytes(g.S));
    }
    if (ShortConvState& s = short_conv_[i]; !s.tail.empty()) add(layer + "short_conv.tail", vector_bytes(s.tail));
    if (Mamba2State& s = mamba2_[i]; !s.S.empty()) {
      add(layer + "mamba2.tail", vector_bytes(s.tail));
      add(layer + "mamba2.S", vector_bytes(s.S));
    }
    if (EngramGateState& e = engram_gate_[i]; !e.history.empty()) add(layer + "engram_gate.history", vector_bytes(e.history));
  }
  // The residual state (TokenState rows) and the full layers' kept scores are rebuilt by every
  // token's forward from the buffers above, so they are not state.
  return list;
}

uint64_t model_fingerprint(const Model& m) {
  Fnv f;
  const std::string config = to_json(m.config).dump();
  f.add(config.data(), config.size());
  for (const TensorInfo& t : m.map.tensors) {
    f.add(t.name.data(), t.name.size());
    const kernels::MatrixView v = m.storage->matrix(t);
    f.add_value(v.type), f.add_value(v.rows), f.add_value(v.cols), f.add_value(v.group);
    const size_t bytes = size_t(v.row_bytes() * v.rows), sample = std::min<size_t>(bytes, 64);
    const auto* data = static_cast<const unsigned char*>(v.data);
    if (data) f.add(data, sample), f.add(data + bytes - sample, sample);
  }
  return f.h;
}

std::vector<std::byte> save_session_state(Session& s, std::span<const StateBuffer> extra) {
  const std::vector<StateBuffer> list = layout(s, s.position(), extra);
  Writer w(encoded_bytes(list));
  w.put(kMagic, sizeof kMagic);
  w.put_value(kSessionStateVersion);
  w.put_value(uint32_t(list.size()));
  w.put_value(model_fingerprint(s.model()));
  w.put_value(int64_t(s.context()));
  w.put_value(int64_t(s.position()));
  for (const StateBuffer& b : list) {
    w.put_value(uint16_t(b.name.size()));
    w.put(b.name.data(), b.name.size());
    w.put_value(uint64_t(b.bytes.size()));
  }
  for (const StateBuffer& b : list) w.put(b.bytes.data(), b.bytes.size());
  return w.take();
}

void restore_session_state(Session& s, std::span<const std::byte> data, std::span<const StateBuffer> extra) {
  Reader r(data);
  char magic[sizeof kMagic];
  r.get(magic, sizeof magic, "the magic");
  if (std::memcmp(magic, kMagic, sizeof kMagic) != 0)
    throw std::runtime_error("session state: not a Wren session state (no \"WRENSESS\" at its start)");
  const auto version = r.get_value<uint32_t>("the format version");
  if (version != kSessionStateVersion)
    throw std::runtime_error("session state: format version " + std::to_string(version) + ", this build reads " +
                             std::to_string(kSessionStateVersion));
  const auto count = r.get_value<uint32_t>("the buffer count");
  const auto fingerprint = r.get_value<uint64_t>("the model fingerprint");
  const uint64_t ours = model_fingerprint(s.model());
  if (fingerprint != ours)
    throw std::runtime_error("session state: saved from another model (fingerprint " + hex(fingerprint) +
                             ", this session's model " + s.model().config.name + " has " + hex(ours) + ")");
  const auto context = r.get_value<int64_t>("the context");
  if (context != s.context())
    throw std::runtime_error("session state: saved from a session of context " + std::to_string(context) +
                             ", this session holds " + std::to_string(s.context()) + " tokens");
  const auto position = r.get_value<int64_t>("the position");
  if (position < 0 || position > context)
    throw std::runtime_error("session state: position " + std::to_string(position) + " outside 0.." + std::to_string(context));

  // The layout this session expects, taken without changing it (its own position).
  std::vector<StateBuffer> expected = layout(s, s.position(), extra);
  if (count != expected.size())
    throw std::runtime_error("session state: " + std::to_string(count) + " buffers, this session has " +
                             std::to_string(expected.size()));
  for (size_t i = 0; i < expected.size(); ++i) {
    const StateBuffer& e = expected[i];
    const auto name_length = r.get_value<uint16_t>("buffer " + std::to_string(i) + "'s name");
    std::string name(name_length, '\0');
    r.get(name.data(), name_length, "buffer " + std::to_string(i) + "'s name");
    const auto bytes = r.get_value<uint64_t>("buffer " + name + "'s size");
    const uint64_t want = e.name == "history" ? uint64_t(position) * sizeof(int32_t) : e.bytes.size();
    if (name != e.name || bytes != want)
      throw std::runtime_error("session state: buffer " + std::to_string(i) + " is '" + name + "' of " +
                               std::to_string(bytes) + " bytes, this session has '" + e.name + "' of " +
                               std::to_string(want) + " bytes");
  }
  size_t total = 0;
  for (size_t i = 0; i < expected.size(); ++i)
    total += expected[i].name == "history" ? size_t(position) * sizeof(int32_t) : expected[i].bytes.size();
  if (r.left() != total)
    throw std::runtime_error("session state: " + std::to_string(r.left()) + " bytes of data after the table at byte " +
                             std::to_string(r.at()) + ", the buffers need " + std::to_string(total));

  // Everything matches: now the session changes.
  for (const StateBuffer& b : layout(s, position, extra)) r.get(b.bytes.data(), b.bytes.size(), b.name);
  s.restored();  // every buffer rewritten: whole again, whatever an earlier step left
}

uint64_t session_state_most_bytes(Session& s, std::span<const StateBuffer> extra) {
  const std::vector<StateBuffer> list = layout(s, s.position(), extra);
  return encoded_bytes(list) + uint64_t(s.context() - s.position()) * sizeof(int32_t);
}

uint64_t fnv1a(std::span<const std::byte> bytes) {
  Fnv f;
  f.add(bytes.data(), bytes.size());
  return f.h;
}

void save_session_state_file(Session& s, const std::string& path, std::span<const StateBuffer> extra) {
  const std::vector<std::byte> bytes = save_session_state(s, extra);
  OutputFile out(path);
  out.write(bytes.data(), bytes.size());
  out.commit();
}

void restore_session_state_file(Session& s, const std::string& path, std::span<const StateBuffer> extra) {
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  if (!in) throw std::runtime_error(path + ": cannot open (" + std::strerror(errno) + ")");
  const auto size = uint64_t(in.tellg());
  const uint64_t most = session_state_most_bytes(s, extra);
  if (size > most)
    throw std::runtime_error(path + ": " + std::to_string(size) + " bytes, more than a state of this session can be (" +
                             std::to_string(most) + ")");
  std::vector<std::byte> bytes(size);
  in.seekg(0);
  if (!in.read(reinterpret_cast<char*>(bytes.data()), std::streamsize(size)))
    throw std::runtime_error(path + ": read failed");
  try {
    restore_session_state(s, bytes, extra);
  } catch (const std::runtime_error& e) {
    throw std::runtime_error(path + ": " + e.what());
  }
}

}  // namespace wren
