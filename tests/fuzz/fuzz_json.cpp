// libFuzzer target: wren's strict JSON reader (config/json_parse.cpp) against nlohmann's
// parser (json_oracle.h): the same value where nlohmann accepts the bytes within our limits,
// an error naming the file and the byte where it refuses them; any disagreement aborts. The
// bytes are read twice, under the default limits and under tight ones (40 bytes, depth 2).
// links: wren_config
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string_view>

#include "json_oracle.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  for (const wren::JsonLimits& limits : {wren::JsonLimits{}, wren::JsonLimits{.max_bytes = 40, .max_depth = 2}}) {
    const std::string disagreement = wren::json_oracle::json_disagreement(text, limits);
    if (!disagreement.empty()) {
      std::fprintf(stderr, "fuzz_json: %s\n", disagreement.c_str());
      std::abort();
    }
  }
  return 0;
}
