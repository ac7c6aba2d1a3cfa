// The tokenizer against reference ids: fixtures made by scripts/tokenizer-fixtures/ with the
// JavaScript reference loaders (o200k also checked against gpt-tokenizer there). Also the
// hand-written regex matchers, NFC, incremental decoding and the loader's error messages.
#include <gtest/gtest.h>

#include <fstream>
#include <random>
#include <sstream>
#include <string>

#include "text/pretokenize.h"
#include "text/tokenizer.h"
#include "text/unicode.h"

namespace wren::text {
namespace {

std::string fixture_path(const std::string& name) {
  return std::string(WREN_SOURCE_DIR) + "/tests/fixtures/tokenizer/" + name;
}

class TokenizerFixture : public ::testing::TestWithParam<const char*> {};

TEST_P(TokenizerFixture, EncodeMatchesReferenceAndDecodeRoundTrips) {
  std::string family = GetParam();
  Tokenizer tok = Tokenizer::load(fixture_path(family + ".tokenizer.json"));
  Json cases = parse_json_file(fixture_path(family + ".fixtures.json"));
  ASSERT_GE(cases.size(), 20u);
  for (size_t i = 0; i < cases.size(); ++i) {
    std::string text = cases[i]["text"].get<std::string>();
    std::vector<int32_t> want = cases[i]["ids"].get<std::vector<int32_t>>();
    std::vector<int32_t> got = tok.encode(text);
    EXPECT_EQ(got, want) << family << " case " << i << ": \"" << text.substr(0, 60) << "\"";
    // Qwen normalizes to NFC; the GPT-2 style adds a space in front.
    std::string expect = family == "qwen3" ? nfc(text) : text;
    if (family == "gpt2_style" && !text.empty() && text[0] != ' ') expect = " " + expect;
    bool has_special = text.find("<|endoftext|>") != std::string::npos;
    if (!(family == "gpt2_style" && has_special)) {  // the prefix space also lands after each special
      EXPECT_EQ(tok.decode(got), expect) << family << " case " << i;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Families, TokenizerFixture,
                         ::testing::Values("o200k", "qwen3", "llama3_style", "gpt2_style"));

TEST(Tokenizer, SpecialTokensCanBePlainText) {
  Tokenizer tok = Tokenizer::load(fixture_path("o200k.tokenizer.json"));
  int32_t eot = tok.special_id("<|endoftext|>");
  EXPECT_TRUE(tok.is_special(eot));
  std::vector<int32_t> with = tok.encode("a<|endoftext|>b");
  ASSERT_EQ(with.size(), 3u);
  EXPECT_EQ(with[1], eot);
  std::vector<int32_t> plain = tok.encode("a<|endoftext|>b", /*allow_special=*/false);
  EXPECT_EQ(std::count(plain.begin(), plain.end(), eot), 0);
  EXPECT_GT(plain.size(), 3u);
  EXPECT_EQ(tok.decode(plain), "a<|endoftext|>b");
  EXPECT_EQ(tok.decode(with, /*skip_special=*/true), "ab");
  EXPECT_FALSE(tok.token_id("<|no such token|>").has_value());
  EXPECT_THROW(tok.special_id("<|no such token|>"), TokenIdError);
  EXPECT_THROW(tok.decode(std::vector<int32_t>{tok.vocab_size()}), TokenIdError);
  EXPECT_THROW(tok.token_to_piece(-1), TokenIdError);
}

TEST(Tokenizer, StreamDecoderEmitsOnlyWholeCharacters) {
  Tokenizer tok = Tokenizer::load(fixture_path("qwen3.tokenizer.json"));
  std::string text = "Emoji 👨‍👩‍👧‍👦 and 中文文本 and café";
  std::vector<int32_t> ids = tok.encode(text);
  StreamDecoder stream(tok);
  std::string out;
  bool saw_partial_token = false;
  for (int32_t id : ids) {
    const std::string& piece = tok.token_to_piece(id);
    saw_partial_token |= utf8_complete_prefix(piece) != piece.size() || utf8_lossy(piece) != piece;
    std::string chunk(stream.push(id));
    EXPECT_EQ(utf8_lossy(chunk), chunk);  // every chunk is valid UTF-8
    out += chunk;
  }
  out += stream.finish();
  EXPECT_TRUE(saw_partial_token) << "the test text should split a character across tokens";
  EXPECT_EQ(out, text);
  // A dangling lead byte is flushed as U+FFFD at the end.
  StreamDecoder broken(tok);
  std::string first(broken.push(tok.token_id(byte_to_piece(0xE4)).value()));
  EXPECT_EQ(first, "");
  EXPECT_EQ(broken.finish(), "\xEF\xBF\xBD");
}

TEST(Unicode, Utf8RepairFollowsMaximalSubparts) {
  EXPECT_EQ(utf8_lossy("a\xE4\xB8z"), "a\xEF\xBF\xBDz");                 // truncated 3-byte: one U+FFFD
  EXPECT_EQ(utf8_lossy("\xC0\xAF"), "\xEF\xBF\xBD\xEF\xBF\xBD");         // overlong: two
  EXPECT_EQ(utf8_lossy("\xED\xA0\x80"), "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD");  // surrogate
  EXPECT_EQ(utf8_lossy("\xF0\x9F\x98\x80"), "\xF0\x9F\x98\x80");
  EXPECT_EQ(utf8_complete_prefix("ab\xF0\x9F\x98"), 2u);
  EXPECT_EQ(utf8_complete_prefix("ab\x80"), 3u);  // invalid, not incomplete
}

TEST(Unicode, NfcComposesReordersAndHandlesHangul) {
  EXPECT_EQ(nfc("cafe\xCC\x81"), "caf\xC3\xA9");                       // e + acute -> é
  EXPECT_EQ(nfc("\xE1\x84\x92\xE1\x85\xA1\xE1\x86\xAB"), "\xED\x95\x9C");  // ᄒ ᅡ ᆫ -> 한
  // a + dot below (ccc 220) + acute (ccc 230), in the wrong order: reorder, then compose.
  EXPECT_EQ(nfc("a\xCC\x81\xCC\xA3"), "\xE1\xBA\xA1\xCC\x81");
  EXPECT_EQ(nfc("\xE2\x84\xAB"), "\xC3\x85");  // Angstrom sign -> Å (singleton)
  EXPECT_EQ(nfc("plain ascii"), "plain ascii");
  EXPECT_EQ(nfc("bad\xFF" "e\xCC\x81"), "bad\xFF\xC3\xA9");  // invalid bytes pass through
}

TEST(Unicode, NfcMatchesJavaScriptNormalize) {
  Json cases = parse_json_file(fixture_path("nfc.fixtures.json"));
  ASSERT_GE(cases.size(), 500u);
  int changed = 0;
  for (const Json& c : cases) {
    std::string text = c["text"].get<std::string>(), want = c["nfc"].get<std::string>();
    changed += text != want;
    EXPECT_EQ(nfc(text), want) << c["text"].dump();
  }
  EXPECT_GT(changed, 100);  // the cases really exercise composition and reordering
}

TEST(Unicode, CategoriesAndWhiteSpace) {
  EXPECT_EQ(category(U'a'), Category::Ll);
  EXPECT_EQ(category(U'Ж'), Category::Lu);
  EXPECT_EQ(category(U'ǅ'), Category::Lt);
  EXPECT_EQ(category(U'中'), Category::Lo);
  EXPECT_EQ(category(0x301), Category::M);
  EXPECT_EQ(category(U'٣'), Category::N);
  EXPECT_EQ(category(U'²'), Category::N);
  EXPECT_EQ(category(U'!'), Category::other);
  EXPECT_TRUE(is_white_space(0x3000));
  EXPECT_TRUE(is_white_space(0x85));
  EXPECT_FALSE(is_white_space(0x200B));
  for (int b = 0; b < 256; ++b) {
    size_t i = 0;
    EXPECT_EQ(piece_char_to_byte(next_code_point(byte_to_piece(uint8_t(b)), i)), b);
  }
}

std::vector<std::string> pieces(SplitPattern p, std::string_view s) {
  std::vector<std::string> out;
  for (const Span& sp : split_by_pattern(p, s)) out.emplace_back(s.substr(sp.begin, sp.end - sp.begin));
  return out;
}

TEST(PreTokenize, PatternsFollowRegexSemantics) {
  using V = std::vector<std::string>;
  EXPECT_EQ(pieces(SplitPattern::gpt2, "Hello  world's 123\n"), (V{"Hello", " ", " world", "'s", " 123", "\n"}));
  EXPECT_EQ(pieces(SplitPattern::cl100k, "I'M 12345 x\t\tyes!!\n\n"), (V{"I", "'M", " ", "123", "45", " x", "\t", "\tyes", "!!\n\n"}));
  EXPECT_EQ(pieces(SplitPattern::qwen2, "a 123  \n b"), (V{"a", " ", "1", "2", "3", "  \n", " b"}));
  EXPECT_EQ(pieces(SplitPattern::o200k, "HTTPServer McDonald's a/b//\n"), (V{"HTTPServer", " Mc", "Donald's", " a", "/b", "//\n"}));
  EXPECT_EQ(split_by_pattern(SplitPattern::gpt2, "").size(), 0u);
  EXPECT_FALSE(recognise_split_pattern("\\w+").has_value());
  for (SplitPattern p : {SplitPattern::gpt2, SplitPattern::cl100k, SplitPattern::qwen2, SplitPattern::o200k})
    EXPECT_EQ(recognise_split_pattern(split_pattern_regex(p)), p);
}

TEST(PreTokenize, PiecesCoverArbitraryBytes) {
  std::mt19937 rng(7);
  for (int trial = 0; trial < 200; ++trial) {
    std::string s;
    int n = int(rng() % 40);
    for (int i = 0; i < n; ++i) s += char(rng() % 256);
    for (SplitPattern p : {SplitPattern::gpt2, SplitPattern::cl100k, SplitPattern::qwen2, SplitPattern::o200k}) {
      std::string joined;
      for (const std::string& piece : pieces(p, s)) {
        EXPECT_FALSE(piece.empty());
        joined += piece;
      }
      EXPECT_EQ(joined, s);
    }
  }
}

// Loader errors name the file and the field.
std::string load_error(const Json& j) {
  try {
    Tokenizer::from_json(j, "tok.json");
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "";
}

TEST(Tokenizer, BadFilesAreErrorsNamingTheField) {
  Json good = parse_json_file(fixture_path("o200k.tokenizer.json"));
  EXPECT_EQ(load_error(good), "");
  auto expect_error = [&](auto edit, std::initializer_list<const char*> parts) {
    Json j = good;
    edit(j);
    std::string msg = load_error(j);
    ASSERT_FALSE(msg.empty()) << "accepted";
    EXPECT_NE(msg.find("tok.json"), std::string::npos) << msg;
    for (const char* part : parts) EXPECT_NE(msg.find(part), std::string::npos) << msg;
  };
  expect_error([](Json& j) { j.erase("model"); }, {"model", "missing"});
  expect_error([](Json& j) { j["model"]["type"] = "WordPiece"; }, {"model.type", "BPE"});
  expect_error([](Json& j) { j["model"]["vocab"]["x"] = "seven"; }, {"model.vocab", "\"x\""});
  expect_error([](Json& j) { j["model"]["vocab"].erase("Ġ"); }, {"model.vocab", "byte 32"});
  expect_error([](Json& j) { j["model"]["merges"][0] = 5; }, {"model.merges[0]"});
  expect_error([](Json& j) { j["model"]["merges"].push_back("zzzq qqq"); }, {"model.merges", "not in the vocab"});
  expect_error([](Json& j) { j["model"]["unk_token"] = "<nope>"; }, {"model.unk_token", "<nope>", "not in the vocab"});
  expect_error([](Json& j) { j["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = "(\\w+"; },
               {"pre_tokenizer.pretokenizers[0].pattern.Regex", "(\\w+", "does not compile"});
  expect_error([](Json& j) { j["pre_tokenizer"]["pretokenizers"][0]["behavior"] = "Sideways"; }, {"behavior", "Sideways"});
  expect_error([](Json& j) { j["normalizer"] = Json{{"type", "Lowercase"}}; }, {"normalizer.type", "Lowercase"});
  expect_error([](Json& j) { j["added_tokens"][0]["id"] = -3; }, {"added_tokens[0].id"});
  expect_error([](Json& j) { j["added_tokens"][0]["content"] = 12; }, {"added_tokens[0].content"});
  expect_error([](Json& j) { j["decoder"] = Json{{"type", "CTC"}}; }, {"decoder.type", "CTC", "not supported"});
  expect_error([](Json& j) { j["decoder"] = Json{{"type", "Strip"}, {"content", "ab"}, {"start", 1}, {"stop", 0}}; },
               {"decoder.content", "one character"});
  expect_error([](Json& j) { j["pre_tokenizer"] = Json{{"type", "Metaspace"}, {"replacement", "_"}, {"prepend_scheme", "sometimes"}}; },
               {"pre_tokenizer.prepend_scheme", "sometimes"});
  expect_error([](Json& j) { j["model"]["vocab"]["Ġ"] = j["model"]["vocab"]["!"]; }, {"model.vocab", "given to both"});
  EXPECT_THROW(Tokenizer::load(fixture_path("no_such_file.json")), ConfigError);
}

}  // namespace
}  // namespace wren::text
