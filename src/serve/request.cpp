#include "serve/request.h"

#include "config/json_reader.h"

namespace wren::serve {

namespace {

// Read by config/'s strict reader: a depth limit (a nesting bomb in a body is refused before
// anything recursive walks it), and messages quote a bounded prefix of a value, never all of it.
using json = Json;

RequestError bad(const std::string& field, const std::string& what) { return RequestError(400, field, field + ": " + what); }

// The value of `key`, or nullptr when absent or null (OpenAI's clients send null for "unset").
const json* field(const json& body, const char* key) {
  const auto it = body.find(key);
  return it == body.end() || it->is_null() ? nullptr : &*it;
}

double number(const json& v, const std::string& name, double lo, double hi) {
  if (!v.is_number()) throw bad(name, "expected a number, got " + json_value_text(v));
  const double x = v.get<double>();
  if (!(x >= lo && x <= hi)) throw bad(name, json_value_text(v) + " is outside [" + json(lo).dump() + ", " + json(hi).dump() + "]");
  return x;
}

int64_t integer(const json& v, const std::string& name, int64_t lo, int64_t hi) {
  if (!v.is_number_integer()) throw bad(name, "expected an integer, got " + json_value_text(v));
  const int64_t x = v.is_number_unsigned() && v.get<uint64_t>() > uint64_t(INT64_MAX) ? INT64_MAX : v.get<int64_t>();
  if (x < lo || x > hi) throw bad(name, json_value_text(v) + " is outside [" + std::to_string(lo) + ", " + std::to_string(hi) + "]");
  return x;
}

std::string string(const json& v, const std::string& name) {
  if (!v.is_string()) throw bad(name, "expected a string, got " + json_value_text(v));
  return v.get<std::string>();
}

// A message's content: a string, or a list of parts of which only text parts are understood.
std::string content_text(const json& v, const std::string& name) {
  if (v.is_string()) return v.get<std::string>();
  if (!v.is_array()) throw bad(name, "expected a string or a list of text parts, got " + json_value_text(v));
  std::string text;
  for (size_t i = 0; i < v.size(); ++i) {
    const std::string part = name + "[" + std::to_string(i) + "]";
    if (!v[i].is_object()) throw bad(part, "expected an object {\"type\": \"text\", \"text\": ...}");
    const json* type = field(v[i], "type");
    if (!type || string(*type, part + ".type") != "text") throw bad(part + ".type", "only \"text\" parts are supported");
    const json* t = field(v[i], "text");
    if (!t) throw bad(part + ".text", "missing");
    text += string(*t, part + ".text");
  }
  return text;
}

std::vector<ChatMessage> read_messages(const json& body) {
  const json* ms = field(body, "messages");
  if (!ms) throw bad("messages", "missing");
  if (!ms->is_array() || ms->empty()) throw bad("messages", "expected a non-empty list of messages");
  std::vector<ChatMessage> out;
  for (size_t i = 0; i < ms->size(); ++i) {
    const std::string name = "messages[" + std::to_string(i) + "]";
    const json& m = (*ms)[i];
    if (!m.is_object()) throw bad(name, "expected an object with role and content");
    const json* role = field(m, "role");
    if (!role) throw bad(name + ".role", "missing");
    ChatMessage msg{string(*role, name + ".role"), ""};
    if (msg.role == "developer") msg.role = "system";  // OpenAI's newer name for it
    if (msg.role != "system" && msg.role != "user" && msg.role != "assistant")
      throw bad(name + ".role", json_value_text(*role) + " is not one of system, developer, user, assistant");
    const json* content = field(m, "content");
    if (!content && msg.role != "assistant") throw bad(name + ".content", "missing");
    if (content) msg.content = content_text(*content, name + ".content");
    out.push_back(std::move(msg));
  }
  return out;
}

std::string read_prompt(const json& body) {
  const json* p = field(body, "prompt");
  if (!p) throw bad("prompt", "missing");
  if (p->is_string()) return p->get<std::string>();
  if (p->is_array() && p->size() == 1 && (*p)[0].is_string()) return (*p)[0].get<std::string>();
  throw bad("prompt", "expected a string (or a list of one string), got " + json_value_text(*p));
}

std::vector<std::string> read_stop(const json& body) {
  const json* s = field(body, "stop");
  if (!s) return {};
  std::vector<std::string> out;
  if (s->is_string()) out.push_back(s->get<std::string>());
  else if (s->is_array() && s->size() <= 4)
    for (size_t i = 0; i < s->size(); ++i) out.push_back(string((*s)[i], "stop[" + std::to_string(i) + "]"));
  else throw bad("stop", "expected a string or a list of at most 4 strings, got " + json_value_text(*s));
  for (size_t i = 0; i < out.size(); ++i)
    if (out[i].empty()) throw bad("stop", "an empty stop string would stop at once");
  return out;
}

void read_sampling(const json& body, CompletionRequest& r) {
  SamplerParams& p = r.sampling;
  p = {.temperature = 1.0f, .top_k = 0, .top_p = 1.0f, .min_p = 0.0f};
  if (const json* v = field(body, "temperature")) p.temperature = float(number(*v, "temperature", 0, 2));
  if (const json* v = field(body, "top_p")) p.top_p = float(number(*v, "top_p", 0, 1));
  if (p.top_p <= 0) throw bad("top_p", "must be greater than 0");
  if (const json* v = field(body, "top_k")) p.top_k = int(integer(*v, "top_k", 0, 1 << 20));
  if (const json* v = field(body, "min_p")) p.min_p = float(number(*v, "min_p", 0, 1));
  if (const json* v = field(body, "repetition_penalty")) p.repeat_penalty = float(number(*v, "repetition_penalty", 0.01, 10));
  if (const json* v = field(body, "seed")) {
    p.seed = uint64_t(integer(*v, "seed", INT64_MIN, INT64_MAX));
    r.seeded = true;
  }
  for (const char* k : {"presence_penalty", "frequency_penalty"})
    if (const json* v = field(body, k))
      if (number(*v, k, -2, 2) != 0) throw bad(k, "not supported (use repetition_penalty); only 0 is accepted");
}

void refuse_unsupported(const json& body) {
  if (const json* v = field(body, "n"))
    if (integer(*v, "n", 1, 128) != 1) throw bad("n", "only 1 choice per request is supported");
  if (const json* v = field(body, "logprobs"))
    if (!(v->is_boolean() && !v->get<bool>()) && !(v->is_number_integer() && v->get<int64_t>() == 0))
      throw bad("logprobs", "not supported");
  if (const json* v = field(body, "tools"))
    if (!(v->is_array() && v->empty())) throw bad("tools", "not supported");
  if (const json* v = field(body, "best_of"))
    if (integer(*v, "best_of", 1, 128) != 1) throw bad("best_of", "only 1 is supported");
}

}  // namespace

CompletionRequest parse_request(std::string_view text, bool chat) {
  json body;
  try {
    body = parse_json(text, "the request body");
  } catch (const ConfigError& e) {
    throw RequestError(400, "", e.what());  // "the request body: invalid JSON at byte N: ..."
  }
  if (!body.is_object()) throw RequestError(400, "", "the body must be a JSON object");
  CompletionRequest r;
  r.chat = chat;
  if (const json* v = field(body, "model")) r.model = string(*v, "model");
  if (chat) r.messages = read_messages(body);
  else r.prompt = read_prompt(body);
  refuse_unsupported(body);
  read_sampling(body, r);
  r.stop = read_stop(body);
  for (const char* k : {"max_tokens", "max_completion_tokens"})
    if (const json* v = field(body, k)) r.max_tokens = int(integer(*v, k, 1, 1 << 30));
  if (!r.max_tokens && !chat) r.max_tokens = 16;
  if (const json* v = field(body, "stream")) {
    if (!v->is_boolean()) throw bad("stream", "expected true or false, got " + json_value_text(*v));
    r.stream = v->get<bool>();
  }
  return r;
}

}  // namespace wren::serve
