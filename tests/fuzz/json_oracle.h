// The oracle for wren's JSON reader (config/json_parse.cpp): nlohmann's own parser. Both the
// differential test (tests/test_json_differential.cpp) and the fuzz target
// (tests/fuzz/fuzz_json.cpp) ask json_disagreement whether the reader did with a text what
// nlohmann says it should.
#pragma once

#include <algorithm>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "config/json_reader.h"

namespace wren::json_oracle {

// nlohmann's verdict on a text: its value (none where it refuses the text), and what our
// limits look at that nlohmann does not refuse: a key repeated in an object, the nesting depth.
struct Verdict {
  bool accepted = false;
  Json value;
  bool repeated_key = false;
  int depth = 0;
};

inline Verdict nlohmann_verdict(std::string_view text) {
  Verdict v;
  std::vector<std::set<std::string>> open;  // the keys of each open container (none for a list)
  auto watch = [&](int, Json::parse_event_t event, Json& parsed) {
    if (event == Json::parse_event_t::object_start || event == Json::parse_event_t::array_start) {
      open.emplace_back();
      v.depth = std::max(v.depth, int(open.size()));
    } else if (event == Json::parse_event_t::object_end || event == Json::parse_event_t::array_end) {
      open.pop_back();
    } else if (event == Json::parse_event_t::key && !open.back().insert(parsed.get<std::string>()).second) {
      v.repeated_key = true;
    }
    return true;
  };
  try {
    v.value = Json::parse(text.begin(), text.end(), watch);
    v.accepted = true;
  } catch (const Json::exception&) {
  }
  // nlohmann's lexer takes a NUL byte for the end of the text (for C strings), so it accepts
  // "[1]\0" followed by anything. RFC 8259 does not, nor do we: a NUL it accepted can only
  // be after the value (inside a string or between tokens nlohmann refuses it too).
  if (text.find('\0') != std::string_view::npos) v.accepted = false;
  return v;
}

// The value's types in document order: dump() writes 5 alike whether it is unsigned or signed.
inline std::string types(const Json& j) {
  std::string t(1, char('a' + int(j.type())));
  if (j.is_structured())
    for (const Json& e : j) t += types(e);
  return t;
}

// "" when parse_json did with `text` what nlohmann says: the same value (same dump, same
// types) where nlohmann accepts it within our limits; a ConfigError naming the origin (and,
// but for the size limit, the byte) where nlohmann refuses it or it breaks a limit. Otherwise
// what went wrong.
inline std::string json_disagreement(std::string_view text, const JsonLimits& limits = {}) {
  const Verdict oracle = nlohmann_verdict(text);
  const bool too_large = text.size() > limits.max_bytes;
  const bool within = oracle.accepted && !oracle.repeated_key && oracle.depth <= limits.max_depth && !too_large;
  try {
    const Json mine = parse_json(text, "origin.json", limits);
    if (!within) return "accepted a text that nlohmann refuses or that breaks a limit";
    if (mine.dump() != oracle.value.dump()) return "value " + mine.dump() + " but nlohmann reads " + oracle.value.dump();
    if (types(mine) != types(oracle.value)) return "types " + types(mine) + " but nlohmann's are " + types(oracle.value);
  } catch (const ConfigError& e) {
    const std::string what = e.what();
    if (within) return "refused what nlohmann accepts: " + what;
    if (what.rfind("origin.json: ", 0) != 0) return "an error that does not name the file: " + what;
    if (!too_large && what.find(" at byte ") == std::string::npos) return "an error without its byte: " + what;
  }
  return "";
}

}  // namespace wren::json_oracle
