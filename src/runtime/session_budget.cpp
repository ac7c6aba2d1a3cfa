#include "runtime/session_budget.h"

#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <stdexcept>
#include <string>

namespace wren {

double session_bytes(const ModelConfig& c, int64_t context) {
  const double ctx = double(context), f32 = sizeof(float);
  double per_token = 4 + 2 * f32;  // history, attention scores + selection
  double fixed = 0;
  for (int i = 0; i < c.n_layers(); ++i) {
    const MixerSpec& m = c.mixer(i);
    const bool own = c.has_cache(i);
    if (own && (m.kind == MixerKind::attention || m.kind == MixerKind::relu2_attention)) {
      const double kv = 2.0 * m.n_kv_heads * m.head_dim * f32;
      if (m.window > 0 && m.window < context) fixed += kv * m.window;
      else per_token += kv;
    }
    if (m.kind == MixerKind::mla) per_token += (double(m.kv_lora_rank) + m.qk_rope_dim + m.n_heads) * f32;
    if (m.kind == MixerKind::sparse_reuse) per_token += double(c.mixer(c.cache_owner(i)).n_kv_heads) * f32;
    if (m.kind == MixerKind::gdn || m.kind == MixerKind::gdn2)
      fixed += double(m.value_heads()) * m.head_dim * m.value_dim() * f32;
    if (m.kind == MixerKind::short_conv) fixed += double(m.conv_kernel - 1) * c.d_model * f32;
    if (m.kind == MixerKind::mamba2) {
      const double inner = double(m.n_heads) * m.head_dim, bc = double(m.ssm_groups()) * m.state_dim;
      fixed += (double(m.conv_kernel - 1) * (inner + 2 * bc) + inner * m.state_dim) * f32;
    }
  }
  return per_token * ctx + fixed;
}

double available_memory_bytes() {
  if (std::FILE* f = std::fopen("/proc/meminfo", "r")) {
    char line[256];
    unsigned long long kb = 0;
    bool found = false;
    while (std::fgets(line, sizeof line, f))
      if (std::sscanf(line, "MemAvailable: %llu kB", &kb) == 1) {
        found = true;
        break;
      }
    std::fclose(f);
    if (found) return double(kb) * 1024.0;
  }
  const long pages = sysconf(_SC_AVPHYS_PAGES), page = sysconf(_SC_PAGESIZE);
  return pages > 0 && page > 0 ? double(pages) * double(page) : 1e300;  // unknown: do not refuse
}

void check_session_memory(const ModelConfig& c, int64_t context) {
  const double need = session_bytes(c, context), have = available_memory_bytes();
  if (need > have) {
    char msg[320];
    std::snprintf(msg, sizeof msg, "a session of %lld tokens on %s needs %.3g GB of caches, more than the %.3g GB "
                  "of memory available (use a smaller --context)", (long long)context,
                  c.name.empty() ? "this model" : c.name.c_str(), need / 1e9, have / 1e9);
    throw std::runtime_error(msg);
  }
}

void check_context(int64_t requested, const ModelConfig& c, bool beyond, const std::string& origin) {
  if (requested > c.context_length && !beyond)
    throw std::runtime_error(origin + ": --context " + std::to_string(requested) + " is above the model's context_length " +
                             std::to_string(c.context_length) + " (add --beyond-context to ask for it anyway)");
}

}  // namespace wren
