// BPE training: the learned merges follow the pair counts, the written tokenizer.json loads
// and round-trips arbitrary UTF-8, and training is deterministic.
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <random>
#include <sstream>

#include "text/bpe_train.h"
#include "text/tokenizer.h"
#include "text/unicode.h"

namespace wren::text {
namespace {

// A few KB of varied text: Shakespeare from the tokenizer fixtures, plus made-up lines.
std::vector<std::string> training_texts() {
  Json cases = parse_json_file(std::string(WREN_SOURCE_DIR) + "/tests/fixtures/tokenizer/o200k.fixtures.json");
  std::vector<std::string> texts;
  for (const Json& c : cases) texts.push_back(c["text"].get<std::string>());
  std::string made_up;
  for (int i = 0; i < 40; ++i)
    made_up += "The cat sat on the mat " + std::to_string(i * 37) + " times. 猫は座った 😺<|endoftext|>\n";
  texts.push_back(made_up);
  return texts;
}

std::string random_utf8(std::mt19937& rng, int n) {
  std::string s;
  for (int i = 0; i < n; ++i) {
    switch (rng() % 4) {
      case 0: s += char(rng() % 256); break;  // random bytes, repaired below
      case 1: append_utf8(s, 0x4E00 + rng() % 0x5000); break;
      case 2: append_utf8(s, 0x1F600 + rng() % 0x50); break;
      default: s += " \t\nab1'é"[rng() % 8]; break;
    }
  }
  return utf8_lossy(s);
}

TEST(BpeTrain, FirstMergeIsTheMostFrequentPair) {
  BpeTrainOptions o;
  o.vocab_size = 256 + 2 + 1;
  Json j = train_bpe({"ab ab ab ab cd xy xy"}, o);
  // pieces: "ab" x1, " ab" x3, " cd", " xy" x2: (a,b) occurs 4 times, (' ',a) 3 times.
  const Json& merges = j["model"]["merges"];
  ASSERT_EQ(merges.size(), 2u);
  EXPECT_EQ(merges[0], "a b");
  EXPECT_EQ(merges[1], "Ġ ab");
  EXPECT_EQ(j["model"]["vocab"]["ab"], 256);
  EXPECT_EQ(j["model"]["vocab"]["Ġab"], 257);
  EXPECT_EQ(j["model"]["vocab"]["<|endoftext|>"], 258);
  Tokenizer tok = Tokenizer::from_json(j, "trained");
  EXPECT_EQ(tok.encode(" ab<|endoftext|>ab"), (std::vector<int32_t>{257, 258, 256}));
}

TEST(BpeTrain, SavedFileLoadsAndRoundTripsArbitraryText) {
  BpeTrainOptions o;
  o.vocab_size = 600;
  o.special_tokens = {"<|endoftext|>", "<|pad|>"};
  Json j = train_bpe(training_texts(), o);
  std::string path = ::testing::TempDir() + "wren_bpe_train_test.json";
  save_tokenizer_json(j, path);
  Tokenizer tok = Tokenizer::load(path);
  std::remove(path.c_str());
  EXPECT_EQ(tok.vocab_size(), 600);
  EXPECT_EQ(tok.special_id("<|endoftext|>"), 598);
  EXPECT_EQ(tok.special_id("<|pad|>"), 599);

  // Merges were learned: the training text takes far fewer tokens than bytes.
  std::string sample = training_texts()[23];
  EXPECT_LT(tok.encode(sample).size() * 2, sample.size());

  std::mt19937 rng(11);
  for (int trial = 0; trial < 100; ++trial) {
    std::string text = random_utf8(rng, int(rng() % 60));
    EXPECT_EQ(tok.decode(tok.encode(text)), text) << trial;
  }
  for (const std::string& t : training_texts()) EXPECT_EQ(tok.decode(tok.encode(t)), t);
}

TEST(BpeTrain, TrainingIsDeterministic) {
  BpeTrainOptions o;
  o.vocab_size = 500;
  std::string a = train_bpe(training_texts(), o).dump();
  std::string b = train_bpe(training_texts(), o).dump();
  EXPECT_EQ(a, b);
  o.pattern = SplitPattern::cl100k;
  Json c = train_bpe(training_texts(), o);
  EXPECT_NE(c.dump(), a);
  Tokenizer tok = Tokenizer::from_json(c, "trained-cl100k");  // the Sequence form loads too
  EXPECT_EQ(tok.decode(tok.encode("Numbers 123456 and words")), "Numbers 123456 and words");
}

TEST(BpeTrain, BadOptionsAndFilesAreErrors) {
  BpeTrainOptions o;
  o.vocab_size = 100;
  EXPECT_THROW(train_bpe({"abc"}, o), std::runtime_error);
  o.vocab_size = 300;
  EXPECT_THROW(train_bpe_files({"/no/such/file.txt"}, o), std::runtime_error);
}

}  // namespace
}  // namespace wren::text
