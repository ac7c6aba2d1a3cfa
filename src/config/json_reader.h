// config/: strict reading of untrusted JSON. Every read names its field path, so an error
// says where and what was expected; fields nobody read are reported as unknown.
#pragma once

#include <nlohmann/json.hpp>

#include <set>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace wren {

using Json = nlohmann::ordered_json;

// An error in a configuration or data file: "origin: path: message".
struct ConfigError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// A view of one JSON object at a path. Reads mark keys as used; finish() rejects the rest.
class JsonReader {
 public:
  JsonReader(const Json& j, std::string origin, std::string path);

  bool has(const std::string& key) const;  // present and not null (marks the key as read)
  const Json& raw(const std::string& key);  // marks as used; the key must exist
  JsonReader object(const std::string& key);
  JsonReader element(const std::string& list_key, size_t i);  // the i-th object of a list field

  int integer(const std::string& key, int64_t min_value, int64_t max_value = INT32_MAX);
  int integer_or(const std::string& key, int fallback, int64_t min_value, int64_t max_value = INT32_MAX);
  int64_t integer64(const std::string& key, int64_t min_value);
  double number_or(const std::string& key, double fallback, double min_value, double max_value);
  bool boolean_or(const std::string& key, bool fallback);
  std::string string(const std::string& key);
  std::string string_or(const std::string& key, const std::string& fallback);
  std::vector<int> int_list(const std::string& key, int64_t min_value);
  std::vector<double> number_list(const std::string& key, double min_value, double max_value);

  // A string field that must be one of `allowed`; returns its index.
  int choice(const std::string& key, const std::vector<std::string>& allowed);
  int choice_or(const std::string& key, const std::vector<std::string>& allowed, int fallback);

  std::string where(const std::string& key) const;  // "origin: path.key"
  [[noreturn]] void fail(const std::string& key, const std::string& message) const;
  void finish() const;  // unknown keys are errors

  const Json& json() const { return j_; }

 private:
  const Json& get(const std::string& key) const;
  const Json& j_;
  std::string origin_, path_;
  mutable std::set<std::string> used_;
};

std::string json_value_text(const Json& v);  // a short rendering of a value for messages

// Limits every JSON read of untrusted text obeys (config/json_parse.cpp). The depth bounds the
// recursion of everything that walks a value afterwards (copies, dumps, destructors); the size
// bounds what a file can make us allocate before a single field is read.
struct JsonLimits {
  uint64_t max_bytes = uint64_t(256) << 20;  // a real tokenizer.json is 2-30 MB
  int max_depth = 64;                         // our files nest 6 levels at most
};
inline constexpr JsonLimits kConfigJsonLimits{.max_bytes = uint64_t(4) << 20, .max_depth = 64};

// Parses `text` strictly (no duplicate keys, no comments, finite numbers) into an ordered
// value, in time linear in its size; any fault is a ConfigError "origin: invalid JSON ...".
Json parse_json(std::string_view text, const std::string& origin, const JsonLimits& limits = {});
// The file read with limits.max_bytes at most, then parse_json; ConfigError naming the file.
Json parse_json_file(const std::string& path, const JsonLimits& limits = {});

}  // namespace wren
