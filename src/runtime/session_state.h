// runtime/: a session's state as bytes, to continue a sequence later, elsewhere or from a
// fork. The state is one list, Session::state(): every buffer that changes as tokens run
// (caches and their fill counts, window rings, recurrent states, engram gate histories, the
// full layers' kept scores, the residual and block state, the token history), each a named
// byte span. Saved, the list follows a header:
//   "WRENSESS" | format version (u32) | buffers (u32) | model fingerprint (u64)
//   | context (i64) | position (i64) | per buffer: name length (u16), name, bytes (u64) | data
// A restore checks every field against the session it fills before it writes a byte into
// it: a state of another model (fingerprint), another context, another layout or a
// truncated one is refused naming what differs, and the session is left as it was. Host
// byte order: a state moves between runs and builds of one platform, not across platforms.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "model/model.h"
#include "runtime/session.h"

namespace wren {

// 2: KV caches stored head-major (model/kv_cache.h), which a state of version 1 is not.
// 3: cache buffers named with their storage type ("layer0.kv.k.f16"): f16 and bf16 caches have
//    the same sizes, so a name without the type let one restore into the other.
inline constexpr uint32_t kSessionStateVersion = 3;

// A hash of what makes two models interchangeable for a state: the config and, per tensor,
// its name, storage, shape and the first and last bytes of its data (FNV-1a, 64 bits).
uint64_t model_fingerprint(const Model& m);

// The session's state, followed by `extra` buffers of the caller's (a sampler's generator,
// the last logits), in the format above.
std::vector<std::byte> save_session_state(Session& s, std::span<const StateBuffer> extra = {});
// Fills the session (and `extra`, which must name the same buffers in the same order as at
// save) from `data`. Throws std::runtime_error naming the first field that does not match;
// nothing is written then.
void restore_session_state(Session& s, std::span<const std::byte> data, std::span<const StateBuffer> extra = {});

// The same to and from a file: written under a temporary name and renamed, so a failed save
// never leaves half a file; a file longer than this session's state is refused unread.
void save_session_state_file(Session& s, const std::string& path, std::span<const StateBuffer> extra = {});
void restore_session_state_file(Session& s, const std::string& path, std::span<const StateBuffer> extra = {});

// The most bytes a saved state of this session can take (its layout with the history full):
// the bound a reader of an untrusted file checks before it allocates.
uint64_t session_state_most_bytes(Session& s, std::span<const StateBuffer> extra = {});

// FNV-1a (64 bits) over bytes: the check a container of a state stores beside it, so that
// damaged data is refused rather than restored.
uint64_t fnv1a(std::span<const std::byte> bytes);

}  // namespace wren
