// libFuzzer target: chat templates (serve/chat_template): detecting the format from a model
// directory's tokenizer_config.json and rendering a conversation in it. The input is
// "tokenizer_config.json bytes \0 messages", the messages separated by \x1e, each one role
// byte (0 system, 1 user, 2 assistant, else an unknown role) then its content. A config
// whose format is not placed renders in the format the input's size picks instead. Any
// input either renders to pieces whose ids lie in the vocabulary and decode back to the
// pieces' text (ASCII conversations), or stops with std::runtime_error (the file) or
// std::invalid_argument (a role).
// links: wren_text
// sources: src/serve/chat_template.cpp
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "serve/chat_template.h"
#include "text/bpe_train.h"

namespace fs = std::filesystem;

namespace {

std::string dir;

// A byte-level BPE tokenizer with the special tokens of every format.
const wren::text::Tokenizer& tokenizer() {
  static const wren::text::Tokenizer tok = [] {
    wren::text::BpeTrainOptions o{.vocab_size = 300};
    for (const char* s : {"<|im_start|>", "<|im_end|>", "<|begin_of_text|>", "<|start_header_id|>", "<|end_header_id|>",
                          "<|eot_id|>", "<bos>", "<start_of_turn>", "<end_of_turn>", "<s>", "</s>",
                          "<｜begin▁of▁sentence｜>", "<｜User｜>", "<｜Assistant｜>", "<｜end▁of▁sentence｜>",
                          "<|system|>", "<|user|>", "<|assistant|>", "<|end|>", "<|start_of_role|>", "<|end_of_role|>",
                          "<|end_of_text|>"})
      o.special_tokens.push_back(s);
    return wren::text::Tokenizer::from_json(wren::text::train_bpe({"Hello, world. The user asks."}, o), "fuzz tokenizer");
  }();
  return tok;
}

std::vector<wren::serve::ChatMessage> messages(std::string_view s) {
  std::vector<wren::serve::ChatMessage> out;
  while (!s.empty()) {
    const size_t end = s.find('\x1e');
    const std::string_view m = s.substr(0, end);
    const char* role = m.empty() || uint8_t(m[0]) > 2 ? "tool" : (const char*[]){"system", "user", "assistant"}[int(m[0])];
    out.push_back({role, std::string(m.empty() ? m : m.substr(1))});
    if (end == s.npos) break;
    s.remove_prefix(end + 1);
  }
  return out;
}

bool ascii(std::string_view s) {
  for (char c : s)
    if (uint8_t(c) >= 0x80) return false;
  return true;
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  dir = (fs::temp_directory_path() / ("wren-fuzz-chat-" + std::to_string(getpid()))).string();
  fs::create_directories(dir);
  std::atexit([] {
    std::error_code ec;
    fs::remove_all(dir, ec);
  });
  (void)tokenizer();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view all(reinterpret_cast<const char*>(data), size);
  const size_t split = all.find('\0');
  const std::string_view config = all.substr(0, split), rest = split == all.npos ? "" : all.substr(split + 1);
  {
    std::ofstream out(dir + "/tokenizer_config.json", std::ios::binary | std::ios::trunc);
    out.write(config.data(), std::streamsize(config.size()));
  }
  wren::serve::ChatFormat format;
  try {
    format = wren::serve::chat_format_for(dir, "");
  } catch (const std::runtime_error&) {
    format = wren::serve::ChatFormat(size % (int(wren::serve::ChatFormat::wren) + 1));  // wren is the last
  }
  const wren::serve::ChatTemplate tmpl(format, tokenizer());
  const std::vector<wren::serve::ChatMessage> ms = messages(rest);
  for (bool gen : {false, true}) {
    std::vector<wren::serve::PromptPiece> pieces;
    try {
      pieces = tmpl.render(ms, gen);
    } catch (const std::invalid_argument&) {
      return 0;  // an unknown role
    }
    std::string text;
    for (const wren::serve::PromptPiece& p : pieces) text += p.text;
    const std::vector<int32_t> ids = tmpl.encode(pieces);
    for (int32_t id : ids)
      if (id < 0 || id >= tokenizer().vocab_size()) std::abort();
    if (ascii(rest) && tokenizer().decode(ids) != text) std::abort();
  }
  return 0;
}
