#include "serve/responses.h"

#include <cstdio>

namespace wren::serve {

using nlohmann::json;

json usage_json(const Usage& u) {
  return {{"prompt_tokens", u.prompt_tokens},
          {"completion_tokens", u.completion_tokens},
          {"total_tokens", u.prompt_tokens + u.completion_tokens},
          {"prompt_tokens_details", {{"cached_tokens", u.cached_tokens}}}};
}

json error_json(const std::string& message, const std::string& type, const std::string& param, const std::string& code) {
  return {{"error",
           {{"message", message},
            {"type", type},
            {"param", param.empty() ? json(nullptr) : json(param)},
            {"code", code.empty() ? json(nullptr) : json(code)}}}};
}

namespace {
json head_json(const ResponseHead& h, const char* object) {
  return {{"id", h.id}, {"object", object}, {"created", h.created}, {"model", h.model}, {"system_fingerprint", "wren"}};
}
json reason(const std::string& r) { return r.empty() ? json(nullptr) : json(r); }
}  // namespace

json completion_json(const ResponseHead& h, const std::string& text, const std::string& finish_reason, const Usage& u) {
  json j = head_json(h, h.chat ? "chat.completion" : "text_completion");
  json choice = {{"index", 0}, {"finish_reason", reason(finish_reason)}, {"logprobs", nullptr}};
  if (h.chat) choice["message"] = {{"role", "assistant"}, {"content", text}};
  else choice["text"] = text;
  j["choices"] = json::array({choice});
  j["usage"] = usage_json(u);
  return j;
}

json chunk_json(const ResponseHead& h, const std::string& text, bool first, const std::string& finish_reason,
                const Usage* usage) {
  json j = head_json(h, h.chat ? "chat.completion.chunk" : "text_completion");
  json choice = {{"index", 0}, {"finish_reason", reason(finish_reason)}, {"logprobs", nullptr}};
  if (h.chat) {
    json delta = json::object();
    if (first) delta["role"] = "assistant";
    if (!text.empty() || first) delta["content"] = text;
    choice["delta"] = delta;
  } else {
    choice["text"] = text;
  }
  j["choices"] = json::array({choice});
  if (usage) j["usage"] = usage_json(*usage);
  return j;
}

json models_json(const std::string& model, int64_t created) {
  return {{"object", "list"},
          {"data", json::array({{{"id", model}, {"object", "model"}, {"created", created}, {"owned_by", "wren"}}})}};
}

namespace {
void metric(std::string& out, const char* name, const char* type, const char* help, double value) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.17g", value);
  out += std::string("# HELP ") + name + " " + help + "\n# TYPE " + name + " " + type + "\n" + name + " " + buf + "\n";
}
}  // namespace

std::string metrics_text(const SchedulerStats& s, const RequestCounts& requests, int64_t rejected) {
  std::string out = "# HELP wren_requests_total Requests answered, by endpoint and HTTP status.\n"
                    "# TYPE wren_requests_total counter\n";
  for (const auto& [key, n] : requests)
    out += "wren_requests_total{endpoint=\"" + key.first + "\",status=\"" + std::to_string(key.second) + "\"} " +
           std::to_string(n) + "\n";
  metric(out, "wren_requests_rejected_total", "counter", "Requests refused with 503 because the queue was full.",
         double(rejected));
  metric(out, "wren_prompt_tokens_total", "counter", "Prompt tokens run through the model (prefill).",
         double(s.prompt_tokens));
  metric(out, "wren_prompt_tokens_reused_total", "counter",
         "Prompt tokens not run again because a slot's state already held them.", double(s.reused_tokens));
  metric(out, "wren_completion_tokens_total", "counter", "Tokens generated.", double(s.completion_tokens));
  metric(out, "wren_decode_steps_total", "counter", "Decode steps (each runs every decoding slot).",
         double(s.decode_steps));
  metric(out, "wren_decode_tokens_per_second", "gauge",
         "Generated tokens per second of decode-step time, all slots together.",
         s.decode_seconds > 0 ? double(s.completion_tokens) / s.decode_seconds : 0.0);
  metric(out, "wren_longest_step_gap_seconds", "gauge",
         "Longest wait of a running stream between two decode steps (another request's prefill chunk runs there).",
         s.longest_step_gap_seconds);
  metric(out, "wren_most_prompt_tokens_between_steps", "gauge",
         "Most prompt tokens of other requests run between two decode steps of a running stream (one chunk at most).",
         double(s.most_prompt_tokens_between_steps));
  metric(out, "wren_queue_length", "gauge", "Requests waiting for a slot.", double(s.queued));
  metric(out, "wren_slots_busy", "gauge", "Slots running a request.", double(s.busy));
  metric(out, "wren_slots_total", "gauge", "Slots (--parallel).", double(s.slots));
  return out;
}

}  // namespace wren::serve
