// The generation loop (runtime/generation.h) times the decode steps it counts: the tokens/s
// of `wren generate --stats` divides the steps run through the model by their time.
#include <gtest/gtest.h>

#include <filesystem>

#include "runtime/generation.h"
#include "runtime/model_files.h"
#include "text/tokenizer.h"

namespace wren {
namespace {

const std::string kShipped = (std::filesystem::path(WREN_SOURCE_DIR) / "models" / "embla-small").string();

TEST(Generation, CountsTheDecodeStepsItTimed) {
  auto model = open_model(kShipped);
  const text::Tokenizer tok = text::Tokenizer::load(kShipped + "/tokenizer.json");
  Session session(model, {.context = 256, .threads = 1});
  SamplerParams greedy;
  greedy.temperature = 0;
  Generation gen(session, tok, {.sampling = greedy, .max_tokens = 20, .ignore_eos = true});
  const std::vector<int32_t> prompt = tok.encode("Once upon a time");
  gen.prefill(prompt, true);
  while (!gen.done()) gen.step();
  const GenerationTimes& t = gen.times();
  // 20 tokens sampled; the last is never run through the model, so 19 decode steps were timed.
  EXPECT_EQ(t.generated, 20);
  EXPECT_EQ(t.decode_steps, 19);
  EXPECT_EQ(session.position(), int64_t(prompt.size()) + 19);
  EXPECT_DOUBLE_EQ(t.decode_tokens_per_s(), 19 / t.decode_s);
}

}  // namespace
}  // namespace wren
