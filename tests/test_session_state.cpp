// Session state (runtime/session_state.h): what a restore refuses, and that a refusal leaves
// the session as it was. That a restored state continues identically is tested per
// architecture in test_architectures.cpp.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>

#include "config/json_reader.h"
#include "config/parse.h"
#include "runtime/session_state.h"
#include "test_util.h"

namespace wren {
namespace {

using testing_util::random_tokens;

std::shared_ptr<const Model> mini(uint64_t seed) { return testing_util::random_model(load_preset("embla-mini"), seed); }

// Expects `f` to throw a std::runtime_error whose message contains `part`.
template <class F>
void expect_refused(F f, const std::string& part) {
  try {
    f();
    ADD_FAILURE() << "not refused; expected a message with '" << part << "'";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what();
  }
}

struct Fixture {
  std::shared_ptr<const Model> model = mini(3);
  Session saved{model, {.context = 48}};
  std::vector<std::byte> state;
  Fixture() {
    std::vector<float> logits(size_t(saved.vocab_rows()));
    saved.prefill(random_tokens(10, model->config.vocab_size, 1), logits.data());
    state = save_session_state(saved);
  }
};

// A restored session that decodes another token at a position it has decoded before equals a
// fresh session fed the same tokens: nothing a step keeps for later layers outlives the state
// it was made from. Here: the selection of keys that the sparse layers reusing one owner share
// (AttentionScratch::selection). Both sparse layers of embla-mini reuse layer 4's cache, and
// the prompt is longer than top_k + recent, so the selection leaves keys out.
TEST(SessionState, RestoredSessionDecodingAnotherTokenEqualsAFreshOne) {
  std::ifstream in(std::filesystem::path(WREN_SOURCE_DIR) / "presets" / "embla-mini.json");
  Json j = Json::parse(in);
  j["layers"].back()["kv"]["reuse"] = 4;
  const auto model = testing_util::random_model(parse_model_config(j, "embla-mini, sparse layers of one owner"), 5);
  const ModelConfig& c = model->config;
  ASSERT_EQ(c.cache_owner(7), c.cache_owner(5));
  const int n = c.mixer(5).top_k + c.mixer(5).recent + 40;
  const auto prompt = random_tokens(n, c.vocab_size, 2);
  Session restored(model, {.context = n + 4}), fresh(model, {.context = n + 4});
  std::vector<float> logits(size_t(restored.vocab_rows())), expected(logits.size());
  restored.prefill(prompt, logits.data());
  const auto state = save_session_state(restored);
  restored.decode(7, logits.data());
  restore_session_state(restored, state);
  restored.decode(11, logits.data());
  fresh.prefill(prompt, expected.data());
  fresh.decode(11, expected.data());
  for (size_t i = 0; i < logits.size(); ++i) ASSERT_EQ(logits[i], expected[i]) << i;
}

// A step that throws leaves the session refusing further steps, naming the failure, until a
// restore rewrites every buffer; then it decodes as it did before the failed step.
TEST(SessionState, AFailedStepIsRefusedUntilARestore) {
  const std::vector<int32_t> prompt = {5, 6, 7};
  const auto model = testing_util::nan_rows_model(prompt);
  Session s(model, {.context = 16, .threads = 1, .kv = KvType::q8});
  std::vector<float> logits(size_t(s.vocab_rows())), again(logits.size());
  s.prefill(prompt, logits.data());
  const std::vector<std::byte> saved = save_session_state(s);
  s.decode(5, logits.data());  // a kept token: whole
  EXPECT_THROW(s.decode(9, logits.data()), kernels::KernelError);  // a NaN row: q8 refuses its keys
  EXPECT_NE(s.failure().find("not finite"), std::string::npos) << s.failure();
  try {
    s.decode(6, logits.data());
    ADD_FAILURE() << "a failed session decoded";
  } catch (const std::logic_error& e) {
    EXPECT_NE(std::string(e.what()).find("earlier step failed"), std::string::npos) << e.what();
  }
  restore_session_state(s, saved);
  EXPECT_TRUE(s.failure().empty());
  s.decode(5, logits.data());
  Session fresh(model, {.context = 16, .threads = 1, .kv = KvType::q8});
  fresh.prefill(prompt, again.data());
  fresh.decode(5, again.data());
  EXPECT_EQ(logits, again);
}

TEST(SessionState, HeaderNamesFormatModelContextAndPosition) {
  Fixture f;
  ASSERT_GE(f.state.size(), 40u);
  EXPECT_EQ(std::memcmp(f.state.data(), "WRENSESS", 8), 0);
  uint32_t version;
  int64_t context, position;
  uint64_t fingerprint;
  std::memcpy(&version, f.state.data() + 8, 4);
  std::memcpy(&fingerprint, f.state.data() + 16, 8);
  std::memcpy(&context, f.state.data() + 24, 8);
  std::memcpy(&position, f.state.data() + 32, 8);
  EXPECT_EQ(version, kSessionStateVersion);
  EXPECT_EQ(fingerprint, model_fingerprint(*f.model));
  EXPECT_EQ(context, 48);
  EXPECT_EQ(position, 10);
}

TEST(SessionState, FingerprintDiffersBetweenModelsAndNotBetweenLoads) {
  EXPECT_EQ(model_fingerprint(*mini(3)), model_fingerprint(*mini(3)));
  EXPECT_NE(model_fingerprint(*mini(3)), model_fingerprint(*mini(4)));
}

// Every refusal: the message names what differs, and the session it was aimed at continues
// exactly as a copy that was never touched.
void expect_refused_untouched(const std::shared_ptr<const Model>& model, int64_t context,
                              std::span<const std::byte> state, const std::string& part) {
  Session target(model, {.context = context}), twin(model, {.context = context});
  std::vector<float> a(size_t(target.vocab_rows())), b(a.size());
  const auto warmup = random_tokens(5, model->config.vocab_size, 9);
  target.prefill(warmup, a.data());
  twin.prefill(warmup, b.data());
  expect_refused([&] { restore_session_state(target, state); }, part);
  EXPECT_EQ(target.history(), twin.history());
  target.decode(17, a.data());
  twin.decode(17, b.data());
  EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)), 0);
}

TEST(SessionState, RefusesAnotherModel) {
  Fixture f;
  expect_refused_untouched(mini(4), 48, f.state, "saved from another model");
}

TEST(SessionState, RefusesAnotherContext) {
  Fixture f;
  expect_refused_untouched(f.model, 64, f.state, "context 48, this session holds 64");
}

TEST(SessionState, RefusesTruncatedStateAtEveryCut) {
  Fixture f;
  // Cuts inside the header, the table and the data.
  for (size_t cut : {size_t(0), size_t(5), size_t(20), size_t(45), size_t(200), f.state.size() / 2, f.state.size() - 1}) {
    SCOPED_TRACE(cut);
    expect_refused_untouched(f.model, 48, std::span(f.state.data(), cut), "session state:");
  }
}

TEST(SessionState, RefusesWrongMagicVersionPositionAndLayout) {
  Fixture f;
  auto patched = [&](size_t at, const void* bytes, size_t n) {
    std::vector<std::byte> s = f.state;
    std::memcpy(s.data() + at, bytes, n);
    return s;
  };
  expect_refused_untouched(f.model, 48, patched(0, "WRENSESX", 8), "not a Wren session state");
  const uint32_t version = kSessionStateVersion + 1;
  expect_refused_untouched(f.model, 48, patched(8, &version, 4), "format version");
  const int64_t position = 49;
  expect_refused_untouched(f.model, 48, patched(32, &position, 8), "position 49 outside 0..48");
  const uint32_t count = 3;
  expect_refused_untouched(f.model, 48, patched(12, &count, 4), "3 buffers");
  // The first buffer's name ("history") changed.
  expect_refused_untouched(f.model, 48, patched(42, "X", 1), "is 'Xistory'");
  std::vector<std::byte> longer = f.state;
  longer.push_back(std::byte{0});
  expect_refused_untouched(f.model, 48, longer, "bytes of data after the table");
}

TEST(SessionState, FileRoundTripAndRefusals) {
  Fixture f;
  testing_util::TempDir dir;
  save_session_state_file(f.saved, dir / "s.state");
  EXPECT_FALSE(std::filesystem::exists(dir / "s.state.tmp"));
  Session other(f.model, {.context = 48});
  restore_session_state_file(other, dir / "s.state");
  EXPECT_EQ(other.history(), f.saved.history());
  std::vector<float> a(size_t(other.vocab_rows())), b(a.size());
  other.decode(3, a.data());
  f.saved.decode(3, b.data());
  EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)), 0);

  expect_refused([&] { restore_session_state_file(other, dir / "missing"); }, "missing: cannot open");
  {  // Longer than any state of this session can be: refused before it is read.
    std::ofstream big(dir / "big", std::ios::binary);
    big.seekp(std::streamoff(f.state.size() + 48 * 4 + 1));
    big.put('x');
  }
  expect_refused([&] { restore_session_state_file(other, dir / "big"); }, "more than a state of this session can be");
  {
    std::ofstream cut(dir / "cut", std::ios::binary);
    cut.write(reinterpret_cast<const char*>(f.state.data()), 30);
  }
  expect_refused([&] { restore_session_state_file(other, dir / "cut"); }, "cut: session state: truncated");
}

}  // namespace
}  // namespace wren
