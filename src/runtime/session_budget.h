// runtime/: what a session will allocate, computed from the config before anything is
// allocated, and checked against the machine, so that `--context 2000000000` or a config
// asking for terabytes of cache ends in a clear error instead of std::bad_alloc or swapping.
#pragma once

#include <cstdint>
#include <string>

#include "config/model_config.h"

namespace wren {

// Bytes a Session of `context` tokens holds for its caches and per-token scratch (f32, as the
// largest storage: an upper bound for narrower caches): per token of context, every layer's
// own K/V (2 kv_dim, or its window for a ring), MLA latent + shared key, the scores a
// sparse_reuse layer selects by, the attention scratch and the token history; plus each
// recurrent layer's state (heads x d_k x d_v).
double session_bytes(const ModelConfig& c, int64_t context);

// What the machine can still give: MemAvailable of /proc/meminfo, else sysconf's free pages.
double available_memory_bytes();

// std::runtime_error naming the model and both figures when session_bytes exceeds what is available.
void check_session_memory(const ModelConfig& c, int64_t context);

// A context beyond the model's context_length is refused unless `beyond` (--beyond-context):
// the model was not trained for it, and it is the usual way to ask for a huge cache by mistake.
// `origin` (the model directory) starts the message.
void check_context(int64_t requested, const ModelConfig& c, bool beyond, const std::string& origin);

}  // namespace wren
