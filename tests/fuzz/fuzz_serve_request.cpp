// libFuzzer target: the server's request bodies (serve/request: POST /v1/completions and
// /v1/chat/completions JSON into a CompletionRequest). The first byte picks the endpoint (odd:
// chat), the rest is the body. Any body is either a request within the bounds parse_request
// promises or a RequestError of status 400 whose message stays short (it quotes a bounded
// prefix of the offending value, never all of it).
// links: wren_config
// sources: src/serve/request.cpp
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "serve/request.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const bool chat = data[0] & 1;
  const std::string_view body(reinterpret_cast<const char*>(data) + 1, size - 1);
  try {
    const wren::serve::CompletionRequest r = wren::serve::parse_request(body, chat);
    const wren::SamplerParams& p = r.sampling;
    if (r.chat != chat || (chat && r.messages.empty())) std::abort();
    if (!(p.temperature >= 0 && p.temperature <= 2) || !(p.top_p > 0 && p.top_p <= 1) || p.top_k < 0 ||
        !(p.min_p >= 0 && p.min_p <= 1) || !std::isfinite(p.repeat_penalty))
      std::abort();
    if (r.max_tokens && *r.max_tokens < 1) std::abort();
    if (r.stop.size() > 4) std::abort();
    for (const std::string& s : r.stop)
      if (s.empty()) std::abort();
    for (const wren::serve::ChatMessage& m : r.messages)
      if (m.role != "system" && m.role != "user" && m.role != "assistant") std::abort();
  } catch (const wren::serve::RequestError& e) {
    // A field path (messages[i].content[j].text) plus a bounded rendering of the value.
    if (e.status != 400 || std::string_view(e.what()).size() > 600) std::abort();
  }
  return 0;
}
