// libFuzzer target: tokenizer.json loading and BPE encode/decode (text/tokenizer). The input
// is "tokenizer.json bytes \0 text": a tokenizer it accepts encodes the text into ids of its
// vocabulary, and decodes them (invalid bytes become U+FFFD). An input without \0 is all
// tokenizer.json; the JSON text itself is encoded too.
// links: wren_text
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string_view>

#include "config/json_reader.h"
#include "text/tokenizer.h"

namespace {

void check(const wren::text::Tokenizer& tok, std::string_view text) {
  const std::vector<int32_t> ids = tok.encode(text);
  for (int32_t id : ids)
    if (id < 0 || id >= tok.vocab_size()) std::abort();
  (void)tok.decode(ids);
  (void)tok.decode(ids, true);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view all(reinterpret_cast<const char*>(data), size);
  const size_t split = all.find('\0');
  const std::string_view json = all.substr(0, split), text = split == all.npos ? "" : all.substr(split + 1);
  try {
    const wren::text::Tokenizer tok = wren::text::Tokenizer::from_json(wren::parse_json(json, "fuzz/tokenizer.json"),
                                                                       "fuzz/tokenizer.json");
    check(tok, text);
    check(tok, json);  // the JSON itself is a text with quotes, digits and escapes
  } catch (const wren::ConfigError&) {
  }
  return 0;
}
