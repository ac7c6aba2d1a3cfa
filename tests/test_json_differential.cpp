// wren's strict JSON reader (config/json_parse.cpp) against nlohmann's parser, the oracle
// (tests/fuzz/json_oracle.h): hand-written texts at every edge the grammar has, the fuzz
// target's seeds, and random texts built from valid and invalid pieces, then damaged.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "fuzz/json_oracle.h"

namespace wren {
namespace {

using json_oracle::json_disagreement;

std::string printable(const std::string& text) {
  std::string s;
  for (unsigned char c : text.substr(0, 300)) {
    if (c >= 0x20 && c < 0x7F) s += char(c);
    else s += "\\x" + std::string(1, "0123456789abcdef"[c >> 4]) + "0123456789abcdef"[c & 15];
  }
  return s;
}

void expect_agrees(const std::string& text, const JsonLimits& limits = {}) {
  EXPECT_EQ(json_disagreement(text, limits), "") << "text: " << printable(text);
}

TEST(JsonDifferential, Literals) {
  for (const char* text : {"true", "false", "null", " \t\r\n null \n", "tru", "nul", "fals", "truex", "True", "NULL",
                           "nan", "NaN", "Infinity", "-Infinity", "", " ", "\f1", "1\v", "undefined", "'a'"})
    expect_agrees(std::string(text));
  expect_agrees(std::string("1\0", 2));
  expect_agrees(std::string("\0", 1));
}

TEST(JsonDifferential, NumbersAtTheEdges) {
  for (const char* text :
       {"0", "-0", "-0.0", "0.0", "1", "-1", "01", "-01", "00", "1.", ".5", "-.5", "+1", "-", "--1", "1e", "1e+", "1E-",
        "1e5", "1E5", "1e+5", "1e-5", "1.5e3", "0e0", "0.0e-0", "1.0e+", "0x10", "1_000", "1 2", "12a",
        "9223372036854775807", "9223372036854775808", "-9223372036854775808", "-9223372036854775809",
        "18446744073709551615", "18446744073709551616", "-18446744073709551616", "99999999999999999999999999",
        "1.7976931348623157e308", "1.7976931348623159e308", "-1.7976931348623159e308", "1e308", "1e309", "1e400",
        "-1e400", "1e-400", "-1e-400", "4.9e-324", "2.4e-324", "2.5e-324", "2.2250738585072014e-308",
        "0.1", "0.30000000000000004", "123456789012345678901234567890e-10", "1e00000000000000000000000001",
        "[1,-2,3.5,1e2]", "[1e400]", "{\"a\":1e400}", "[-]", "[1.]", "[01]", "[1,]"})
    expect_agrees(std::string(text));
  expect_agrees("1" + std::string(400, '0'));   // a double past the largest: refused
  expect_agrees("0." + std::string(400, '0') + "1");
}

TEST(JsonDifferential, StringsEscapesAndUtf8) {
  for (const char* text :
       {R"("")", R"("abc")", R"("\"\\\/\b\f\n\r\t")", R"("\u0000")", R"("\u0041\u00e9\u20AC\uFFFF")",
        R"("\uD83D\uDE00")", R"("\ud83d\ude00")", R"("\uD800")", R"("\uDC00")", R"("\uD800\uD800")",
        R"("\uD800\u0041")", R"("\uD800x")", R"("\uD800\")", R"("\uDBFF\uDFFF")", R"("\uDFFF\uD800")",
        R"("\u12")", R"("\u12G4")", R"("\U0041")", R"("\x41")", R"("\a")", R"("\'")", R"("\)", R"("abc)", R"(")",
        R"("\u)", R"("\uD800\u)", "\"a\tb\"", "\"a\nb\"", "\"\x1f\"", "\"\x7f\"", "\"\xc3\xa9\"", "\"\xe2\x82\xac\"",
        "\"\xf0\x9f\x98\x80\"", "\"\xf4\x8f\xbf\xbf\"", "\"\xf4\x90\x80\x80\"", "\"\xc0\xaf\"", "\"\xc1\xbf\"",
        "\"\xc2\x80\"", "\"\xe0\x80\xaf\"", "\"\xe0\xa0\x80\"", "\"\xed\x9f\xbf\"", "\"\xed\xa0\x80\"",
        "\"\xef\xbf\xbf\"", "\"\xf0\x8f\xbf\xbf\"", "\"\xf0\x90\x80\x80\"", "\"\xf5\x80\x80\x80\"", "\"\xff\"",
        "\"\x80\"", "\"\xbf\"", "\"\xc3\"", "\"\xe2\x82\"", "\"\xf0\x9f\x98\"", "\"\xc3\x28\"", "\"\xe2\x28\xa1\"",
        "\"\xf0\x9f\x28\x80\"", "\xef\xbb\xbf\"bom\"", "\xef\xbb\xbf", "\xef\xbb", "\xef\"x\"", " \xef\xbb\xbf" "1",
        "\xef\xbb\xbf\xef\xbb\xbf" "1", "\"\xc3\xa9", "{\"\xff\": 1}", "{\"\\uD800\": 1}"})
    expect_agrees(std::string(text));
}

TEST(JsonDifferential, StructuresAndKeys) {
  for (const char* text :
       {"[]", "{}", "[ ]", "{ }", "[1,2]", "[1 2]", "[1,,2]", "[,1]", "[1,]", "{\"a\":1,}", "{,}", "{\"a\"}", "{\"a\":}",
        "{\"a\" 1}", "{a:1}", "{'a':1}", "{1:1}", "{\"a\":1 \"b\":2}", "[", "]", "{", "}", "[[]", "[]]", "{\"a\":[}]",
        "[1]x", "[1] [2]", "{} {}", "[1]  \n", "{\"a\":1,\"a\":2}", "{\"a\":1,\"b\":{\"a\":2}}", "[{\"a\":1},{\"a\":2}]",
        "{\"a\":{\"b\":1,\"b\":1}}", "{\"\":1,\"\":2}", "{\"\\u0061\":1,\"a\":2}", "{\"a\\u0000\":1,\"a\":2}",
        "{\"z\":1,\"a\":2,\"m\":3}", "[/*c*/1]", "[1]//c", "[1]#", "[true,false,null,\"x\",{\"k\":[0]}]"})
    expect_agrees(std::string(text));
}

TEST(JsonDifferential, DepthAndSizeLimits) {
  for (int depth : {1, 2, 63, 64, 65, 200}) {
    expect_agrees(std::string(size_t(depth), '[') + std::string(size_t(depth), ']'));
    std::string objects;
    for (int i = 0; i < depth; ++i) objects += "{\"k\":";
    expect_agrees(objects + "0" + std::string(size_t(depth), '}'));
    expect_agrees(std::string(size_t(depth), '[') + std::string(size_t(depth) - 1, ']'));  // unclosed too
  }
  expect_agrees(std::string("[[[1]]]"), JsonLimits{.max_depth = 2});
  expect_agrees(std::string("[[1]]"), JsonLimits{.max_depth = 2});
  expect_agrees(std::string("1"), JsonLimits{.max_depth = 0});
  expect_agrees(std::string("[1]"), JsonLimits{.max_depth = 0});
  expect_agrees(std::string("[1, 2, 3]"), JsonLimits{.max_bytes = 8});
  expect_agrees(std::string("[1, 2, 3]"), JsonLimits{.max_bytes = 9});
}

TEST(JsonDifferential, FuzzSeeds) {
  namespace fs = std::filesystem;
  int seeds = 0;
  for (const auto& e : fs::directory_iterator(fs::path(WREN_SOURCE_DIR) / "tests/fuzz/corpus/json")) {
    std::ifstream in(e.path(), std::ios::binary);
    const std::string text{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
    EXPECT_EQ(json_disagreement(text), "") << e.path();
    ++seeds;
  }
  EXPECT_GE(seeds, 5);
}

// Random texts: values made of pieces chosen to sit on the grammar's edges (a few of them
// invalid), joined with valid or wrong punctuation; then, one time in three, damaged bytes.
class RandomJson {
 public:
  explicit RandomJson(uint32_t seed) : rng_(seed) {}

  std::string text() {
    std::string t = pick(0.02) ? "\xef\xbb\xbf" : "";
    t += space() + value(0) + space();
    if (pick(0.03)) t += pick(0.5) ? "x" : ",";
    if (pick(0.33)) damage(t);
    return t;
  }

 private:
  bool pick(double p) { return std::uniform_real_distribution<double>(0, 1)(rng_) < p; }
  size_t below(size_t n) { return size_t(rng_() % n); }
  template <size_t N>
  std::string one_of(const char* const (&pieces)[N]) { return pieces[below(N)]; }

  std::string space() {
    static const char* const kSpaces[] = {"", "", "", " ", "\n", "\t", "\r\n  ", "\f", "\v"};
    return pick(0.3) ? one_of(kSpaces) : "";
  }

  std::string value(int depth) {
    const size_t kind = below(depth > 6 ? 3 : 5);
    if (kind == 0) return number();
    if (kind == 1) return string();
    if (kind == 2) {
      static const char* const kLiterals[] = {"true", "false", "null", "tru", "nul", "TRUE", "nan"};
      return one_of(kLiterals);
    }
    const bool object = kind == 3;
    std::string t(1, object ? '{' : '[');
    const size_t n = below(6);
    for (size_t i = 0; i < n; ++i) {
      if (i) t += pick(0.02) ? "" : ",";
      t += space();
      if (object) t += key() + space() + (pick(0.02) ? "" : ":") + space();
      t += value(depth + 1) + space();
    }
    if (pick(0.03)) t += ",";
    return t + (pick(0.01) ? (object ? ']' : '}') : (object ? '}' : ']'));
  }

  std::string number() {
    static const char* const kSigns[] = {"", "", "", "-", "+", "--"};
    static const char* const kIntegers[] = {"0", "1", "7", "42", "00", "01", "10", "9223372036854775807",
                                            "9223372036854775808", "18446744073709551615", "18446744073709551616",
                                            "123456789012345678901234567890", ""};
    static const char* const kFractions[] = {"", "", "", ".5", ".0", ".", ".25e1", ".1234567890123456789"};
    static const char* const kExponents[] = {"", "", "", "", "e5", "E-3", "e+2", "e", "e+", "e308", "e309",
                                             "e400", "e-400", "e-324", "E00001"};
    return one_of(kSigns) + one_of(kIntegers) + one_of(kFractions) + one_of(kExponents);
  }

  // Keys from a small alphabet, so that an object repeats one now and then.
  std::string key() {
    static const char* const kKeys[] = {"\"a\"", "\"b\"", "\"\"", "\"\\u0061\"", "\"k\\n\"", "\"\xc3\xa9\"", "a", "1"};
    return pick(0.98) ? one_of(kKeys) : string();
  }

  std::string string() {
    static const char* const kPieces[] = {
        "a", "xyz", " ", "\\\"", "\\\\", "\\/", "\\b", "\\f", "\\n", "\\r", "\\t", "\\u0000", "\\u00e9", "\\u20AC",
        "\\uD83D\\uDE00", "\\udbff\\udfff", "\\uD800", "\\uDC00", "\\uD800\\u0041", "\\u12", "\\x", "\\", "\t",
        "\x01", "\x7f", "\xc3\xa9", "\xe2\x82\xac", "\xf0\x9f\x98\x80", "\xf4\x8f\xbf\xbf", "\xf4\x90\x80\x80",
        "\xc0\xaf", "\xed\xa0\x80", "\xe0\x80\x80", "\xf0\x80\x80\x80", "\x80", "\xff", "\xc3", "\xe2\x82"};
    std::string s = "\"";
    for (size_t n = below(5); n > 0; --n) s += pick(0.85) ? kPieces[below(14)] : one_of(kPieces);
    return pick(0.99) ? s + "\"" : s;
  }

  void damage(std::string& t) {
    static const char* const kBytes[] = {"\"", "\\", ",", ":", "[", "]", "{", "}", " ", "0", "-", ".", "e", "\x80", "\xc3"};
    for (size_t n = 1 + below(3); n > 0 && !t.empty(); --n) {
      const size_t at = below(t.size());
      switch (below(4)) {
        case 0: t[at] = char(rng_()); break;
        case 1: t.resize(at); break;
        case 2: t.erase(at, 1); break;
        default: t.insert(at, one_of(kBytes)); break;
      }
    }
  }

  std::mt19937 rng_;
};

TEST(JsonDifferential, RandomTexts) {
  RandomJson random(14);
  int accepted = 0;
  for (int i = 0; i < 20000; ++i) {
    const std::string text = random.text();
    const std::string disagreement = json_disagreement(text);
    ASSERT_EQ(disagreement, "") << "text " << i << ": " << printable(text);
    accepted += json_oracle::nlohmann_verdict(text).accepted;
  }
  // Both sides of the check must be exercised: texts nlohmann accepts and texts it refuses.
  EXPECT_GT(accepted, 2000);
  EXPECT_LT(accepted, 18000);
}

TEST(JsonDifferential, RandomTextsUnderTightLimits) {
  RandomJson random(15);
  for (int i = 0; i < 5000; ++i) {
    const std::string text = random.text();
    const JsonLimits limits{.max_bytes = 40, .max_depth = 2};
    ASSERT_EQ(json_disagreement(text, limits), "") << "text " << i << ": " << printable(text);
  }
}

}  // namespace
}  // namespace wren
