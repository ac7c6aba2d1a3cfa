// tools/: the --kv option of generate, perplexity and bench: the KV cache's storage
// (model/kv_cache.h), or "auto" for the session's rule (f16 when it fits, else q8).
#pragma once

#include <CLI/CLI.hpp>

#include <optional>
#include <string>

#include "model/kv_cache.h"

namespace wren::tools {

inline CLI::Option* add_kv_option(CLI::App* cmd, std::string& text) {
  return cmd
      ->add_option("--kv", text,
                   "KV cache storage: f32, f16, bf16, q8 (int8, one f16 scale per head row), or auto (f16 when "
                   "the caches at f16 fit in a quarter of memory, else q8)")
      ->check(CLI::IsMember({"auto", "f32", "f16", "bf16", "q8"}))
      ->capture_default_str();
}

inline std::optional<KvType> kv_choice(const std::string& text) {
  if (text == "auto") return std::nullopt;
  return parse_kv_type(text);
}

}  // namespace wren::tools
