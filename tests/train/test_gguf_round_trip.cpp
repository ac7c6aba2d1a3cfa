// A Llama-architecture model trained by the trainer (the tiny workspace, six steps) and
// exported at q8, written as GGUF and converted back: every tensor bit for bit (values and
// scales), the same tokenizer ids on text, and identical logits. The oracle is the trained
// model directory itself (what `wren train` wrote), not the converter.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>

#include "runtime/convert.h"
#include "runtime/gguf_export.h"
#include "runtime/model_files.h"
#include "runtime/session.h"
#include "text/tokenizer.h"
#include "train/trainer.h"
#include "train_test_util.h"

namespace wren {
namespace {

namespace fs = std::filesystem;

// Grouped-query attention, SwiGLU, untied head: llama.cpp's `llama` (q / k rows permuted on
// the way out and back). Widths are multiples of 32 so every matrix is q8 at group 32 (Q8_0).
const char* kLlama = R"({"name": "llama-trained", "d_model": 64, "vocab_size": 300, "context_length": 128,
  "norm": {"eps": 1e-5},
  "mixers": {"a": {"kind": "attention", "n_heads": 4, "n_kv_heads": 2, "head_dim": 16, "rope": {"theta": 10000}}},
  "ffns": {"f": {"kind": "dense", "activation": "swiglu", "hidden": 128}},
  "layers": [{"mixer": "a", "ffn": "f", "repeat": 2}]})";

TEST(TrainedGguf, RoundTripIsBitIdenticalAtQ8) {
  train_test::TempDir dir("gguf_round_trip");
  fs::create_directories(dir.path);
  std::ofstream(dir.path / "llama.json") << kLlama;
  train::TrainOptions o = train_test::tiny_training_workspace(dir.path, (dir.path / "llama.json").string());
  o.output = (dir.path / "trained").string();
  o.export_type = kernels::DType::q8;
  const train::TrainResult r = train::run_training(o);
  ASSERT_EQ(r.steps.size(), 6u);
  EXPECT_LT(r.steps.back().loss, r.steps.front().loss);  // trained, not as initialised

  EXPECT_EQ(export_gguf(o.output, (dir.path / "m.gguf").string()), "llama");
  ConvertOptions c;
  c.dtype = kernels::DType::q8;
  convert_gguf_file((dir.path / "m.gguf").string(), (dir.path / "back").string(), c);

  const ModelFiles a(o.output), b((dir.path / "back").string());
  int quantised = 0;
  for (const TensorInfo& t : a.weight_map().tensors) {
    const WeightView &x = a.weight(t.name), &y = b.weight(t.name);
    ASSERT_EQ(x.storage, y.storage) << t.name;
    ASSERT_EQ(x.group, y.group) << t.name;
    ASSERT_EQ(x.stored->nbytes, y.stored->nbytes) << t.name;
    ASSERT_EQ(std::memcmp(x.data, y.data, x.stored->nbytes), 0) << t.name;
    if (x.scales) {
      ASSERT_EQ(std::memcmp(x.scales, y.scales, x.stored_scales->nbytes), 0) << t.name;
      ++quantised;
    }
  }
  EXPECT_GE(quantised, 2 * 7 + 2);  // every matrix went through Q8_0

  const text::Tokenizer ta = text::Tokenizer::load(a.tokenizer_path()), tb = text::Tokenizer::load(b.tokenizer_path());
  for (const char* s : {"The cat sat on the mat number 5.", "  unseen words, digits 12345 and ünïcode!"})
    EXPECT_EQ(ta.encode(s), tb.encode(s)) << s;

  Session sa(open_model(o.output)), sb(open_model((dir.path / "back").string()));
  std::vector<float> la(static_cast<size_t>(sa.vocab_rows())), lb(la.size());
  for (int32_t t : ta.encode("The cat sat on the mat number 3. The cat")) {
    sa.decode(t, la.data()), sb.decode(t, lb.data());
    ASSERT_EQ(la, lb) << "at position " << sa.position() - 1;
  }
}

}  // namespace
}  // namespace wren
