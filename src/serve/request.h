// serve/: the OpenAI request bodies Wren answers (POST /v1/completions and
// /v1/chat/completions), read from untrusted JSON. Every error is a RequestError naming the
// field (OpenAI's "param") and what was expected; fields Wren does not know are ignored, as
// OpenAI's own clients send some; fields it knows but cannot honour (n > 1, logprobs, tools)
// are refused rather than silently dropped.
#pragma once

#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/sampler.h"
#include "serve/chat_template.h"

namespace wren::serve {

struct RequestError : std::runtime_error {
  RequestError(int status, std::string param, const std::string& message, std::string type = "invalid_request_error")
      : std::runtime_error(message), status(status), param(std::move(param)), type(std::move(type)) {}
  int status;
  std::string param;  // the field, "" when the body as a whole is wrong
  std::string type;   // OpenAI's error type
};

struct CompletionRequest {
  bool chat = false;
  std::string model;
  std::string prompt;                 // /v1/completions
  std::vector<ChatMessage> messages;  // /v1/chat/completions
  std::optional<int> max_tokens;      // absent: completions 16 (OpenAI's default), chat until the context ends
  SamplerParams sampling;             // OpenAI's defaults: temperature 1, top_p 1; Wren's top_k and min_p off
  bool seeded = false;                // "seed" given; else the server draws one
  std::vector<std::string> stop;
  bool stream = false;
};

// Reads a body; `chat` selects the endpoint. Throws RequestError (status 400).
CompletionRequest parse_request(std::string_view body, bool chat);

}  // namespace wren::serve
