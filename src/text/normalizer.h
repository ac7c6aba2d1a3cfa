// text/: the normalizer of a tokenizer.json: steps applied to each stretch of text between
// added tokens before it is pre-tokenized. NFC and NFD, Replace (a literal or a regex, every
// match), Prepend (a prefix to non-empty text), Strip (White_Space at either end), alone or in
// a Sequence. A normalizer Wren does not implement (NFKC, NFKD, Lowercase, BertNormalizer,
// Precompiled, ...) is a clear error naming it, never a silent difference in ids.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "config/json_reader.h"
#include "text/regex.h"

namespace wren::text {

// {"pattern": {"String": ...} or {"Regex": ...}, "content": ...}, as Replace writes it.
Replacement read_replacement(JsonReader& r);

class Normalizer {
 public:
  // Reads root["normalizer"] (absent or null: text is unchanged).
  static Normalizer read(JsonReader& root);
  std::string apply(std::string_view text) const;
  bool empty() const { return steps_.empty(); }

  struct Step {
    enum class Kind { nfc, nfd, replace, prepend, strip } kind;
    std::string content;                  // prepend: the prefix
    Replacement replacement;              // replace
    bool left = false, right = false;     // strip
  };

 private:
  std::vector<Step> steps_;
};

}  // namespace wren::text
