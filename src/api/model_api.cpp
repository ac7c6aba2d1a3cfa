// The C API's models: loading, freeing, tokenizing, perplexity (include/wren.h).
#include <algorithm>
#include <cstring>
#include <filesystem>

#include "api/handles.h"
#include "runtime/model_files.h"
#include "runtime/perplexity.h"

using namespace wren;
using namespace wren::api;

namespace {

std::string_view text_arg(const char* text, size_t len, const char* name) {
  WREN_REQUIRE(text != nullptr || len == 0, WREN_ERROR_ARGUMENT, std::string(name) + ": null pointer with length " + std::to_string(len));
  return text ? std::string_view(text, len) : std::string_view();
}

// Copies `n` items to out[0 .. capacity) and reports n; too small a buffer is reported with
// the size it needs and nothing written.
template <class T>
wren_status copy_out(const T* items, size_t n, T* out, size_t capacity, size_t* count, const char* what) {
  *count = n;
  WREN_REQUIRE(n <= capacity, WREN_ERROR_BUFFER_TOO_SMALL,
          std::string(what) + ": needs room for " + std::to_string(n) + ", capacity " + std::to_string(capacity));
  WREN_REQUIRE(out != nullptr || n == 0, WREN_ERROR_ARGUMENT, std::string(what) + ": null output buffer");
  if (n) std::memcpy(out, items, n * sizeof(T));
  return WREN_OK;
}

}  // namespace

extern "C" {

wren_status wren_model_load(const char* dir, wren_model** out) {
  return guarded([&] {
    *non_null(out, "model") = nullptr;
    non_null(dir, "dir");
    namespace fs = std::filesystem;
    WREN_REQUIRE(fs::is_directory(dir), WREN_ERROR_IO, std::string(dir) + ": not a directory");
    for (const char* file : {"config.json", "tokenizer.json"})
      WREN_REQUIRE(fs::is_regular_file(fs::path(dir) / file), WREN_ERROR_IO, (fs::path(dir) / file).string() + ": missing");
    std::unique_ptr<wren_model> m;
    try {
      auto model = open_model(dir);  // the config first: its errors are the ones to see
      m = std::make_unique<wren_model>(dir, std::move(model), text::Tokenizer::load((fs::path(dir) / "tokenizer.json").string()));
    } catch (const std::bad_alloc&) {
      throw;
    } catch (const std::exception& e) {
      throw Failure(WREN_ERROR_MODEL, e.what());
    }
    *out = m.release();
    register_model(*out);
    return WREN_OK;
  });
}

wren_status wren_model_free(wren_model* model) {
  return guarded([&] {
    if (model) free_model(model);
    return WREN_OK;
  });
}

wren_status wren_model_get_info(const wren_model* model, wren_model_info* info) {
  return guarded([&] {
    const wren_model& m = live(model);
    const ModelConfig& c = m.model->config;
    *non_null(info, "info") = {.name = c.name.c_str(), .vocab_size = c.vocab_size, .n_logits = c.rows(),
                               .context_length = int32_t(c.context_length), .n_layers = c.n_layers(),
                               .d_model = c.d_model, .eos_token = m.eos.value_or(-1)};
    return WREN_OK;
  });
}

wren_status wren_tokenize(const wren_model* model, const char* text, size_t text_len, int add_special, int32_t* tokens,
                          size_t capacity, size_t* n_tokens) {
  return guarded([&] {
    const wren_model& m = live(model);
    non_null(n_tokens, "n_tokens");
    const std::vector<int32_t> ids = m.tokenizer.encode(text_arg(text, text_len, "text"), add_special != 0);
    return copy_out(ids.data(), ids.size(), tokens, capacity, n_tokens, "tokens");
  });
}

wren_status wren_detokenize(const wren_model* model, const int32_t* tokens, size_t n_tokens, char* text,
                            size_t capacity, size_t* text_len) {
  return guarded([&] {
    const wren_model& m = live(model);
    non_null(text_len, "text_len");
    WREN_REQUIRE(tokens != nullptr || n_tokens == 0, WREN_ERROR_ARGUMENT, "tokens: null pointer");
    const int32_t vocab = m.tokenizer.vocab_size();
    for (size_t i = 0; i < n_tokens; ++i)
      WREN_REQUIRE(tokens[i] >= 0 && tokens[i] < vocab, WREN_ERROR_TOKEN,
              "tokens[" + std::to_string(i) + "] = " + std::to_string(tokens[i]) + ": outside the tokenizer's 0.." +
                  std::to_string(vocab - 1));
    const std::string s = m.tokenizer.decode(std::span<const int32_t>(tokens, n_tokens));
    return copy_out(s.data(), s.size(), text, capacity, text_len, "text");
  });
}

wren_status wren_perplexity(const wren_model* model, const char* text, size_t text_len, int64_t context,
                            int32_t threads, wren_perplexity_result* result) {
  return guarded([&] {
    const wren_model& m = live(model);
    non_null(result, "result");
    WREN_REQUIRE(threads >= 1 && threads <= 1024, WREN_ERROR_ARGUMENT, "threads " + std::to_string(threads) + ": outside 1..1024");
    WREN_REQUIRE(context >= 0, WREN_ERROR_ARGUMENT, "context " + std::to_string(context) + ": negative");
    int64_t n_ctx = 0;
    try {
      n_ctx = window_length(m.model->config, context);
    } catch (const std::runtime_error& e) {
      throw Failure(WREN_ERROR_ARGUMENT, e.what());
    }
    const std::vector<int32_t> tokens = m.tokenizer.encode(text_arg(text, text_len, "text"), false);
    const int64_t windows = windows_in(int64_t(tokens.size()), n_ctx);
    WREN_REQUIRE(windows >= 1, WREN_ERROR_ARGUMENT,
            "text: " + std::to_string(tokens.size()) + " tokens, fewer than one window of " + std::to_string(n_ctx));
    WindowScore score;
    score_windows(m.model, m.tokenizer, tokens, windows, {.context = n_ctx, .threads = threads}, score);
    *result = {.perplexity = score.perplexity(), .bits_per_byte = score.bits_per_byte(), .windows = score.windows,
               .scored = score.scored};
    return WREN_OK;
  });
}

}  // extern "C"
