// The shipped model (models/embla-small) loads, and on text it never saw (a paragraph written for
// this test, in the novels' register) predicts far better than the same config at init: a check
// that what ships is the trained model and that the engine reads it correctly.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <optional>
#include <fstream>
#include <string>
#include <unistd.h>

#include "config/parse.h"
#include "runtime/model_files.h"
#include "runtime/perplexity.h"
#include "kernels/types.h"
#include "text/tokenizer.h"

namespace wren {
namespace {

const char* kUnseen =
    "The rain had not ceased since morning, and by the time the carriage reached the gate of the old house "
    "the lamps were already lit in the lower windows. Mrs. Thornley stood in the hall with her hands folded, "
    "as though she had been waiting there for an hour, which indeed she had. \"You are late,\" she said, not "
    "unkindly, and took the wet cloak from her niece's shoulders. \"Your uncle has gone up to bed, but he "
    "left word that you were to have a fire in the blue room, and supper on a tray if you wished it.\" "
    "Margaret thanked her, and followed her up the wide staircase, past the portraits of men and women she "
    "had never known, whose eyes seemed to follow her in the candlelight. The blue room was cold in spite of "
    "the fire, and when the door had closed behind her aunt she sat for a long while by the window, listening "
    "to the wind in the elms and thinking of the letter that lay, still unopened, in the pocket of her dress. "
    "It was from her brother, and she knew before she broke the seal that it would ask for money. In the "
    "morning she walked down to the village with the letter in her hand, meaning to answer it at once, but "
    "the little shop where the post was kept had not yet opened, and she turned instead along the river path. "
    "The water was high and brown after the night's rain, and a heron stood motionless among the reeds on the "
    "far bank, as grave and patient as a clergyman at a funeral. She watched it until it rose and flapped away "
    "over the meadows, and then she laughed at herself, for she had quite forgotten what she meant to write.";

WindowScore score_text(const std::string& dir, const std::string& text, int64_t context,
                       std::optional<KvType> kv = std::nullopt) {
  const auto model = open_model(dir);
  const text::Tokenizer tok = text::Tokenizer::load(dir + "/tokenizer.json");
  const std::vector<int32_t> tokens = tok.encode(text);
  WindowOptions o;
  o.context = context;
  o.kv = kv;
  WindowScore score;
  score_windows(model, tok, tokens, windows_in(int64_t(tokens.size()), context), o, score);
  EXPECT_GT(score.scored, 100) << dir;
  return score;
}

double bits_per_byte(const std::string& dir, const std::string& text, int64_t context) {
  return score_text(dir, text, context).bits_per_byte();
}

TEST(ShippedModel, PredictsUnseenTextFarBetterThanItsInit) {
  const std::string shipped = (std::filesystem::path(WREN_SOURCE_DIR) / "models" / "embla-small").string();
  const std::string init = (std::filesystem::temp_directory_path() / ("wren_shipped_init_" + std::to_string(::getpid()))).string();
  std::ifstream tokenizer(shipped + "/tokenizer.json");
  const std::string tokenizer_json((std::istreambuf_iterator<char>(tokenizer)), std::istreambuf_iterator<char>());
  write_random_model(init, resolve_model_config(shipped), 1, kernels::DType::q8, kernels::kDefaultGroup, tokenizer_json, true, 2);
  const double trained = bits_per_byte(shipped, kUnseen, 64), at_init = bits_per_byte(init, kUnseen, 64);
  std::filesystem::remove_all(init);
  std::printf("unseen paragraph: %.3f bits per byte trained, %.3f at init\n", trained, at_init);
  // Measured 1.421 trained and 3.104 at init (wren perplexity -c 64 on this paragraph gives
  // the same figures). Both are deterministic up to the SIMD path's rounding of the q8 sums,
  // which moves them by far less than 0.01, so the bands are about 5% wide: a model that
  // predicts 10% worse than the shipped one fails, as does an init far from uniform over 4,096
  // tokens (12 bits per token at ~3.9 bytes per token).
  EXPECT_GT(at_init, 2.95);
  EXPECT_LT(at_init, 3.25);
  EXPECT_GT(trained, 1.35);
  EXPECT_LT(trained, 1.49);
}

// The 8-bit KV cache (one f16 scale per head row) against f32 on the shipped model, on
// 256-token windows of the unseen paragraph: perplexity within 1% (issue 11's bound).
TEST(ShippedModel, Q8KvCachePerplexityIsWithinOnePercentOfF32) {
  const std::string shipped = (std::filesystem::path(WREN_SOURCE_DIR) / "models" / "embla-small").string();
  const WindowScore f32 = score_text(shipped, kUnseen, 256, KvType::f32), q8 = score_text(shipped, kUnseen, 256, KvType::q8);
  ASSERT_EQ(f32.scored, q8.scored);
  std::printf("unseen paragraph, 256-token windows: perplexity %.4f with an f32 KV cache, %.4f with q8 (x %.5f)\n",
              f32.perplexity(), q8.perplexity(), q8.perplexity() / f32.perplexity());
  EXPECT_LT(std::fabs(q8.perplexity() / f32.perplexity() - 1.0), 0.01);
  EXPECT_NE(f32.nll, q8.nll) << "the q8 cache was not used";
}

}  // namespace
}  // namespace wren
