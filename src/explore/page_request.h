// explore/: what the interactive page (web/explorer/) asks of the cost model, as one JSON
// request and one JSON answer, so that the page (through WebAssembly) and `wren explore`
// compute every figure with the same code: parse_model_config validates, build_report and
// render_json compute and name the figures, seed_formulas substitutes the seed's equations.
//
// Request:  {"model": <model description>, "knobs": {"weights", "head", "kv", "engram",
//            "firing", "v_read", "bandwidth", "engram_storage"}, "context": n, "curve": [n...]}
// Answer:   {"ok": true, "config": <canonical description>, "layers": L, "context_key": "16K",
//            "curve_keys": [...], "report": <render_json's model entry>, "formulas": [...]}
//        or {"ok": false, "error": <the validator's or parser's message>}.
#pragma once

#include <string>

#include "config/json_reader.h"

namespace wren::explore {

// Throws the parser's or validator's error (ConfigError, std::invalid_argument, JSON errors);
// the caller shows its message.
Json answer_page_request(const Json& request);

}  // namespace wren::explore
