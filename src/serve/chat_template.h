// serve/: chat templates. A model directory's tokenizer_config.json carries its chat format
// as a Jinja program ("chat_template"); Wren does not run Jinja, it recognises which of the
// common formats the program writes (by the markers only that format uses) and renders that
// format itself. A program it cannot place is an error at start-up, never a silent guess;
// `--chat-template NAME` names the format instead.
//
// A rendered prompt is a list of pieces: the template's own text (its special tokens are
// tokens) and the messages' contents (encoded as plain text, so a user who types
// "<|im_end|>" gets those characters, not the token).
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "text/tokenizer.h"

namespace wren::serve {

enum class ChatFormat { chatml, qwen3, llama3, gemma, mistral, deepseek, phi3, phi4, granite, olmo2, wren };  // wren last (fuzz_chat_template counts on it)

std::string_view format_name(ChatFormat f);
std::optional<ChatFormat> format_by_name(std::string_view name);
std::string format_names();  // "chatml, qwen3, ..." for messages

// The Jinja program Wren's own models ship (models/*/tokenizer_config.json): the wren format.
extern const char* const kWrenJinja;

// The format a chat_template program writes; std::runtime_error naming `origin` and the
// formats it knows when none matches.
ChatFormat detect_format(std::string_view jinja, const std::string& origin);

struct ChatMessage {
  std::string role;  // system, user or assistant
  std::string content;
};

struct PromptPiece {
  std::string text;
  bool template_text;  // true: the template's own text (special tokens allowed); false: a message's content
};

class ChatTemplate {
 public:
  // Checks that the tokenizer has every special token the format writes and ends turns with.
  ChatTemplate(ChatFormat format, const text::Tokenizer& tok);
  ChatFormat format() const { return format_; }

  // The conversation as pieces; with add_generation_prompt, the opening of the assistant's
  // turn follows. Roles other than system, user, assistant throw std::invalid_argument
  // naming messages[i].role.
  std::vector<PromptPiece> render(std::span<const ChatMessage> messages, bool add_generation_prompt) const;
  std::vector<int32_t> encode(std::span<const PromptPiece> pieces) const;
  std::vector<int32_t> encode(std::span<const ChatMessage> messages, bool add_generation_prompt) const {
    return encode(render(messages, add_generation_prompt));
  }
  // Tokens that end the assistant's turn (the format's end of turn and the tokenizer's end of text).
  const std::vector<int32_t>& end_tokens() const { return end_tokens_; }

 private:
  ChatFormat format_;
  const text::Tokenizer& tok_;
  std::vector<int32_t> end_tokens_;
};

// The format for model directory DIR: `override_name` when not empty, else detected from
// DIR/tokenizer_config.json's chat_template. Errors name the file, field or name.
ChatFormat chat_format_for(const std::string& dir, const std::string& override_name);

}  // namespace wren::serve
