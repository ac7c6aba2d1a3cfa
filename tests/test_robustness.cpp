// Hostile input, end to end (issue 14): every reproducer the issue lists is refused by `wren`
// with exit status 1 and a message naming the file, instead of a crash, a hang, an unbounded
// allocation or garbage with exit 0. The strict JSON reader and the bounded value text are
// tested against what they must be by definition (input order, the first characters of dump()).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "config/json_reader.h"
#include "io/safetensors.h"
#include "run_command.h"
#include "runtime/generation.h"
#include "runtime/session_budget.h"
#include "serve/chat_template.h"
#include "serve/request.h"
#include "test_util.h"

namespace wren {
namespace {

namespace fs = std::filesystem;
using testing_util::CommandResult;
using testing_util::TempDir;

CommandResult wren_cli(const std::string& args) { return testing_util::run_command(std::string(WREN_BINARY) + " " + args); }

void write(const fs::path& p, const std::string& text) { std::ofstream(p, std::ios::binary) << text; }

std::string slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// A refusal: exit 1, the file named, the reason given (and no sanitizer / crash report).
void expect_refused(const CommandResult& r, const std::string& file, const std::string& reason) {
  EXPECT_EQ(r.status, 1) << r.output;
  EXPECT_NE(r.output.find(file), std::string::npos) << "the message must name " << file << ":\n" << r.output;
  EXPECT_NE(r.output.find(reason), std::string::npos) << "expected \"" << reason << "\" in:\n" << r.output;
  EXPECT_EQ(r.output.find("bad_alloc"), std::string::npos) << r.output;
}

const char* kTinyConfig = R"({
  "name": "tiny", "d_model": 16, "vocab_size": 257, "vocab_pad": 7, "context_length": 64,
  "mixers": {"a": {"kind": "attention", "n_heads": 2, "n_kv_heads": 1, "head_dim": 8}},
  "ffns": {"d": {"kind": "dense", "activation": "swiglu", "hidden": 24}},
  "layers": [{"mixer": "a", "ffn": "d", "repeat": 2}]
})";

// A small f32 model directory made by `wren init`.
fs::path tiny_model(const TempDir& t) {
  const fs::path config = t.path / "tiny.json", dir = t.path / "model";
  write(config, kTinyConfig);
  const CommandResult r = wren_cli("init " + config.string() + " -o " + dir.string() + " --dtype f32");
  EXPECT_EQ(r.status, 0) << r.output;
  return dir;
}

// ---- JSON: depth, size, numbers, duplicate keys, order ---------------------------------

TEST(Robustness, NestingBombIsRefusedNamingTheFile) {
  TempDir t;
  const fs::path bomb = t.path / "bomb.json";
  write(bomb, std::string(100000, '[') + std::string(100000, ']'));  // 200 KB
  expect_refused(wren_cli("explore " + bomb.string()), bomb.string(), "nested deeper than 64 levels");
  expect_refused(wren_cli("explore --hf " + bomb.string()), bomb.string(), "nested deeper than 64 levels");
  // Inside a value the reader would otherwise copy, and inside a model directory's tokenizer.json.
  const fs::path deep = t.path / "deep.json";
  write(deep, "{\"d_model\": " + std::string(100000, '[') + std::string(100000, ']') + "}");
  expect_refused(wren_cli("explore " + deep.string()), deep.string(), "nested deeper");
  const fs::path dir = tiny_model(t);
  write(dir / "tokenizer.json", "{\"model\": {\"vocab\": " + std::string(100000, '[') + std::string(100000, ']') + "}}");
  expect_refused(wren_cli("generate -m " + dir.string() + " hi -n 1"), (dir / "tokenizer.json").string(), "nested deeper");
}

TEST(Robustness, NumberOverflowNamesTheFile) {
  TempDir t;
  const fs::path f = t.path / "big.json";
  write(f, R"({"name": "x", "d_model": 1e400})");
  expect_refused(wren_cli("explore " + f.string()), f.string(), "1e400");
  EXPECT_THROW(parse_json("[1e400]", "x"), ConfigError);
  EXPECT_THROW(parse_json("[-1e400]", "x"), ConfigError);
}

TEST(Robustness, ParseKeepsOrderRefusesDuplicatesAndLimits) {
  // 300k keys in reverse order: the parsed object iterates in file order.
  std::string text = "{";
  const int n = 300000;
  for (int i = n - 1; i >= 0; --i) text += "\"k" + std::to_string(i) + "\":" + std::to_string(i) + (i ? "," : "");
  text += "}";
  const Json j = parse_json(text, "big");
  ASSERT_EQ(j.size(), size_t(n));
  int expect = n - 1;
  for (auto it = j.begin(); it != j.end(); ++it, --expect) {
    ASSERT_EQ(it.key(), "k" + std::to_string(expect));
    ASSERT_EQ(it->get<int>(), expect);
  }
  EXPECT_THROW(parse_json(R"({"a": 1, "b": 2, "a": 3})", "dup"), ConfigError);
  try {
    parse_json(R"({"a": {"x": 1, "x": 2}})", "dup.json");
    FAIL() << "a duplicate key was accepted";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("dup.json: duplicate key \"x\""), std::string::npos) << e.what();
  }
  EXPECT_THROW(parse_json("{\"a\": 1} x", "trailing"), ConfigError);
  EXPECT_THROW(parse_json(std::string(70, '[') + std::string(70, ']'), "deep"), ConfigError);
  EXPECT_NO_THROW(parse_json(std::string(64, '[') + std::string(64, ']'), "deep"));  // the limit itself is fine
  EXPECT_THROW(parse_json("[1, 2, 3]", "small", {.max_bytes = 8}), ConfigError);
  // Values equal nlohmann's own parse of the same text.
  const std::string mixed = R"({"s": "a\u00e9\n", "i": -3, "u": 18446744073709551615, "f": 0.5, "t": true, "n": null, "l": [[], {}, [1]]})";
  EXPECT_EQ(parse_json(mixed, "mixed"), Json::parse(mixed));
}

TEST(Robustness, ValueTextIsABoundedPrefixOfTheDump) {
  Json big = Json::array();
  for (int i = 0; i < 100000; ++i) big.push_back({{"key", i}, {"text", std::string(50, 'x')}});
  const std::string shown = json_value_text(big);
  const std::string dump = big[0].dump();
  EXPECT_EQ(shown.substr(0, 1 + 20), ("[" + dump).substr(0, 21)) << shown;
  EXPECT_LE(shown.size(), 60u + 10u) << shown;
  EXPECT_NE(shown.find("...") , std::string::npos);
  EXPECT_NE(shown.find("(list)"), std::string::npos);
  EXPECT_EQ(json_value_text(Json(42)), "42 (number)");
  EXPECT_EQ(json_value_text(Json("ab")), "\"ab\" (string)");
  // A value as deep as the reader allows renders without walking all of it.
  Json deep = Json::array();
  for (int i = 0; i < 63; ++i) deep = Json::array({std::move(deep)});
  EXPECT_EQ(json_value_text(deep).substr(0, 10), "[[[[[[[[[[");
}

// ---- Bounds before allocation -----------------------------------------------------------

TEST(Robustness, LayerCountsAreBounded) {
  TempDir t;
  const fs::path hf = t.path / "config.json";
  std::string llama = slurp(fs::path(WREN_SOURCE_DIR) / "tests/fixtures/hf/llama-3.1-8b.json");
  const size_t at = llama.find("\"num_hidden_layers\": 32");
  ASSERT_NE(at, std::string::npos);
  llama.replace(at, std::strlen("\"num_hidden_layers\": 32"), "\"num_hidden_layers\": 1000000000");
  write(hf, llama);
  expect_refused(wren_cli("explore --hf " + hf.string()), hf.string(), "num_hidden_layers: value 1000000000 must be <= 1024");

  // repeat 10^7, and many small repeats adding up past the limit.
  std::string repeat = kTinyConfig;
  repeat.replace(repeat.find("\"repeat\": 2"), std::strlen("\"repeat\": 2"), "\"repeat\": 10000000");
  write(t.path / "repeat.json", repeat);
  expect_refused(wren_cli("explore " + (t.path / "repeat.json").string()), (t.path / "repeat.json").string(),
                 "layers[0].repeat: value 10000000 must be <= 1024");
  std::string many = kTinyConfig;
  std::string layers = "\"layers\": [";
  for (int i = 0; i < 300; ++i) layers += std::string(i ? "," : "") + R"({"mixer": "a", "ffn": "d", "repeat": 1000})";
  many.replace(many.find("\"layers\": ["), std::strlen("\"layers\": [{\"mixer\": \"a\", \"ffn\": \"d\", \"repeat\": 2}"), layers);
  write(t.path / "many.json", many);
  expect_refused(wren_cli("explore " + (t.path / "many.json").string()), (t.path / "many.json").string(),
                 "more than 1024 layers");
}

TEST(Robustness, ConfigLinkedToDevZeroIsRefused) {
  TempDir t;
  const fs::path dir = tiny_model(t);
  fs::remove(dir / "config.json");
  fs::create_symlink("/dev/zero", dir / "config.json");
  expect_refused(wren_cli("generate -m " + dir.string() + " hi -n 1"), (dir / "config.json").string(), "larger than the limit");
  expect_refused(wren_cli("explore " + (dir / "config.json").string()), (dir / "config.json").string(), "larger than the limit");
}

TEST(Robustness, ContextBeyondTheModelIsRefused) {
  TempDir t;
  const fs::path dir = tiny_model(t);
  expect_refused(wren_cli("generate -m " + dir.string() + " hi -n 1 --context 2000000000"), dir.string(),
                 "above the model's context_length 64 (add --beyond-context");
  // Asked for explicitly, the cache is sized against the machine first: 2e9 tokens of two
  // layers of 2 x 8 f32 K/V is ~140 GB, more than this machine has.
  const CommandResult r = wren_cli("generate -m " + dir.string() + " hi -n 1 --context 2000000000 --beyond-context");
  EXPECT_EQ(r.status, 1) << r.output;
  EXPECT_NE(r.output.find("more than the"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("of memory available"), std::string::npos) << r.output;
  // Within the model's context, and a little beyond when asked, it runs.
  EXPECT_EQ(wren_cli("generate -m " + dir.string() + " hi -n 2 --context 64").status, 0);
  EXPECT_EQ(wren_cli("generate -m " + dir.string() + " hi -n 2 --context 80 --beyond-context").status, 0);
}

TEST(Robustness, SessionBytesCountEveryCache) {
  // Two attention layers with 1 KV head of 8: 2 x 2 x 8 f32 = 128 bytes of K/V per token, plus
  // 12 bytes of history and scores per token.
  const ModelConfig c = [] {
    TempDir t;
    write(t.path / "c.json", kTinyConfig);
    return parse_model_config(parse_json_file((t.path / "c.json").string()), "c.json");
  }();
  EXPECT_DOUBLE_EQ(session_bytes(c, 1000), 1000.0 * (128 + 12));
  EXPECT_GT(available_memory_bytes(), 1e6);
  EXPECT_NO_THROW(check_session_memory(c, 1000));
  EXPECT_THROW(check_session_memory(c, int64_t(1) << 40), std::runtime_error);
}

TEST(Robustness, SparseVocabularyIdIsRefused) {
  TempDir t;
  // Take a real tokenizer and move one token to id 2^24.
  Json tok = parse_json_file(std::string(WREN_SOURCE_DIR) + "/tests/fixtures/tokenizer/gpt2_style.tokenizer.json");
  Json& v = tok["model"]["vocab"];
  v.begin().value() = int64_t(1) << 24;
  const fs::path f = t.path / "tokenizer.json";
  write(f, tok.dump());
  expect_refused(wren_cli("tokenizer encode -t " + f.string() + " hello"), f.string(), "id 16777216 leaves more than");
}

// ---- Numerical faults --------------------------------------------------------------------

TEST(Robustness, NanWeightsAreRefusedAtLoad) {
  TempDir t;
  const fs::path dir = tiny_model(t);
  ASSERT_EQ(wren_cli("generate -m " + dir.string() + " hi -n 2").status, 0);
  // Poison one value of the first f32 tensor of model.safetensors.
  const fs::path file = dir / "model.safetensors";
  std::string bytes = slurp(file);
  const SafetensorsHeader h =
      parse_safetensors_header(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(), bytes.size(), file.string());
  const TensorView* target = nullptr;
  for (const TensorView& tv : h.tensors)
    if (tv.dtype == Dtype::F32 && tv.nbytes >= 8) target = &tv;
  ASSERT_NE(target, nullptr);
  const float nan = std::nanf("");
  std::memcpy(bytes.data() + target->file_offset + 4, &nan, 4);
  write(file, bytes);
  expect_refused(wren_cli("generate -m " + dir.string() + " hi -n 2"), file.string(), "tensor " + target->name + ": value 1 is NaN or Inf");
}

TEST(Robustness, NonFiniteLogitsStopGeneration) {
  TempDir t;
  write(t.path / "c.json", kTinyConfig);
  const ModelConfig c = parse_model_config(parse_json_file((t.path / "c.json").string()), "c.json");
  std::vector<float> logits(264, 0.5f);
  logits[263] = -INFINITY;  // a masked row is fine
  EXPECT_NO_THROW(check_finite_logits(logits, 264, c, 3));
  logits[100] = INFINITY;
  EXPECT_THROW(check_finite_logits(logits, 264, c, 3), std::runtime_error);
  EXPECT_NO_THROW(check_finite_logits(logits, 100, c, 3));  // only the rows asked for
  logits[100] = std::nanf("");
  try {
    check_finite_logits(logits, 264, c, 3);
    FAIL() << "a NaN logit passed";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("logit of token 100 is NaN at position 3"), std::string::npos) << e.what();
  }
}

// ---- HF import reads back ----------------------------------------------------------------

TEST(Robustness, HfImportRefusesWhatTheReaderRefuses) {
  TempDir t;
  std::string llama = slurp(fs::path(WREN_SOURCE_DIR) / "tests/fixtures/hf/llama-3.1-8b.json");
  const size_t at = llama.find("\"rms_norm_eps\": 1e-05");
  ASSERT_NE(at, std::string::npos);
  llama.replace(at, std::strlen("\"rms_norm_eps\": 1e-05"), "\"rms_norm_eps\": 0");
  const fs::path hf = t.path / "config.json";
  write(hf, llama);
  expect_refused(wren_cli("explore --hf " + hf.string()), hf.string(), "rms_norm_eps");
}

// ---- The server's request bodies and a model's tokenizer_config.json -----------------------

TEST(Robustness, RequestBodyNestingBombIsA400) {
  // 100,000 levels inside a field the parser quotes in its error: refused at depth 64, before
  // anything recursive (a dump, a copy) walks it.
  const std::string body = R"({"prompt": "hi", "temperature": )" + std::string(100000, '[') + std::string(100000, ']') + "}";
  try {
    serve::parse_request(body, false);
    FAIL() << "a nesting bomb was accepted";
  } catch (const serve::RequestError& e) {
    EXPECT_EQ(e.status, 400);
    EXPECT_NE(std::string(e.what()).find("the request body: nested deeper than 64 levels"), std::string::npos) << e.what();
  }
}

TEST(Robustness, RequestErrorsQuoteABoundedPrefix) {
  // A 1 MB string where a number belongs: the message shows 60 characters of it, not all.
  const std::string big(1 << 20, 'x');
  for (const std::string& body : {R"({"prompt": "hi", "temperature": ")" + big + R"("})",
                                  R"({"prompt": {"a": ")" + big + R"("}})", std::string(R"({"prompt": 1e400})")}) {
    try {
      serve::parse_request(body, false);
      FAIL() << "accepted";
    } catch (const serve::RequestError& e) {
      EXPECT_EQ(e.status, 400);
      EXPECT_LT(std::string(e.what()).size(), 300u) << std::string(e.what()).substr(0, 300);
    }
  }
}

TEST(Robustness, AChatRoleIsQuotedBoundedAndAsValidUtf8) {
  // Found by fuzz_serve_request (tests/fuzz/corpus/serve_request/role_of_escapes): an unknown
  // role was quoted whole, so a long one made an unbounded message; and a 60-byte cut could
  // split a 3-byte character, which the server's JSON error body cannot carry.
  std::string escapes;
  for (int i = 0; i < 300; ++i) escapes += "\\uAAAA";
  for (const std::string& role : {escapes, std::string(100000, 'A'), "ab" + escapes}) {
    const std::string body = R"({"messages": [{"role": ")" + role + R"(", "content": "x"}]})";
    try {
      serve::parse_request(body, true);
      FAIL() << "an unknown role was accepted";
    } catch (const serve::RequestError& e) {
      const std::string what = e.what();
      EXPECT_EQ(e.status, 400);
      EXPECT_LT(what.size(), 300u) << what.substr(0, 300);
      EXPECT_NE(what.find("messages[0].role"), std::string::npos) << what;
      EXPECT_NO_THROW((void)nlohmann::json(what).dump()) << "not valid UTF-8: " << what;
    }
  }
}

TEST(Robustness, TokenizerConfigIsReadWithinLimits) {
  TempDir t;
  write(t.path / "tokenizer_config.json", R"({"chat_template": )" + std::string(100000, '[') + std::string(100000, ']') + "}");
  const std::string file = (t.path / "tokenizer_config.json").string();
  try {
    serve::chat_format_for(t.path.string(), "");
    FAIL() << "a nesting bomb was accepted";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find(file + ": nested deeper than 64 levels"), std::string::npos) << e.what();
  }
  fs::remove(t.path / "tokenizer_config.json");
  fs::create_symlink("/dev/zero", t.path / "tokenizer_config.json");
  try {
    serve::chat_format_for(t.path.string(), "");
    FAIL() << "/dev/zero was accepted";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find(file + ": larger than the limit"), std::string::npos) << e.what();
  }
}

// ---- Prompts from a file or stdin --------------------------------------------------------

TEST(Robustness, PromptFromFileOrStdinEqualsTheArgument) {
  TempDir t;
  const fs::path dir = tiny_model(t);
  const std::string prompt = "It was a dark and stormy night";  // 30 byte tokens + 8 < the context of 64
  write(t.path / "prompt.txt", prompt);
  const std::string gen = "generate -m " + dir.string() + " -n 8 --temp 0 ";
  const CommandResult arg = wren_cli(gen + "'" + prompt + "'");
  ASSERT_EQ(arg.status, 0) << arg.output;
  const CommandResult file = wren_cli(gen + "-f " + (t.path / "prompt.txt").string());
  const CommandResult in = testing_util::run_command("cat " + (t.path / "prompt.txt").string() + " | " +
                                                     std::string(WREN_BINARY) + " " + gen + "-f -");
  EXPECT_EQ(file.status, 0) << file.output;
  EXPECT_EQ(file.output, arg.output);
  EXPECT_EQ(in.output, arg.output);
  const std::string tok = "tokenizer encode -t " + (dir / "tokenizer.json").string() + " ";
  const CommandResult targ = wren_cli(tok + "'" + prompt + "'");
  ASSERT_EQ(targ.status, 0) << targ.output;
  EXPECT_EQ(wren_cli(tok + "-f " + (t.path / "prompt.txt").string()).output, targ.output);
  expect_refused(wren_cli(gen + "-f " + (t.path / "missing.txt").string()), (t.path / "missing.txt").string(), "cannot open");
}

}  // namespace
}  // namespace wren
