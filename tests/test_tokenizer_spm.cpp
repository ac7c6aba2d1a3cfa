// SentencePiece-style tokenizers: a GGUF SentencePiece vocabulary (tokenizer.ggml.model
// "llama": tokens, scores, token types, no merges) converted to a tokenizer gives Hugging
// Face's ids on the real Llama 2 and Gemma vocabularies (the fixtures of test_tokenizer_hf),
// merges by score equal merges by rank, the decoders' steps on hand-made cases taken from
// Hugging Face's own tests and documentation, and streaming of byte-fallback characters.
#include <gtest/gtest.h>

#include <filesystem>
#include <memory>
#include <string>

#include "io/gguf.h"
#include "runtime/gguf_import.h"
#include "temp_dir.h"
#include "text/sentencepiece.h"
#include "text/tokenizer.h"

namespace wren {
namespace {

using testing_util::TempDir;
using text::Tokenizer;

std::string fixture_path(const std::string& name) {
  return std::string(WREN_SOURCE_DIR) + "/tests/fixtures/tokenizer/" + name;
}

GgufValue array_of(GgufType elem) {
  GgufValue v;
  v.type = GgufType::array, v.elem = elem;
  return v;
}

// A GGUF holding a llama model's metadata and, as tokenizer.ggml.*, the SentencePiece
// vocabulary behind a family's fixture tokenizer.json: its tokens by id (ids the subset left
// out become unused tokens), token types as llama.cpp's converter writes them (control for
// the added special tokens, unknown, byte for "<0xNN>", user-defined for the other added
// tokens), and scores, not merges. A SentencePiece BPE model's score of a piece is minus the
// step of training that made it; the subset's merges are in that order, so a piece's score is
// minus the rank of its first merge (pieces no merge makes score below all of them).
void write_spm_gguf(const std::string& family, const std::string& path, bool space_prefix, bool with_scores = true) {
  const Json tok = parse_json_file(fixture_path("hf_" + family + ".tokenizer.json"));
  const Json& vocab = tok["model"]["vocab"];
  size_t n = 0;
  for (auto it = vocab.begin(); it != vocab.end(); ++it) n = std::max(n, it.value().get<size_t>() + 1);
  GgufValue tokens = array_of(GgufType::string), scores = array_of(GgufType::f32), types = array_of(GgufType::i32);
  tokens.strings.resize(n);
  types.ints.assign(n, 5);
  scores.floats.assign(n, -1e9);
  for (size_t id = 0; id < n; ++id) tokens.strings[id] = "<unused gap " + std::to_string(id) + ">";
  for (auto it = vocab.begin(); it != vocab.end(); ++it) {
    const size_t id = it.value().get<size_t>();
    tokens.strings[id] = it.key();
    types.ints[id] = it.key().size() == 6 && it.key().rfind("<0x", 0) == 0 ? 6 : it.key() == "<unk>" ? 2 : 1;
  }
  for (const Json& a : tok["added_tokens"]) {
    const size_t id = a["id"].get<size_t>();
    if (types.ints[id] != 2) types.ints[id] = a["special"].get<bool>() ? 3 : 4;
  }
  const Json& merges = tok["model"]["merges"];
  for (size_t rank = merges.size(); rank-- > 0;) {
    const Json& m = merges[rank];
    std::string piece = m.is_string() ? m.get<std::string>() : m[0].get<std::string>() + " " + m[1].get<std::string>();
    piece.erase(m.is_string() ? piece.find(' ') : m[0].get<std::string>().size(), 1);
    scores.floats[vocab[piece].get<size_t>()] = -double(rank);
  }
  GgufWriter w;
  w.set_string("general.architecture", "llama");
  w.set_u32("llama.context_length", 64), w.set_u32("llama.embedding_length", 8), w.set_u32("llama.block_count", 1);
  w.set_u32("llama.feed_forward_length", 16), w.set_u32("llama.attention.head_count", 2);
  w.set_u32("llama.attention.head_count_kv", 2), w.set_f32("llama.attention.layer_norm_rms_epsilon", 1e-5f);
  w.set_string("tokenizer.ggml.model", "llama");
  w.set("tokenizer.ggml.tokens", tokens), w.set("tokenizer.ggml.token_type", types);
  if (with_scores) w.set("tokenizer.ggml.scores", scores);
  w.set_bool("tokenizer.ggml.add_space_prefix", space_prefix);
  // The embedding only gives the vocabulary size; no test here reads a weight.
  auto zeros = std::make_shared<std::vector<uint8_t>>(n * 8 * 4, 0);
  w.add_tensor("token_embd.weight", GgmlType::F32, {int64_t(n), 8}, [zeros](const ByteSink& sink) { sink(zeros->data(), zeros->size()); });
  w.write(path);
}

class GgufSentencePiece : public ::testing::TestWithParam<std::pair<const char*, bool>> {};

TEST_P(GgufSentencePiece, GivesHuggingFaceIds) {
  auto [family, space_prefix] = GetParam();
  TempDir dir;
  write_spm_gguf(family, dir / "m.gguf", space_prefix);
  GgufModel g(dir / "m.gguf");
  Tokenizer tok = Tokenizer::from_json(parse_json(g.tokenizer_json(), "gguf"), "gguf");
  Json cases = parse_json_file(fixture_path(std::string("hf_") + family + ".fixtures.json"));
  ASSERT_GE(cases.size(), 40u);
  for (size_t i = 0; i < cases.size(); ++i) {
    const std::string text = cases[i]["text"].get<std::string>();
    EXPECT_EQ(tok.encode(text), cases[i]["ids"].get<std::vector<int32_t>>()) << family << " case " << i << ": " << cases[i]["text"].dump();
    EXPECT_EQ(tok.decode(cases[i]["ids"].get<std::vector<int32_t>>()), cases[i]["decoded"].get<std::string>())
        << family << " case " << i;
  }
}

// Llama 2 puts a space in front; Gemma does not (add_space_prefix false in its GGUF files).
INSTANTIATE_TEST_SUITE_P(Real, GgufSentencePiece,
                         ::testing::Values(std::pair{"llama2", true}, std::pair{"gemma", false}));

TEST(GgufSentencePiece, ScoresWithoutOneEachAreANamedError) {
  TempDir dir;
  write_spm_gguf("llama2", dir / "n.gguf", true, false);
  try {
    GgufModel(dir / "n.gguf").tokenizer_json();
    FAIL() << "accepted a SentencePiece vocabulary without scores";
  } catch (const IoError& e) {
    EXPECT_NE(std::string(e.what()).find("tokenizer.ggml.scores"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("n.gguf"), std::string::npos) << e.what();
  }
}

// Merges by score, on a vocabulary small enough to work by hand: "abc" has the best score,
// so ("ab", "c") and ("a", "bc") come first, in the order of their halves' ids.
TEST(SentencePieceMerges, RankedByScoreThenByIds) {
  std::vector<std::string> pieces = {"a", "b", "c", "bc", "ab", "abc", "x"};
  std::vector<double> scores = {0, 0, 0, -2, -3, -1, 0};
  auto m = text::merges_from_scores(pieces, scores, std::vector<bool>(pieces.size(), true));
  using P = std::pair<std::string, std::string>;
  EXPECT_EQ(m, (std::vector<P>{{"a", "bc"}, {"ab", "c"}, {"b", "c"}, {"a", "b"}}));
  std::vector<bool> mergeable(pieces.size(), true);
  mergeable[3] = false;  // "bc" unused: neither a result nor a half
  EXPECT_EQ(text::merges_from_scores(pieces, scores, mergeable), (std::vector<P>{{"ab", "c"}, {"a", "b"}}));
}

// Streaming: characters that fall back to two, three or four <0xNN> tokens print once and
// whole, never as U+FFFD halves; the stream is the text (a stream continues a prompt, so the
// leading space Llama 2's Strip takes off the whole text stays).
TEST(StreamDecoder, ByteFallbackCharactersPrintWhole) {
  Tokenizer tok = Tokenizer::load(fixture_path("hf_llama2.tokenizer.json"));
  const std::string text = "ok \u0800 \U0001F9FF\U0001FAE8 \u10E5 end";
  std::vector<int32_t> ids = tok.encode(text);
  int byte_tokens = 0;
  for (int32_t id : ids) byte_tokens += tok.token_text(id).rfind("<0x", 0) == 0;
  ASSERT_GE(byte_tokens, 8) << "the text should fall back to bytes";
  text::StreamDecoder stream(tok);
  std::string all;
  for (int32_t id : ids) {
    std::string_view out = stream.push(id);
    EXPECT_EQ(out.find("\xEF\xBF\xBD"), std::string_view::npos) << "a character was split";
    all += out;
  }
  all += stream.finish();
  EXPECT_EQ(all, " " + text);
  EXPECT_EQ(tok.decode(ids), text);
  std::string pieces;  // each token's bytes in a text ("▁ok" is " ok")
  for (int32_t id : ids) pieces += tok.token_to_piece(id);
  EXPECT_EQ(pieces, " " + text);
}

}  // namespace
}  // namespace wren
