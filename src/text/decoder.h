// text/: the decoder of a tokenizer.json, the steps that turn token strings back into text.
// As in Hugging Face, each step maps the list of token strings to a new list, and the result
// is their concatenation:
//   ByteLevel     each character back to its byte (GPT-2's map); all tokens become one text
//   Replace       every match of a literal or regex in each token becomes `content`
//   ByteFallback  runs of "<0xNN>" tokens become the bytes they name if those are valid UTF-8,
//                 else one U+FFFD per byte
//   Fuse          all tokens become one
//   Strip         up to `start` leading and `stop` trailing `content` characters of each token
//   Metaspace     the replacement character (U+2581) becomes a space, except in the first
//                 token, where it is dropped (unless prepend_scheme is "never")
// alone or in a Sequence. A file without a decoder joins the tokens with spaces.
//
// Besides the whole-text decode, piece() gives the bytes one token stands for in the middle
// of a text, for streaming and byte counts: raw bytes (ByteLevel, ByteFallback), no
// first-token rule, and no Strip after Fuse (that one only trims the ends of the whole text).
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "config/json_reader.h"
#include "text/normalizer.h"

namespace wren::text {

class Decoder {
 public:
  // Reads root["decoder"] (absent or null: tokens joined by spaces).
  static Decoder read(JsonReader& root);
  std::string decode(std::vector<std::string> tokens) const;
  std::string piece(std::string_view token) const;

  struct Step {
    enum class Kind { byte_level, replace, byte_fallback, fuse, strip, metaspace } kind;
    Replacement replacement;   // replace
    std::string content;       // strip: the character; metaspace: the replacement character
    size_t start = 0, stop = 0;  // strip
    bool drop_in_first = true;   // metaspace: prepend_scheme is not "never"
  };

 private:
  std::vector<std::string> run(std::vector<std::string> tokens, bool whole_text) const;
  std::vector<Step> steps_;
  bool has_decoder_ = false;
};

}  // namespace wren::text
