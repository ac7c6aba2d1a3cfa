// A saved chat (serve/chat_file.h): the chat's JSON and the session's state in one file.
#include "serve/chat_file.h"

#include <cerrno>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <stdexcept>

#include "io/output_file.h"
#include "runtime/session_state.h"

namespace wren::serve {

namespace {

constexpr char kMagic[8] = {'W', 'R', 'E', 'N', 'C', 'H', 'A', 'T'};
constexpr uint64_t kHeaderBytes = sizeof kMagic + 4 + 8;
// A chat's JSON holds its messages' text: at most this many bytes (far beyond any context).
constexpr uint64_t kMostJsonBytes = uint64_t(64) << 20;

[[noreturn]] void refuse(const std::string& path, const std::string& what) {
  throw std::runtime_error(path + ": " + what);
}

nlohmann::json chat_json(const SavedChat& chat, const std::vector<std::byte>& state) {
  nlohmann::json j = {{"format", format_name(chat.format)},
                      {"pending", chat.pending},
                      {"messages", nlohmann::json::array()},
                      {"state_bytes", state.size()},
                      {"state_fnv1a", fnv1a(state)}};
  for (const ChatMessage& m : chat.messages) j["messages"].push_back({{"role", m.role}, {"content", m.content}});
  return j;
}

// The chat's fields, each checked: the format a name this build knows, messages {role,
// content} strings, pending -1 or a token id.
SavedChat parse_chat(const nlohmann::json& j, const std::string& path, int64_t vocab_size) {
  if (!j.is_object()) refuse(path, "the chat is not a JSON object");
  SavedChat chat;
  const auto format = j.value("format", nlohmann::json());
  if (!format.is_string() || !format_by_name(format.get<std::string>()))
    refuse(path, "format: " + format.dump() + " is not a chat template (" + format_names() + ")");
  chat.format = *format_by_name(format.get<std::string>());
  const auto messages = j.value("messages", nlohmann::json());
  if (!messages.is_array()) refuse(path, "messages: expected an array");
  for (const auto& m : messages) {
    if (!m.is_object() || !m.value("role", nlohmann::json()).is_string() || !m.value("content", nlohmann::json()).is_string())
      refuse(path, "messages: expected {role, content} objects of strings");
    chat.messages.push_back({m["role"].get<std::string>(), m["content"].get<std::string>()});
  }
  const auto pending = j.value("pending", nlohmann::json());
  if (!pending.is_number_integer() || pending.get<int64_t>() < -1 || pending.get<int64_t>() >= vocab_size)
    refuse(path, "pending: " + pending.dump() + " is neither -1 nor a token id below " + std::to_string(vocab_size));
  chat.pending = pending.get<int32_t>();
  return chat;
}

}  // namespace

void save_chat(const std::string& path, Session& s, const SavedChat& chat) {
  const std::vector<std::byte> state = save_session_state(s);
  const std::string json = chat_json(chat, state).dump();
  OutputFile out(path);
  out.write(kMagic, sizeof kMagic);
  out.write(&kChatFileVersion, sizeof kChatFileVersion);
  const uint64_t json_bytes = json.size();
  out.write(&json_bytes, sizeof json_bytes);
  out.write(json.data(), json.size());
  out.write(state.data(), state.size());
  out.commit();
}

SavedChat load_chat(const std::string& path, Session& s, int64_t vocab_size) {
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  if (!in) refuse(path, std::string("cannot open (") + std::strerror(errno) + ")");
  const auto size = uint64_t(in.tellg());
  in.seekg(0);
  char magic[sizeof kMagic] = {};
  uint32_t version = 0;
  uint64_t json_bytes = 0;
  if (size < kHeaderBytes || !in.read(magic, sizeof magic) || std::memcmp(magic, kMagic, sizeof kMagic) != 0)
    refuse(path, "not a saved chat (no \"WRENCHAT\" at its start)");
  in.read(reinterpret_cast<char*>(&version), sizeof version);
  in.read(reinterpret_cast<char*>(&json_bytes), sizeof json_bytes);
  if (!in) refuse(path, "read failed");
  if (version != kChatFileVersion)
    refuse(path, "saved chat version " + std::to_string(version) + ", this build reads " + std::to_string(kChatFileVersion));
  if (json_bytes > kMostJsonBytes || json_bytes > size - kHeaderBytes)
    refuse(path, "the chat claims " + std::to_string(json_bytes) + " bytes, the file has " +
                     std::to_string(size - kHeaderBytes) + " after its header (at most " + std::to_string(kMostJsonBytes) + ")");
  std::string json(json_bytes, '\0');
  if (!in.read(json.data(), std::streamsize(json_bytes))) refuse(path, "read failed");
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(json);
  } catch (const nlohmann::json::exception& e) {
    refuse(path, std::string("the chat is not JSON: ") + e.what());
  }
  SavedChat chat = parse_chat(j, path, vocab_size);

  // The state: as long as the chat says, no longer than this session's can be, and unchanged.
  const uint64_t state_bytes = size - kHeaderBytes - json_bytes, most = session_state_most_bytes(s);
  const auto said = j.value("state_bytes", nlohmann::json()), check = j.value("state_fnv1a", nlohmann::json());
  if (!said.is_number_unsigned() || said.get<uint64_t>() != state_bytes || !check.is_number_unsigned())
    refuse(path, "the session state is " + std::to_string(state_bytes) + " bytes, the chat says " + said.dump() +
                     " (a truncated or damaged file)");
  if (state_bytes > most)
    refuse(path, "a session state of " + std::to_string(state_bytes) + " bytes, more than one of this session (context " +
                     std::to_string(s.context()) + " tokens) can be (" + std::to_string(most) +
                     "): saved with a larger context or from another model");
  std::vector<std::byte> state(state_bytes);
  if (!in.read(reinterpret_cast<char*>(state.data()), std::streamsize(state_bytes))) refuse(path, "read failed");
  if (fnv1a(state) != check.get<uint64_t>()) refuse(path, "the session state is damaged (its FNV-1a differs from the saved one)");
  try {
    restore_session_state(s, state);
  } catch (const std::runtime_error& e) {
    refuse(path, e.what());
  }
  for (const int32_t t : s.history())
    if (t < 0 || t >= vocab_size) refuse(path, "history: token " + std::to_string(t) + " is not a token id of this model");
  return chat;
}

}  // namespace wren::serve
