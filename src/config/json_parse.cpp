// Reading untrusted JSON text (json_reader.h): a SAX reader that builds the ordered value
// itself. nlohmann's own DOM parser for ordered_json looks every new key up linearly in its
// object (O(n^2) for a 200k-token vocabulary) and has no depth limit; this one appends each
// member in O(1), refuses a duplicate key through a hash set per open object, and stops at
// the first value nested deeper than the limit, before anything recursive touches it.
#include <algorithm>
#include <string_view>

#include "config/json_reader.h"
#include "config/read_file.h"

namespace wren {

namespace {

// nlohmann's messages start with "[json.exception.parse_error.101] "; the rest is the reason.
// A token it quotes can be a whole string of the file: keep a bounded prefix.
std::string reason(const std::string& what) {
  std::string s = what;
  if (s.rfind("[json.exception.", 0) == 0) {
    const size_t end = s.find("] ");
    if (end != std::string::npos) s = s.substr(end + 2);
  }
  if (s.size() > 200) s = s.substr(0, 197) + "...";
  return s;
}

class Builder : public nlohmann::json_sax<Json> {
 public:
  explicit Builder(int max_depth) : max_depth_(max_depth) {
    open_.reserve(size_t(std::max(max_depth, 0)));  // frames never move while they fill
  }

  Json take() { return std::move(root_); }
  const std::string& error() const { return error_; }

  bool null() override { return add(Json()); }
  bool boolean(bool v) override { return add(Json(v)); }
  bool number_integer(number_integer_t v) override { return add(Json(v)); }
  bool number_unsigned(number_unsigned_t v) override { return add(Json(v)); }
  bool number_float(number_float_t v, const string_t&) override { return add(Json(v)); }
  bool string(string_t& v) override { return add(Json(std::move(v))); }
  bool binary(binary_t&) override { return fail("binary values are not JSON"); }

  bool start_object(std::size_t) override { return open(true); }
  bool key(string_t& k) override {
    open_.back().key = std::move(k);
    return true;
  }
  bool end_object() override { return close(); }
  bool start_array(std::size_t) override { return open(false); }
  bool end_array() override { return close(); }

  bool parse_error(std::size_t position, const std::string&, const nlohmann::detail::exception& e) override {
    if (error_.empty()) error_ = "invalid JSON at byte " + std::to_string(position) + ": " + reason(e.what());
    return false;
  }

 private:
  // An open container. Object members wait in a vector of (non-const) pairs, which moves
  // without copying when it grows (ordered_map's pair<const string, Json> would copy each
  // value, deep, on every reallocation); the object is built once, reserved, at its end.
  struct Frame {
    bool object = false;
    Json array;                                        // arrays
    std::vector<std::pair<std::string, Json>> members;  // objects
    std::string key;                                   // the member being read
  };

  // A repeated key is an error (nlohmann would keep the last): sorted views of the keys,
  // O(n log n) once per object and no copies (a hash set of 200k keys would copy them all).
  bool unique_keys(const std::vector<std::pair<std::string, Json>>& members) {
    std::vector<std::string_view> keys;
    keys.reserve(members.size());
    for (const auto& m : members) keys.emplace_back(m.first);
    std::sort(keys.begin(), keys.end());
    const auto twice = std::adjacent_find(keys.begin(), keys.end());
    return twice == keys.end() || fail("duplicate key " + json_value_text(Json(std::string(*twice))));
  }

  bool fail(const std::string& message) {
    if (error_.empty()) error_ = message;
    return false;
  }
  bool add(Json v) {
    if (open_.empty()) {
      root_ = std::move(v);
      return true;
    }
    Frame& f = open_.back();
    if (f.object) f.members.emplace_back(std::move(f.key), std::move(v));
    else f.array.get_ref<Json::array_t&>().push_back(std::move(v));
    return true;
  }
  bool open(bool object) {
    if (int(open_.size()) >= max_depth_)
      return fail("nested deeper than " + std::to_string(max_depth_) + " levels");
    open_.emplace_back();
    open_.back().object = object;
    if (!object) open_.back().array = Json::array();
    return true;
  }
  bool close() {
    Frame& f = open_.back();
    Json done = std::move(f.array);
    if (f.object) {
      if (f.members.size() > 1 && !unique_keys(f.members)) return false;
      done = Json::object();
      // ordered_map is a vector of pairs: append without its linear search (key() refused repeats).
      Json::object_t& members = done.get_ref<Json::object_t&>();
      members.reserve(f.members.size());
      for (auto& [k, v] : f.members) members.emplace_back(std::move(k), std::move(v));
    }
    open_.pop_back();
    return add(std::move(done));
  }

  const int max_depth_;
  std::vector<Frame> open_;
  Json root_;
  std::string error_;
};

// The first characters of a value as JSON, at most `limit` of them, walking only as far as
// they reach: a value is never serialised whole (each level adds a character, so the walk
// is at most `limit` deep).
void render(const Json& v, std::string& out, size_t limit) {
  if (out.size() > limit) return;
  if (v.is_string()) {
    const std::string& s = v.get_ref<const std::string&>();
    out += Json(s.substr(0, limit + 1 - std::min(limit, out.size())))
               .dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  } else if (v.is_object() || v.is_array()) {
    const bool object = v.is_object();
    out += object ? '{' : '[';
    bool first = true;
    for (auto it = v.begin(); it != v.end() && out.size() <= limit; ++it, first = false) {
      if (!first) out += ',';
      if (object) {
        render(Json(it.key()), out, limit);
        out += ':';
      }
      render(*it, out, limit);
    }
    out += object ? '}' : ']';
  } else {
    out += v.dump();
  }
}

}  // namespace

std::string json_value_text(const Json& v) {
  constexpr size_t kShown = 60;
  std::string s;
  render(v, s, kShown);
  if (s.size() > kShown) {
    // Cut before a UTF-8 continuation byte, never inside a character: the message must stay
    // valid UTF-8 (the server sends it inside a JSON error body).
    size_t cut = kShown - 3;
    while (cut > 0 && (static_cast<unsigned char>(s[cut]) & 0xC0) == 0x80) --cut;
    s = s.substr(0, cut) + "...";
  }
  const char* type = v.is_null() ? "null" : v.is_boolean() ? "boolean" : v.is_number() ? "number"
                   : v.is_string() ? "string" : v.is_array() ? "list" : "object";
  return s + " (" + type + ")";
}

Json parse_json(std::string_view text, const std::string& origin, const JsonLimits& limits) {
  if (text.size() > limits.max_bytes)
    throw ConfigError(origin + ": " + std::to_string(text.size()) + " bytes is more than the limit of " +
                      std::to_string(limits.max_bytes) + " bytes for this file");
  Builder b(limits.max_depth);
  bool ok = false;
  try {
    ok = Json::sax_parse(text.begin(), text.end(), &b, nlohmann::json::input_format_t::json, true, false);
  } catch (const nlohmann::json::exception& e) {
    throw ConfigError(origin + ": invalid JSON: " + reason(e.what()));
  }
  if (!ok) throw ConfigError(origin + ": " + (b.error().empty() ? std::string("invalid JSON") : b.error()));
  return b.take();
}

Json parse_json_file(const std::string& path, const JsonLimits& limits) {
  BoundedRead r = read_file_at_most(path, limits.max_bytes);
  if (r.status == ReadStatus::cannot_open) throw ConfigError(path + ": cannot open file");
  if (r.status == ReadStatus::too_large)
    throw ConfigError(path + ": larger than the limit of " + std::to_string(limits.max_bytes) +
                      " bytes for this file (not a JSON file of ours?)");
  return parse_json(r.bytes, path, limits);
}

}  // namespace wren
