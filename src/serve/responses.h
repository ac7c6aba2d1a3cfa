// serve/: the JSON objects the server answers with, shaped as OpenAI's API's so that its
// clients parse them unchanged: completions and their stream chunks, errors, the model
// list; and the Prometheus text of /metrics.
#pragma once

#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <string>

#include "serve/scheduler.h"

namespace wren::serve {

struct Usage {
  int64_t prompt_tokens = 0, completion_tokens = 0, cached_tokens = 0;
};

// What every object of one response shares: its id, creation time and model.
struct ResponseHead {
  std::string id;  // "chatcmpl-..." or "cmpl-..."
  int64_t created = 0;
  std::string model;
  bool chat = false;
};

nlohmann::json usage_json(const Usage& u);
nlohmann::json error_json(const std::string& message, const std::string& type, const std::string& param,
                          const std::string& code = "");
nlohmann::json completion_json(const ResponseHead& h, const std::string& text, const std::string& finish_reason,
                               const Usage& u);
// One stream chunk: `text` as the chat delta (with the role in the first) or completion text;
// a finish_reason and usage in the last.
nlohmann::json chunk_json(const ResponseHead& h, const std::string& text, bool first, const std::string& finish_reason,
                          const Usage* usage);
nlohmann::json models_json(const std::string& model, int64_t created);

// Requests answered, by endpoint and HTTP status.
using RequestCounts = std::map<std::pair<std::string, int>, int64_t>;
std::string metrics_text(const SchedulerStats& s, const RequestCounts& requests, int64_t rejected);

}  // namespace wren::serve
