// serve/: a saved chat, so that a conversation continues later exactly where it stopped,
// without running its earlier turns again. The file holds the chat (its template, messages
// and the answer's last sampled token, not yet run) and the session's whole state
// (runtime/session_state: caches, window rings, recurrent states, history):
//   "WRENCHAT" | version (u32) | chat JSON bytes (u64) | chat JSON | session state
// The chat JSON also carries the state's size and FNV-1a, so a damaged state is refused
// rather than restored. A file is untrusted on load: every length is checked against the
// file and the session before anything is allocated or written, and an error names the file.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "runtime/session.h"
#include "serve/chat_template.h"

namespace wren::serve {

inline constexpr uint32_t kChatFileVersion = 1;

struct SavedChat {
  ChatFormat format = ChatFormat::wren;
  std::vector<ChatMessage> messages;
  int32_t pending = -1;  // the last answer's final token, sampled but not run; -1: none
};

// Writes `chat` and the state of `s` to `path` (under a temporary name, then renamed).
void save_chat(const std::string& path, Session& s, const SavedChat& chat);

// Reads `path` into `s` (a session of the model and context the chat was saved from) and
// returns the chat. Throws std::runtime_error naming `path` and what is wrong (not a saved
// chat, another version, a damaged state, a state of another model or context, a token
// outside `vocab_size`); `s` may then hold part of the state: pass a fresh session.
SavedChat load_chat(const std::string& path, Session& s, int64_t vocab_size);

}  // namespace wren::serve
