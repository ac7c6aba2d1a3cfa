// runtime/: a text scored in llama-perplexity's windows (wren perplexity, wren sparsity). The
// token stream is cut into windows of n_ctx tokens; each window is run from a fresh session
// and only its second half is scored, so every scored token sees at least half a window.
//   PPL = exp(mean NLL),  bits per byte = sum NLL / ln 2 / bytes of the scored tokens' text
#pragma once

#include <cstdint>
#include <cstdio>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "model/model.h"
#include "runtime/session.h"
#include "text/tokenizer.h"

namespace wren {

struct WindowScore {
  int64_t windows = 0, scored = 0;  // windows run, tokens scored
  double nll = 0, bytes = 0;        // summed NLL (nats) and UTF-8 bytes of the scored tokens
  VReads v_reads;                   // ReLU^2 V rows the kernels read and skipped, every query of every window
  double perplexity() const;
  double bits_per_byte() const;
};

struct WindowOptions {
  int64_t context = 0;  // n_ctx
  int threads = 1;
  SparsityProbe* probe = nullptr;  // attached to every window's session
  std::optional<KvType> kv = std::nullopt;  // the sessions' KV cache storage (unset: Session's rule)
  // Also run each window's last token (never scored: it has no target), so that its last
  // query sees the whole window of n_ctx keys.
  bool run_last = false;
  std::FILE* progress = nullptr;  // a progress line per window, when not null
};

// The whole of a text file, tokenized without special tokens; throws "<path>: cannot open".
std::vector<int32_t> tokenize_file(const text::Tokenizer& tok, const std::string& path);

// The window length for `requested` tokens (0: min(context_length, 512)); throws unless
// 2 <= n_ctx <= the model's context_length.
int64_t window_length(const ModelConfig& c, int64_t requested);

// Whole windows of n_ctx tokens in a stream of `tokens`.
inline int64_t windows_in(int64_t tokens, int64_t n_ctx) { return tokens / n_ctx; }

// -log p(target) under softmax(logits[0 .. vocab)), in nats.
double nll(const float* logits, int vocab, int32_t target);

// Runs the first `windows` windows of `tokens`, adding their scores into `score`.
void score_windows(const std::shared_ptr<const Model>& model, const text::Tokenizer& tok,
                   std::span<const int32_t> tokens, int64_t windows, const WindowOptions& o, WindowScore& score);

}  // namespace wren
