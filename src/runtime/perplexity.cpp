// llama-perplexity's windows over a token stream (runtime/perplexity.h).
#include "runtime/perplexity.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <stdexcept>

#include "config/read_file.h"
#include "runtime/generation.h"

namespace wren {

double WindowScore::perplexity() const { return std::exp(nll / double(scored)); }
double WindowScore::bits_per_byte() const { return nll / std::log(2.0) / bytes; }

std::vector<int32_t> tokenize_file(const text::Tokenizer& tok, const std::string& path) {
  return tok.encode(read_text_input(path), false);
}

int64_t window_length(const ModelConfig& c, int64_t requested) {
  const int64_t n_ctx = requested ? requested : std::min<int64_t>(c.context_length, 512);
  if (n_ctx < 2) throw std::runtime_error("--context " + std::to_string(n_ctx) + ": must be at least 2");
  if (n_ctx > c.context_length)
    throw std::runtime_error("--context " + std::to_string(n_ctx) + ": larger than the model's context_length " +
                             std::to_string(c.context_length));
  return n_ctx;
}

double nll(const float* logits, int vocab, int32_t target) {
  float top = -INFINITY;
  for (int v = 0; v < vocab; ++v) top = std::max(top, logits[v]);
  double sum = 0;
  for (int v = 0; v < vocab; ++v) sum += std::exp(double(logits[v] - top));
  return std::log(sum) - double(logits[target] - top);
}

void score_windows(const std::shared_ptr<const Model>& model, const text::Tokenizer& tok,
                   std::span<const int32_t> tokens, int64_t windows, const WindowOptions& o, WindowScore& score) {
  const int64_t n_ctx = o.context;
  if (windows > windows_in(int64_t(tokens.size()), n_ctx))
    throw std::invalid_argument("score_windows: " + std::to_string(windows) + " windows of " + std::to_string(n_ctx) +
                                " tokens in " + std::to_string(tokens.size()) + " tokens");
  const int vocab = model->config.vocab_size;
  std::vector<float> logits(size_t(model->config.rows()));
  const auto t0 = std::chrono::steady_clock::now();
  for (int64_t w = 0; w < windows; ++w) {
    Session session(model, {.context = n_ctx, .threads = o.threads, .probe = o.probe, .kv = o.kv});
    const int32_t* window = tokens.data() + w * n_ctx;
    for (int64_t i = 0; i + 1 < n_ctx; ++i) {
      session.decode(window[i], logits.data());
      if (i + 1 < n_ctx / 2) continue;
      check_finite_logits(logits, vocab, model->config, session.position());
      score.nll += nll(logits.data(), vocab, window[i + 1]);
      score.bytes += double(tok.token_to_piece(window[i + 1]).size());
      ++score.scored;
    }
    if (o.run_last) session.decode(window[n_ctx - 1], logits.data());
    score.v_reads.read += session.v_reads().read;
    score.v_reads.skipped += session.v_reads().skipped;
    score.v_reads.bytes_skipped += session.v_reads().bytes_skipped;
    ++score.windows;
    if (o.progress) {
      const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      std::fprintf(o.progress, "\r[%lld/%lld] perplexity %.4f  (%.0f tokens/s, ETA %.0f s)   ", (long long)(w + 1),
                   (long long)windows, score.perplexity(), double((w + 1) * n_ctx) / elapsed,
                   elapsed / double(w + 1) * double(windows - w - 1));
    }
  }
  if (o.progress) std::fprintf(o.progress, "\n");
}

}  // namespace wren
