#include "serve/chat_template.h"

#include <filesystem>
#include <nlohmann/json.hpp>
#include <stdexcept>

#include "config/json_reader.h"

namespace wren::serve {

namespace {

struct FormatInfo {
  ChatFormat format;
  std::string_view name;
  std::vector<std::string_view> specials;  // special tokens the format writes: the tokenizer must have them
  std::vector<std::string_view> ends;      // tokens that end the assistant's turn, when the tokenizer has them
};

const std::vector<FormatInfo>& formats() {
  static const std::vector<FormatInfo> table = {
      {ChatFormat::chatml, "chatml", {"<|im_start|>", "<|im_end|>"}, {"<|im_end|>", "<|endoftext|>"}},
      {ChatFormat::qwen3, "qwen3", {"<|im_start|>", "<|im_end|>"}, {"<|im_end|>", "<|endoftext|>"}},
      {ChatFormat::llama3, "llama3", {"<|begin_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"},
       {"<|eot_id|>", "<|eom_id|>", "<|end_of_text|>"}},
      {ChatFormat::gemma, "gemma", {"<bos>", "<start_of_turn>", "<end_of_turn>"}, {"<end_of_turn>", "<eos>"}},
      {ChatFormat::mistral, "mistral", {"<s>", "</s>"}, {"</s>"}},
      {ChatFormat::deepseek, "deepseek",
       {"<｜begin▁of▁sentence｜>", "<｜User｜>", "<｜Assistant｜>", "<｜end▁of▁sentence｜>"}, {"<｜end▁of▁sentence｜>"}},
      {ChatFormat::phi3, "phi3", {"<|system|>", "<|user|>", "<|assistant|>", "<|end|>"}, {"<|end|>", "<|endoftext|>"}},
      {ChatFormat::phi4, "phi4", {"<|system|>", "<|user|>", "<|assistant|>", "<|end|>"}, {"<|end|>", "<|endoftext|>"}},
      {ChatFormat::granite, "granite", {"<|start_of_role|>", "<|end_of_role|>", "<|end_of_text|>"}, {"<|end_of_text|>"}},
      {ChatFormat::olmo2, "olmo2", {"<|endoftext|>"}, {"<|endoftext|>"}},
      {ChatFormat::wren, "wren", {"<|endoftext|>"}, {"<|endoftext|>"}},
  };
  return table;
}

const FormatInfo& info(ChatFormat f) {
  for (const FormatInfo& i : formats())
    if (i.format == f) return i;
  throw std::logic_error("chat format without a table entry");
}

bool has(std::string_view s, std::string_view marker) { return s.find(marker) != std::string_view::npos; }

std::string_view trim(std::string_view s) {
  const size_t b = s.find_first_not_of(" \t\r\n");
  if (b == std::string_view::npos) return {};
  return s.substr(b, s.find_last_not_of(" \t\r\n") - b + 1);
}

// Qwen3 keeps no earlier reasoning: an assistant message's "<think>...</think>" is dropped.
std::string without_thinking(std::string_view content) {
  const size_t end = content.rfind("</think>");
  if (end == std::string_view::npos) return std::string(content);
  return std::string(trim(content.substr(end + 8)));
}

struct Renderer {
  std::vector<PromptPiece> pieces;
  void tmpl(std::string_view t) {
    if (!pieces.empty() && pieces.back().template_text) pieces.back().text += t;
    else pieces.push_back({std::string(t), true});
  }
  void content(std::string_view c) {
    if (!c.empty()) pieces.push_back({std::string(c), false});
  }
};

void check_roles(std::span<const ChatMessage> messages) {
  for (size_t i = 0; i < messages.size(); ++i) {
    const std::string& r = messages[i].role;
    if (r != "system" && r != "user" && r != "assistant")
      throw std::invalid_argument("messages[" + std::to_string(i) + "].role: \"" + r +
                                  "\" is not one of system, user, assistant");
  }
}

// Formats without a system role (Gemma, Mistral) put the system text before the first user turn.
std::vector<ChatMessage> fold_system(std::span<const ChatMessage> messages) {
  std::vector<ChatMessage> out;
  std::string system;
  for (const ChatMessage& m : messages) {
    if (m.role == "system") {
      system += (system.empty() ? "" : "\n\n") + m.content;
      continue;
    }
    out.push_back(m);
    if (m.role == "user" && !system.empty()) {
      out.back().content = system + "\n\n" + m.content;
      system.clear();
    }
  }
  return out;
}

void render_chatml(Renderer& r, std::span<const ChatMessage> ms, bool gen, bool qwen3) {
  for (const ChatMessage& m : ms) {
    r.tmpl("<|im_start|>" + m.role + "\n");
    r.content(qwen3 && m.role == "assistant" ? without_thinking(m.content) : m.content);
    r.tmpl("<|im_end|>\n");
  }
  if (gen) r.tmpl("<|im_start|>assistant\n");
}

void render_llama3(Renderer& r, std::span<const ChatMessage> ms, bool gen) {
  r.tmpl("<|begin_of_text|>");
  for (const ChatMessage& m : ms) {
    r.tmpl("<|start_header_id|>" + m.role + "<|end_header_id|>\n\n");
    r.content(trim(m.content));
    r.tmpl("<|eot_id|>");
  }
  if (gen) r.tmpl("<|start_header_id|>assistant<|end_header_id|>\n\n");
}

void render_gemma(Renderer& r, std::span<const ChatMessage> messages, bool gen) {
  r.tmpl("<bos>");
  for (const ChatMessage& m : fold_system(messages)) {
    r.tmpl(std::string("<start_of_turn>") + (m.role == "assistant" ? "model" : "user") + "\n");
    r.content(trim(m.content));
    r.tmpl("<end_of_turn>\n");
  }
  if (gen) r.tmpl("<start_of_turn>model\n");
}

void render_mistral(Renderer& r, std::span<const ChatMessage> messages, bool) {
  r.tmpl("<s>");
  for (const ChatMessage& m : fold_system(messages)) {
    if (m.role == "user") {
      r.tmpl("[INST] ");
      r.content(m.content);
      r.tmpl(" [/INST]");
    } else {
      r.content(m.content);
      r.tmpl("</s>");
    }
  }
}

void render_deepseek(Renderer& r, std::span<const ChatMessage> ms, bool gen) {
  r.tmpl("<｜begin▁of▁sentence｜>");
  for (const ChatMessage& m : ms)
    if (m.role == "system") r.content(m.content);
  for (const ChatMessage& m : ms) {
    if (m.role == "user") {
      r.tmpl("<｜User｜>");
      r.content(m.content);
    } else if (m.role == "assistant") {
      r.tmpl("<｜Assistant｜>");
      r.content(without_thinking(m.content));
      r.tmpl("<｜end▁of▁sentence｜>");
    }
  }
  if (gen) r.tmpl("<｜Assistant｜>");
}

// Phi-3 / Phi-3.5: "<|role|>\n" content "<|end|>\n" (a system message only when it says
// something); Phi-4-mini the same without the newlines.
void render_phi(Renderer& r, std::span<const ChatMessage> ms, bool gen, bool newlines) {
  const std::string nl = newlines ? "\n" : "";
  for (const ChatMessage& m : ms) {
    if (m.role == "system" && m.content.empty()) continue;
    r.tmpl("<|" + m.role + "|>" + nl);
    r.content(m.content);
    r.tmpl("<|end|>" + nl);
  }
  if (gen) r.tmpl("<|assistant|>" + nl);
}

// Granite 3: "<|start_of_role|>role<|end_of_role|>" content "<|end_of_text|>\n". (Its program
// writes a dated default system message when none is given; this renders only the messages.)
void render_granite(Renderer& r, std::span<const ChatMessage> ms, bool gen) {
  for (const ChatMessage& m : ms) {
    r.tmpl("<|start_of_role|>" + m.role + "<|end_of_role|>");
    r.content(m.content);
    r.tmpl("<|end_of_text|>\n");
  }
  if (gen) r.tmpl("<|start_of_role|>assistant<|end_of_role|>");
}

// OLMo 2 Instruct (Tulu 3): "<|endoftext|>", then "<|role|>\n" content "\n" per message, an
// assistant's content ended by "<|endoftext|>" (and "\n" unless it is the last message).
void render_olmo2(Renderer& r, std::span<const ChatMessage> ms, bool gen) {
  r.tmpl("<|endoftext|>");
  for (size_t i = 0; i < ms.size(); ++i) {
    const ChatMessage& m = ms[i];
    r.tmpl("<|" + m.role + "|>\n");
    r.content(m.content);
    if (m.role != "assistant") r.tmpl("\n");
    else r.tmpl(i + 1 < ms.size() ? "<|endoftext|>\n" : "<|endoftext|>");
  }
  if (gen) r.tmpl("<|assistant|>\n");
}

// Wren's own: "<|endoftext|>" starts the document, each message is "Role: content\n\n".
void render_wren(Renderer& r, std::span<const ChatMessage> ms, bool gen) {
  r.tmpl("<|endoftext|>");
  for (const ChatMessage& m : ms) {
    std::string role = m.role;
    role[0] = char(role[0] - 'a' + 'A');
    r.tmpl(role + ": ");
    r.content(m.content);
    r.tmpl("\n\n");
  }
  if (gen) r.tmpl("Assistant: ");
}

}  // namespace

const char* const kWrenJinja =
    "{{- '<|endoftext|>' }}{%- for message in messages %}{{- message['role'] | capitalize + ': ' + "
    "message['content'] + '\\n\\n' }}{%- endfor %}{%- if add_generation_prompt %}{{- 'Assistant: ' }}{%- endif %}";

std::string_view format_name(ChatFormat f) { return info(f).name; }

std::optional<ChatFormat> format_by_name(std::string_view name) {
  for (const FormatInfo& i : formats())
    if (i.name == name) return i.format;
  return std::nullopt;
}

std::string format_names() {
  std::string s;
  for (const FormatInfo& i : formats()) s += (s.empty() ? "" : ", ") + std::string(i.name);
  return s;
}

ChatFormat detect_format(std::string_view jinja, const std::string& origin) {
  if (trim(jinja) == kWrenJinja) return ChatFormat::wren;
  // Most specific markers first: DeepSeek's distilled models carry ChatML's vocabulary too.
  if (has(jinja, "<｜User｜>") && has(jinja, "<｜Assistant｜>")) return ChatFormat::deepseek;
  if (has(jinja, "<|start_header_id|>") && has(jinja, "<|eot_id|>")) return ChatFormat::llama3;
  if (has(jinja, "<start_of_turn>")) return ChatFormat::gemma;
  // Phi-4-mini writes '<|' + message['role'] + '|>' with no newline; Phi-3 '<|user|>' + '\n'.
  if (has(jinja, "<|end|>") && has(jinja, "<|assistant|>"))
    return has(jinja, "'<|' + message['role'] + '|>' + message['content']") ? ChatFormat::phi4 : ChatFormat::phi3;
  if (has(jinja, "<|start_of_role|>") && has(jinja, "<|end_of_role|>")) return ChatFormat::granite;
  if (has(jinja, "<|im_start|>")) return has(jinja, "<think>") ? ChatFormat::qwen3 : ChatFormat::chatml;
  // OLMo 2's Tulu program: Phi's role markers without <|end|>.
  if (has(jinja, "<|user|>") && has(jinja, "<|assistant|>")) return ChatFormat::olmo2;
  // Llama 2 also writes [INST], with its system prompt in <<SYS>>: a different format.
  if (has(jinja, "[INST]") && !has(jinja, "<<SYS>>")) return ChatFormat::mistral;
  throw std::runtime_error(origin + ": the chat_template is none of the formats Wren knows (" + format_names() +
                           "); name one with --chat-template NAME");
}

ChatTemplate::ChatTemplate(ChatFormat format, const text::Tokenizer& tok) : format_(format), tok_(tok) {
  const FormatInfo& i = info(format);
  for (std::string_view s : i.specials)
    if (!tok.token_id(s))
      throw std::runtime_error("chat template " + std::string(i.name) + " writes the token " + std::string(s) +
                               ", which the tokenizer does not have; name another with --chat-template");
  for (std::string_view s : i.ends)
    if (auto id = tok.token_id(s)) end_tokens_.push_back(*id);
}

std::vector<PromptPiece> ChatTemplate::render(std::span<const ChatMessage> messages, bool gen) const {
  check_roles(messages);
  Renderer r;
  switch (format_) {
    case ChatFormat::chatml: render_chatml(r, messages, gen, false); break;
    case ChatFormat::qwen3: render_chatml(r, messages, gen, true); break;
    case ChatFormat::llama3: render_llama3(r, messages, gen); break;
    case ChatFormat::gemma: render_gemma(r, messages, gen); break;
    case ChatFormat::mistral: render_mistral(r, messages, gen); break;
    case ChatFormat::deepseek: render_deepseek(r, messages, gen); break;
    case ChatFormat::phi3: render_phi(r, messages, gen, true); break;
    case ChatFormat::phi4: render_phi(r, messages, gen, false); break;
    case ChatFormat::granite: render_granite(r, messages, gen); break;
    case ChatFormat::olmo2: render_olmo2(r, messages, gen); break;
    case ChatFormat::wren: render_wren(r, messages, gen); break;
  }
  return std::move(r.pieces);
}

std::vector<int32_t> ChatTemplate::encode(std::span<const PromptPiece> pieces) const {
  std::vector<int32_t> ids;
  for (const PromptPiece& p : pieces) {
    const std::vector<int32_t> part = tok_.encode(p.text, p.template_text);
    ids.insert(ids.end(), part.begin(), part.end());
  }
  return ids;
}

ChatFormat chat_format_for(const std::string& dir, const std::string& override_name) {
  if (!override_name.empty()) {
    if (auto f = format_by_name(override_name)) return *f;
    throw std::runtime_error("--chat-template: \"" + override_name + "\" is not one of " + format_names());
  }
  const std::string path = dir + "/tokenizer_config.json";
  if (!std::filesystem::exists(path))
    throw std::runtime_error(path + ": missing, so the model has no chat template; name one with --chat-template NAME (" +
                             format_names() + ")");
  // config/'s strict reader, bounded in size and depth as a config.json (real ones are 10 KB
  // to 1.2 MB, Gemma 3's with its added tokens the largest).
  const Json j = parse_json_file(path, kConfigJsonLimits);
  const auto it = j.is_object() ? j.find("chat_template") : j.end();
  if (!j.is_object() || it == j.end())
    throw std::runtime_error(path + ": no chat_template; name one with --chat-template NAME (" + format_names() + ")");
  if (it->is_string()) return detect_format(it->get<std::string>(), path + ": chat_template");
  // Several named programs ([{"name": ..., "template": ...}]): the one named "default".
  if (it->is_array())
    for (const auto& t : *it)
      if (t.is_object() && t.value("name", "") == "default" && t.contains("template") && t["template"].is_string())
        return detect_format(t["template"].get<std::string>(), path + ": chat_template[default]");
  throw std::runtime_error(path + ": chat_template: expected a string or a list with a \"default\" template");
}

}  // namespace wren::serve
