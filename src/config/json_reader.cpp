#include "config/json_reader.h"

#include "config/read_file.h"

namespace wren {

JsonReader::JsonReader(const Json& j, std::string origin, std::string path)
    : j_(j), origin_(std::move(origin)), path_(std::move(path)) {
  if (!j_.is_object())
    throw ConfigError(origin_ + ": " + (path_.empty() ? std::string("top level") : path_) +
                      ": expected a JSON object, got " + json_value_text(j_));
}

std::string JsonReader::where(const std::string& key) const {
  std::string p = path_.empty() ? key : (key.empty() ? path_ : path_ + "." + key);
  return origin_ + ": " + (p.empty() ? std::string("top level") : p);
}

void JsonReader::fail(const std::string& key, const std::string& message) const {
  throw ConfigError(where(key) + ": " + message);
}

bool JsonReader::has(const std::string& key) const {
  used_.insert(key);
  auto it = j_.find(key);
  return it != j_.end() && !it->is_null();
}

const Json& JsonReader::get(const std::string& key) const {
  auto it = j_.find(key);
  if (it == j_.end()) fail(key, "missing required field");
  used_.insert(key);
  return *it;
}

const Json& JsonReader::raw(const std::string& key) { return get(key); }

JsonReader JsonReader::object(const std::string& key) {
  const Json& v = get(key);
  if (!v.is_object()) fail(key, "expected an object, got " + json_value_text(v));
  return JsonReader(v, origin_, path_.empty() ? key : path_ + "." + key);
}

JsonReader JsonReader::element(const std::string& list_key, size_t i) {
  const Json& v = get(list_key);
  std::string p = (path_.empty() ? list_key : path_ + "." + list_key) + "[" + std::to_string(i) + "]";
  if (!v.is_array() || i >= v.size()) fail(list_key, "expected a list with an element " + std::to_string(i));
  return JsonReader(v[i], origin_, p);
}

int64_t JsonReader::integer64(const std::string& key, int64_t min_value) {
  const Json& v = get(key);
  if (!v.is_number_integer())
    fail(key, "expected an integer, got " + json_value_text(v));
  if (v.is_number_unsigned() && v.get<uint64_t>() > uint64_t(INT64_MAX))
    fail(key, "value " + json_value_text(v) + " is too large");
  int64_t x = v.get<int64_t>();
  if (x < min_value) fail(key, "value " + std::to_string(x) + " must be >= " + std::to_string(min_value));
  return x;
}

int JsonReader::integer(const std::string& key, int64_t min_value, int64_t max_value) {
  int64_t x = integer64(key, min_value);
  if (x > max_value) fail(key, "value " + std::to_string(x) + " must be <= " + std::to_string(max_value));
  return int(x);
}

int JsonReader::integer_or(const std::string& key, int fallback, int64_t min_value, int64_t max_value) {
  if (!has(key)) { used_.insert(key); return fallback; }
  return integer(key, min_value, max_value);
}

double JsonReader::number_or(const std::string& key, double fallback, double min_value, double max_value) {
  if (!has(key)) { used_.insert(key); return fallback; }
  const Json& v = get(key);
  if (!v.is_number()) fail(key, "expected a number, got " + json_value_text(v));
  double x = v.get<double>();
  if (!(x >= min_value && x <= max_value))
    fail(key, "value " + json_value_text(v) + " must be in [" + json_value_text(Json(min_value)) + ", " +
                  json_value_text(Json(max_value)) + "]");
  return x;
}

bool JsonReader::boolean_or(const std::string& key, bool fallback) {
  if (!has(key)) { used_.insert(key); return fallback; }
  const Json& v = get(key);
  if (!v.is_boolean()) fail(key, "expected true or false, got " + json_value_text(v));
  return v.get<bool>();
}

std::string JsonReader::string(const std::string& key) {
  const Json& v = get(key);
  if (!v.is_string()) fail(key, "expected a string, got " + json_value_text(v));
  return v.get<std::string>();
}

std::string JsonReader::string_or(const std::string& key, const std::string& fallback) {
  if (!has(key)) { used_.insert(key); return fallback; }
  return string(key);
}

std::vector<int> JsonReader::int_list(const std::string& key, int64_t min_value) {
  const Json& v = get(key);
  if (!v.is_array()) fail(key, "expected a list of integers, got " + json_value_text(v));
  std::vector<int> out;
  for (size_t i = 0; i < v.size(); ++i) {
    const Json& e = v[i];
    std::string k = key + "[" + std::to_string(i) + "]";
    if (!e.is_number_integer()) fail(k, "expected an integer, got " + json_value_text(e));
    int64_t x = e.get<int64_t>();
    if (x < min_value || x > INT32_MAX) fail(k, "value " + std::to_string(x) + " must be >= " + std::to_string(min_value));
    out.push_back(int(x));
  }
  return out;
}

std::vector<double> JsonReader::number_list(const std::string& key, double min_value, double max_value) {
  const Json& v = get(key);
  if (!v.is_array()) fail(key, "expected a list of numbers, got " + json_value_text(v));
  std::vector<double> out;
  for (size_t i = 0; i < v.size(); ++i) {
    const Json& e = v[i];
    std::string k = key + "[" + std::to_string(i) + "]";
    if (!e.is_number()) fail(k, "expected a number, got " + json_value_text(e));
    const double x = e.get<double>();
    if (!(x >= min_value && x <= max_value))
      fail(k, "value " + json_value_text(e) + " must be in [" + json_value_text(min_value) + ", " + json_value_text(max_value) + "]");
    out.push_back(x);
  }
  return out;
}

int JsonReader::choice(const std::string& key, const std::vector<std::string>& allowed) {
  std::string s = string(key);
  for (size_t i = 0; i < allowed.size(); ++i)
    if (allowed[i] == s) return int(i);
  std::string list;
  for (auto& a : allowed) list += (list.empty() ? "" : ", ") + a;
  fail(key, "unknown value \"" + s + "\"; expected one of: " + list);
}

int JsonReader::choice_or(const std::string& key, const std::vector<std::string>& allowed, int fallback) {
  if (!has(key)) { used_.insert(key); return fallback; }
  return choice(key, allowed);
}

void JsonReader::finish() const {
  for (auto it = j_.begin(); it != j_.end(); ++it)
    if (!used_.count(it.key())) fail(it.key(), "unknown field");
}

}  // namespace wren
