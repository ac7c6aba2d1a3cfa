// GGUF: the block formats on hand-made blocks (packed here from the published layouts, values
// known exactly), the reader on damaged files, GGUF -> model directory against the HF-semantics
// oracle for every tensor type, and model directory -> GGUF -> model directory bit for bit.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <set>

#include "config/read_file.h"
#include "gguf_fixture.h"
#include "hf_fixture.h"
#include "io/gguf.h"
#include "io/gguf_blocks.h"
#include "runtime/convert.h"
#include "runtime/gguf_export.h"
#include "runtime/gguf_import.h"
#include "runtime/model_files.h"
#include "runtime/session.h"
#include "test_util.h"
#include "config/json_reader.h"
#include "text/pre_tokenizer.h"
#include "text/pretokenize.h"

namespace wren {
namespace {

using namespace hf_fixture;
using namespace gguf_fixture;
using testing_util::TempDir;

// Packs a random block of `type` (Q4_K: L < 16, Q5_K: L < 32) and decodes it.
void expect_k_block_exact(GgmlType type, uint32_t seed) {
  KBlock k = random_k_block(seed, type == GgmlType::Q4_K ? 16 : 32, true);
  std::vector<uint8_t> b(size_t(ggml_block_bytes(type)));
  if (type == GgmlType::Q4_K) pack_q4_k(kD1, kDmin, k.sc, k.mn, k.L, b.data());
  else pack_q5_k(kD1, kDmin, k.sc, k.mn, k.L, b.data());
  std::vector<float> y(256);
  gguf_blocks::dequantize_row(type, b.data(), 256, y.data());
  for (int i = 0; i < 256; ++i) ASSERT_EQ(y[size_t(i)], k.expect[size_t(i)]) << to_string(type) << " value " << i;
}

TEST(GgufBlocks, Q4KHandMadeBlockDecodesExactly) { expect_k_block_exact(GgmlType::Q4_K, 1); }
TEST(GgufBlocks, Q5KHandMadeBlockDecodesExactly) { expect_k_block_exact(GgmlType::Q5_K, 2); }

TEST(GgufBlocks, Q6KHandMadeBlockDecodesExactly) {
  std::mt19937 rng(3);
  int scales[16], L[256];
  for (int& s : scales) s = int(rng() % 255) - 127;
  scales[3] = -128;
  for (int& l : L) l = int(rng() % 64);
  L[7] = 0, L[8] = 63;
  uint8_t b[210];
  pack_q6_k(kD1, scales, L, b);
  std::vector<float> y(256);
  gguf_blocks::dequantize_row(GgmlType::Q6_K, b, 256, y.data());
  for (int i = 0; i < 256; ++i) ASSERT_EQ(y[i], float(double(kD1) * scales[i / 16] * (L[i] - 32))) << "value " << i;
}

TEST(GgufBlocks, Q8ZeroAndQ4ZeroMatchOurTypesBitForBit) {
  std::mt19937 rng(4);
  std::vector<uint8_t> q8_0(34 * 4), q4_0(18 * 4);
  for (auto& b : q8_0) b = uint8_t(rng());
  for (auto& b : q4_0) b = uint8_t(rng());
  for (int k = 0; k < 4; ++k) put16(q8_0.data() + 34 * k, f16(0.01f * (k + 1))), put16(q4_0.data() + 18 * k, f16(0.02f * (k + 1)));
  // Q8_0 -> q8 -> Q8_0 is the identity, and both decode to the same values.
  std::vector<int8_t> q(128);
  std::vector<kernels::F16> s(4);
  gguf_blocks::q8_0_to_q8(q8_0.data(), 128, q.data(), s.data());
  std::vector<uint8_t> back(q8_0.size());
  gguf_blocks::q8_to_q8_0(q.data(), s.data(), 128, back.data());
  EXPECT_EQ(back, q8_0);
  std::vector<float> a(128), b(128);
  gguf_blocks::dequantize_row(GgmlType::Q8_0, q8_0.data(), 128, a.data());
  kernels::dequantize_q8_row(q.data(), s.data(), 128, 32, b.data());
  EXPECT_EQ(a, b);
  for (int i = 0; i < 128; ++i) ASSERT_EQ(a[size_t(i)], kernels::f16_to_f32(kernels::F16{f16(0.01f * (i / 32 + 1))}) * float(int8_t(q8_0[size_t(34 * (i / 32) + 2 + i % 32)])));
  // Q4_0: value j of a block in the low nibble of byte j, value j + 16 in its high nibble.
  std::vector<uint8_t> q4(64), back4(q4_0.size());
  gguf_blocks::q4_0_to_q4(q4_0.data(), 128, q4.data(), s.data());
  gguf_blocks::q4_to_q4_0(q4.data(), s.data(), 128, back4.data());
  EXPECT_EQ(back4, q4_0);
  gguf_blocks::dequantize_row(GgmlType::Q4_0, q4_0.data(), 128, a.data());
  kernels::dequantize_q4_row(q4.data(), s.data(), 128, 32, b.data());
  EXPECT_EQ(a, b);
  for (int i = 0; i < 128; ++i) {
    const int blk = i / 32, j = i % 32;
    const uint8_t byte = q4_0[size_t(18 * blk + 2 + j % 16)];
    const int n = j < 16 ? byte & 15 : byte >> 4;
    ASSERT_EQ(a[size_t(i)], kernels::f16_to_f32(kernels::F16{f16(0.02f * (blk + 1))}) * float(n - 8)) << i;
  }
}

// The block types llama.cpp's other quantisations write: Q4_K_M and Q5_K_M files fall back to
// Q5_0 / Q5_1 (and Q4_1 in older files) where a row is not whole 256-value blocks (hidden sizes
// 576, 896, 960), Q2_K / Q3_K files, IQ4_NL / IQ4_XS. Random levels, every bit of every scale
// field used, values exact.
TEST(GgufBlocks, HandMadeBlocksOfTheOtherTypesDecodeExactly) {
  for (GgmlType t : {GgmlType::Q4_1, GgmlType::Q5_0, GgmlType::Q5_1, GgmlType::IQ4_NL, GgmlType::Q2_K, GgmlType::Q3_K,
                     GgmlType::IQ4_XS})
    for (uint32_t seed = 10; seed < 14; ++seed) {
      const PackedBlock p = random_block(t, seed, kD1);
      std::vector<float> y(p.values.size());
      gguf_blocks::dequantize_row(t, p.bytes.data(), int64_t(y.size()), y.data());
      for (size_t i = 0; i < y.size(); ++i) ASSERT_EQ(y[i], p.values[i]) << to_string(t) << " seed " << seed << " value " << i;
    }
}

// One block of each of those types, bytes (73 i + 29) mod 256 with d = 0.5 (and m or dmin =
// 0.25) written over their f16 fields, and some of its values as gguf-py's numpy decoder
// gives them (llama.cpp's gguf-py/gguf/quants.py, `dequantize`, run outside this repository):
// an oracle independent of our decoder and of the packers. Every value of 64 blocks of random
// bytes of every type read here agreed with it bit for bit when this was written.
struct GoldenBlock {
  GgmlType type;
  std::vector<std::pair<int, float>> f16_fields;  // byte offset, value
  std::vector<std::pair<int, float>> values;      // index, value
};

TEST(GgufBlocks, PatternBlocksDecodeAsGgufPyDecodesThem) {
  const GoldenBlock golden[] = {
    {GgmlType::Q4_1, {{0, 0.5f}, {2, 0.25f}},
     {{0, 0.75f}, {1, 5.25f}, {2, 1.75f}, {3, 6.25f}, {4, 2.75f}, {5, 7.25f}, {6, 3.75f}, {7, 0.25f},
      {8, 4.75f}, {9, 1.25f}, {10, 5.75f}, {11, 2.25f}, {12, 6.75f}, {13, 3.25f}, {14, 7.75f}, {15, 4.25f},
      {16, 2.25f}, {17, 4.25f}, {18, 6.75f}, {19, 0.75f}, {20, 3.25f}, {21, 5.25f}, {22, 7.75f}, {23, 2.25f},
      {24, 4.25f}, {25, 6.75f}, {26, 0.75f}, {27, 3.25f}, {28, 5.25f}, {29, 7.75f}, {30, 1.75f}, {31, 4.25f}}},
    {GgmlType::Q5_0, {{0, 0.5f}},
     {{0, 1.5f}, {1, 6.0f}, {2, 2.5f}, {3, 7.0f}, {4, -4.5f}, {5, 0.0f}, {6, -3.5f}, {7, 1.0f},
      {8, -2.5f}, {9, -6.0f}, {10, -1.5f}, {11, 3.0f}, {12, 7.5f}, {13, 4.0f}, {14, 0.5f}, {15, 5.0f},
      {16, 6.5f}, {17, -7.5f}, {18, -5.0f}, {19, -3.0f}, {20, -0.5f}, {21, -6.0f}, {22, 4.0f}, {23, -1.5f},
      {24, -7.5f}, {25, 3.0f}, {26, -3.0f}, {27, 7.5f}, {28, -6.5f}, {29, -4.0f}, {30, -1.5f}, {31, 0.5f}}},
    {GgmlType::Q5_1, {{0, 0.5f}, {2, 0.25f}},
     {{0, 10.75f}, {1, 7.25f}, {2, 3.75f}, {3, 0.25f}, {4, 4.75f}, {5, 1.25f}, {6, 13.75f}, {7, 2.25f},
      {8, 6.75f}, {9, 11.25f}, {10, 7.75f}, {11, 12.25f}, {12, 0.75f}, {13, 5.25f}, {14, 1.75f}, {15, 14.25f},
      {16, 11.25f}, {17, 13.25f}, {18, 7.75f}, {19, 2.25f}, {20, 12.25f}, {21, 6.75f}, {22, 8.75f}, {23, 11.25f},
      {24, 5.25f}, {25, 7.75f}, {26, 9.75f}, {27, 12.25f}, {28, 14.75f}, {29, 0.75f}, {30, 3.25f}, {31, 5.25f}}},
    {GgmlType::IQ4_NL, {{0, 0.5f}},
     {{0, 56.5f}, {1, 0.5f}, {2, -52.0f}, {3, 12.5f}, {4, -32.5f}, {5, 26.5f}, {6, -17.5f}, {7, 44.5f},
      {8, -5.0f}, {9, -63.5f}, {10, 6.5f}, {11, -41.5f}, {12, 19.0f}, {13, -24.5f}, {14, 34.5f}, {15, -11.0f},
      {16, 12.5f}, {17, 56.5f}, {18, -24.5f}, {19, 0.5f}, {20, 34.5f}, {21, -52.0f}, {22, -11.0f}, {23, 12.5f},
      {24, 56.5f}, {25, -24.5f}, {26, 0.5f}, {27, 34.5f}, {28, -52.0f}, {29, -11.0f}, {30, 12.5f}, {31, 56.5f}}},
    {GgmlType::Q2_K, {{80, 0.5f}, {82, 0.25f}},
     {{0, 6.25f}, {15, -0.25f}, {16, 1.5f}, {31, -1.5f}, {32, 20.0f}, {47, 5.0f}, {63, 0.25f}, {64, 0.0f},
      {100, 1.25f}, {127, 11.75f}, {128, 1.0f}, {150, 18.5f}, {191, -1.0f}, {200, 2.5f}, {240, 0.5f}, {255, 2.5f}}},
    {GgmlType::Q3_K, {{108, 0.5f}},
     {{0, -1.5f}, {15, 6.0f}, {16, 3.0f}, {31, -12.0f}, {32, -15.5f}, {47, -46.5f}, {63, 36.0f}, {64, -22.5f},
      {100, 19.5f}, {127, 40.0f}, {128, -12.5f}, {150, 10.0f}, {191, 2.5f}, {200, 26.0f}, {240, 10.5f}, {255, 0.0f}}},
    {GgmlType::IQ4_XS, {{0, 0.5f}},
     {{0, -297.5f}, {15, 450.5f}, {16, -187.0f}, {31, 212.5f}, {32, -350.0f}, {47, 530.0f}, {63, -650.0f}, {64, -175.0f},
      {100, 52.0f}, {127, -140.0f}, {128, 507.5f}, {150, 507.5f}, {191, -65.0f}, {200, 966.0f}, {240, -297.5f}, {255, 110.5f}}},
  };
  for (const GoldenBlock& g : golden) {
    std::vector<uint8_t> b(size_t(ggml_block_bytes(g.type)));
    for (size_t i = 0; i < b.size(); ++i) b[i] = uint8_t((73 * i + 29) & 255);
    for (auto [at, v] : g.f16_fields) put16(b.data() + at, f16(v));
    std::vector<float> y(size_t(ggml_block_values(g.type)));
    gguf_blocks::dequantize_row(g.type, b.data(), int64_t(y.size()), y.data());
    for (auto [i, v] : g.values) EXPECT_EQ(y[size_t(i)], v) << to_string(g.type) << " value " << i;
  }
}

// ---- The reader on damaged files ---------------------------------------------------------------

// A small valid file, written byte by byte from the format description (not by GgufWriter).
std::vector<uint8_t> tiny_gguf() {
  std::vector<uint8_t> f;
  auto u32 = [&](uint32_t v) { f.insert(f.end(), (uint8_t*)&v, (uint8_t*)&v + 4); };
  auto u64 = [&](uint64_t v) { f.insert(f.end(), (uint8_t*)&v, (uint8_t*)&v + 8); };
  auto str = [&](const std::string& s) { u64(s.size()), f.insert(f.end(), s.begin(), s.end()); };
  u32(0x46554747u), u32(3), u64(1), u64(2);
  str("general.architecture"), u32(8), str("llama");
  str("x.list"), u32(9), u32(4), u64(3), u32(7), u32(8), u32(9);
  str("w"), u32(2), u64(32), u64(2), u32(8), u64(0);  // Q8_0 [2, 32]
  while (f.size() % 32) f.push_back(0);
  for (int r = 0; r < 2; ++r) {
    uint16_t d = f16(0.5f);
    f.insert(f.end(), (uint8_t*)&d, (uint8_t*)&d + 2);
    for (int j = 0; j < 32; ++j) f.push_back(uint8_t(j - 16));
  }
  return f;
}

TEST(GgufReader, ReadsAHandWrittenFile) {
  std::vector<uint8_t> f = tiny_gguf();
  GgufFile g = GgufFile::parse(f.data(), f.size(), "tiny.gguf");
  EXPECT_EQ(g.version(), 3u);
  EXPECT_EQ(g.metadata().at("general.architecture").s, "llama");
  EXPECT_EQ(g.metadata().at("x.list").ints, (std::vector<int64_t>{7, 8, 9}));
  ASSERT_EQ(g.tensors().size(), 1u);
  EXPECT_EQ(g.tensors()[0].shape(), (Shape{2, 32}));
  std::vector<float> y(32);
  gguf_blocks::dequantize_row(GgmlType::Q8_0, g.tensors()[0].data + 34, 32, y.data());
  EXPECT_EQ(y[0], -8.0f);
  EXPECT_EQ(y[31], 7.5f);
}

// Every truncation, and damage at each field, is an IoError naming the file: never a crash.
TEST(GgufReader, RejectsTruncatedAndDamagedFiles) {
  const std::vector<uint8_t> f = tiny_gguf();
  for (size_t n = 0; n < f.size(); ++n)
    EXPECT_THROW(GgufFile::parse(f.data(), n, "cut.gguf"), IoError) << "truncated at " << n;
  auto damaged = [&](size_t at, uint64_t v, size_t width, const std::string& expect) {
    std::vector<uint8_t> g = f;
    std::memcpy(g.data() + at, &v, width);
    try {
      GgufFile::parse(g.data(), g.size(), "bad.gguf");
      ADD_FAILURE() << "accepted damage at byte " << at;
    } catch (const IoError& e) {
      EXPECT_NE(std::string(e.what()).find("bad.gguf"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find(expect), std::string::npos) << e.what();
    }
  };
  damaged(0, 0x46554746u, 4, "not a GGUF file");
  damaged(4, 1, 4, "version 1");
  damaged(8, uint64_t(1) << 60, 8, "tensor_count");
  damaged(16, uint64_t(1) << 60, 8, "kv_count");
  damaged(24, uint64_t(1) << 40, 8, "limit");             // the first key's length
  const size_t list = 24 + 8 + 20 + 4 + 8 + 5 + 8 + 6;    // x.list's type field
  damaged(list, 13, 4, "value type 13");
  damaged(list + 8, uint64_t(1) << 50, 8, "does not fit");  // its element count
  const size_t tensor = list + 4 + 4 + 8 + 12 + 8 + 1;    // tensor "w": n_dims
  damaged(tensor, 7, 4, "n_dims 7");
  damaged(tensor + 4, 33, 8, "not a multiple");           // ne[0] = 33 for Q8_0
  damaged(tensor + 12, 0, 8, "dimension 1 = 0");
  damaged(tensor + 20, 99, 4, "ggml type 99");
  damaged(tensor + 24, 16, 8, "alignment");               // offset 16 with alignment 32
  damaged(tensor + 24, 64, 8, "outside the data section");
}

// ---- GGUF -> model directory, every tensor type -------------------------------------------------



// The fixture's shape (hf_fixture.h) as `arch`'s metadata.
void set_fixture_shape(GgufWriter& w, const std::string& arch) {
  const std::string a = arch + ".";
  w.set_string("general.architecture", arch);
  w.set_u32(a + "context_length", 64), w.set_u32(a + "embedding_length", kD), w.set_u32(a + "block_count", kLayers);
  w.set_u32(a + "feed_forward_length", kInter), w.set_u32(a + "attention.head_count", kHeads);
  w.set_u32(a + "attention.head_count_kv", kKvHeads), w.set_u32(a + "attention.key_length", kHeadDim);
  w.set_f32(a + "attention.layer_norm_rms_epsilon", 1e-5f), w.set_f32(a + "rope.freq_base", 500.0f);
}

// The HF model written as llama.cpp's converter would: names, q / k rows permuted for
// interleaved RoPE (reshape(heads, 2, d/2, in).swapaxes(1, 2); llama, smollm3), Gemma's norm
// gains stored as 1 + w, each matrix in its own type.
void write_llama_gguf(HfModel& m, const std::string& path, const std::map<std::string, GgmlType>& types,
                      const std::string& tokenizer_model = "gpt2", const std::string& pre = "gpt-2",
                      const std::function<void(GgufWriter&)>& more = nullptr, const std::string& arch = "llama") {
  GgufWriter w;
  set_fixture_shape(w, arch);
  set_tokenizer(w, tokenizer_model, pre);
  auto name_of = [&arch](const std::string& hf) -> std::string {
    if (hf == "model.embed_tokens.weight") return "token_embd.weight";
    if (hf == "model.norm.weight") return "output_norm.weight";
    if (hf == "lm_head.weight") return "output.weight";
    static const std::map<std::string, std::string> layer = {
        {"input_layernorm.weight", "attn_norm.weight"}, {"post_attention_layernorm.weight", "ffn_norm.weight"},
        {"post_feedforward_layernorm.weight", "post_ffw_norm.weight"},
        {"self_attn.q_proj.weight", "attn_q.weight"}, {"self_attn.k_proj.weight", "attn_k.weight"},
        {"self_attn.v_proj.weight", "attn_v.weight"}, {"self_attn.o_proj.weight", "attn_output.weight"},
        {"self_attn.q_norm.weight", "attn_q_norm.weight"}, {"self_attn.k_norm.weight", "attn_k_norm.weight"},
        {"mlp.gate_proj.weight", "ffn_gate.weight"}, {"mlp.up_proj.weight", "ffn_up.weight"},
        {"mlp.down_proj.weight", "ffn_down.weight"}};
    const size_t dot = hf.find('.', 13);
    const std::string rel = hf.substr(dot + 1);
    // OLMo 2's and EXAONE 4's post_attention_layernorm follows the attention (llama.cpp's ATTN_POST_NORM).
    const bool post = arch == "olmo2" || arch == "exaone4";
    const std::string name = post && rel == "post_attention_layernorm.weight" ? "post_attention_norm.weight" : layer.at(rel);
    return "blk." + hf.substr(13, dot - 13) + "." + name;
  };
  uint32_t seed = 100;
  for (auto& [hf, t] : m.tensors) {
    if (hf.find("rotary_emb") != std::string::npos) continue;
    const std::string name = name_of(hf);
    const std::string kind = name.substr(name.find('.') + 1);
    GgmlType type = t.shape.size() == 1 ? GgmlType::F32 : GgmlType::F16;
    for (auto& [suffix, ty] : types)
      if (name == suffix || (name.size() > suffix.size() && name.compare(name.size() - suffix.size() - 1, suffix.size() + 1, "." + suffix) == 0))
        type = ty;
    std::vector<float> values = t.values;
    const int64_t cols = t.shape.back(), rows = int64_t(values.size()) / cols;
    std::vector<uint8_t> bytes = encode_for_test(type, values, cols, seed++);
    t.values = values;  // the oracle sees what the blocks hold
    if (arch == "gemma" && name.size() > 11 && name.compare(name.size() - 11, 11, "norm.weight") == 0) {
      ASSERT_EQ(type, GgmlType::F32) << name;
      for (size_t k = 0; k < values.size(); ++k) {
        const float stored = values[k] + 1.0f;
        std::memcpy(bytes.data() + 4 * k, &stored, 4);
      }
    }
    const bool permute = (arch == "llama" || arch == "smollm3" || arch == "granite") &&
                         (name.find("attn_q.") != std::string::npos || name.find("attn_k.") != std::string::npos);
    if (permute) {
      const int heads = name.find("attn_q.") != std::string::npos ? kHeads : kKvHeads;
      const int64_t d = rows / heads, rb = int64_t(bytes.size()) / rows;
      std::vector<uint8_t> p(bytes.size());
      for (int h = 0; h < heads; ++h)
        for (int a = 0; a < 2; ++a)
          for (int64_t i = 0; i < d / 2; ++i)
            std::memcpy(p.data() + (h * d + 2 * i + a) * rb, bytes.data() + (h * d + a * d / 2 + i) * rb, size_t(rb));
      bytes = p;
    }
    auto held = std::make_shared<std::vector<uint8_t>>(std::move(bytes));
    w.add_tensor(name, type, t.shape, [held](const ByteSink& sink) { sink(held->data(), held->size()); });
  }
  if (more) more(w);
  w.write(path);
}


void expect_gguf_matches(const std::map<std::string, GgmlType>& types) {
  TempDir dir;
  HfModel m = make_dense_or_moe({.type = "llama"});
  write_llama_gguf(m, dir / "m.gguf", types);
  expect_converted_matches(m, dir);
}

TEST(ConvertGguf, LlamaFloatTypesMatchHfForward) {
  expect_gguf_matches({{"attn_q.weight", GgmlType::F32}, {"attn_k.weight", GgmlType::BF16}, {"ffn_up.weight", GgmlType::BF16}});
}
TEST(ConvertGguf, LlamaQ80Q40MatchHfForward) {
  expect_gguf_matches({{"attn_q.weight", GgmlType::Q8_0}, {"attn_k.weight", GgmlType::Q4_0}, {"ffn_down.weight", GgmlType::Q4_0},
                       {"token_embd.weight", GgmlType::Q8_0}, {"attn_output.weight", GgmlType::Q8_0}});
}
TEST(ConvertGguf, LlamaKQuantsMatchHfForward) {
  expect_gguf_matches({{"attn_q.weight", GgmlType::Q4_K}, {"attn_k.weight", GgmlType::Q5_K}, {"attn_v.weight", GgmlType::Q6_K},
                       {"ffn_gate.weight", GgmlType::Q4_K}, {"ffn_up.weight", GgmlType::Q5_K}, {"output.weight", GgmlType::Q6_K}});
}
TEST(ConvertGguf, LlamaOtherQuantTypesMatchHfForward) {
  expect_gguf_matches({{"attn_q.weight", GgmlType::Q3_K}, {"attn_k.weight", GgmlType::Q2_K}, {"attn_v.weight", GgmlType::IQ4_XS},
                       {"ffn_gate.weight", GgmlType::Q3_K}, {"ffn_up.weight", GgmlType::IQ4_XS}, {"ffn_down.weight", GgmlType::Q5_0},
                       {"attn_output.weight", GgmlType::Q5_1}, {"token_embd.weight", GgmlType::Q4_1}, {"output.weight", GgmlType::IQ4_NL}});
}

// SmolLM3's GGUF is a Llama's (q and k permuted) under its own name; llama.cpp leaves RoPE out of
// every fourth layer, so with the fixture's two layers both rotate.
TEST(ConvertGguf, Smollm3ReadsAsLlamaWithItsNoRopeStep) {
  TempDir dir;
  HfModel m = make_dense_or_moe({.type = "smollm3"});
  m.config["no_rope_layer_interval"] = 4;
  write_llama_gguf(m, dir / "m.gguf", {{"attn_q.weight", GgmlType::Q8_0}}, "gpt2", "gpt-2", nullptr, "smollm3");
  expect_converted_matches(m, dir);
  const ModelConfig c = GgufModel(dir / "m.gguf").config();
  EXPECT_TRUE(c.mixer(0).rope && c.mixer(1).rope);
}

// Gemma 1: Llama's names, no q / k permutation (NEOX rotation), gains stored as 1 + w, tied.
TEST(ConvertGguf, GemmaMatchesHfForward) {
  TempDir dir;
  HfModel m = make_dense_or_moe({.type = "gemma"});
  write_llama_gguf(m, dir / "m.gguf", {{"attn_k.weight", GgmlType::Q8_0}}, "gpt2", "gpt-2", nullptr, "gemma");
  expect_converted_matches(m, dir);
}

// Granite: Llama's layout (q and k permuted) with the four multipliers under llama.cpp's names
// (logit_scale is the divisor, as transformers' logits_scaling).
void set_granite_scales(GgufWriter& w, const std::string& arch) {
  w.set_f32(arch + ".embedding_scale", 3.0f), w.set_f32(arch + ".residual_scale", 0.4f);
  w.set_f32(arch + ".attention.scale", 0.11f), w.set_f32(arch + ".logit_scale", 2.5f);
}
TEST(ConvertGguf, GraniteMultipliersMatchHfForward) {
  TempDir dir;
  HfModel m = make_granite(false);
  write_llama_gguf(m, dir / "m.gguf", {{"ffn_down.weight", GgmlType::Q8_0}}, "gpt2", "gpt-2",
                   [](GgufWriter& w) { set_granite_scales(w, "granite"); }, "granite");
  expect_converted_matches(m, dir);
}

// Granite MoE's metadata: llama.cpp's expert_count is transformers' num_local_experts, and its
// router is the softmax over the top-k logits.
TEST(ConvertGguf, GraniteMoeMetadataMapsToItsRouting) {
  TempDir dir;
  GgufWriter w;
  set_fixture_shape(w, "granitemoe");
  set_granite_scales(w, "granitemoe");
  w.set_u32("granitemoe.expert_count", 8), w.set_u32("granitemoe.expert_used_count", 2);
  w.add_tensor("token_embd.weight", GgmlType::F32, {kVocab, kD}, [](const ByteSink& sink) {
    const std::vector<float> zeros(size_t(kVocab) * kD, 0.0f);
    sink(zeros.data(), zeros.size() * 4);
  });
  w.write(dir / "m.gguf");
  const ModelConfig c = GgufModel(dir / "m.gguf").config();
  EXPECT_EQ(c.ffn(0).kind, FfnKind::moe);
  EXPECT_EQ(c.ffn(0).n_experts, 8);
  EXPECT_EQ(c.ffn(0).top_k, 2);
  EXPECT_EQ(c.ffn(0).gates, GateNorm::softmax_topk);
  EXPECT_FLOAT_EQ(float(c.residual_scale), 0.4f);
  EXPECT_FLOAT_EQ(float(c.logit_divisor), 2.5f);
  EXPECT_FLOAT_EQ(float(c.mixer(0).scale), 0.11f);
}

// OLMo 2: no q / k permutation (NEOX rotation), the norms after each sublayer as
// post_attention_norm / post_ffw_norm, QK-norm over all heads.
TEST(ConvertGguf, Olmo2MatchesHfForward) {
  TempDir dir;
  HfModel m = make_dense_or_moe({.type = "olmo2"});
  write_llama_gguf(m, dir / "m.gguf", {{"attn_q.weight", GgmlType::Q8_0}}, "gpt2", "gpt-2", nullptr, "olmo2");
  expect_converted_matches(m, dir);
}

// Olmo 3 is llama.cpp's olmo2 with a window and a per-layer sliding pattern (its converter
// writes layer_types as booleans); the sliding layers rotate without the scaling.
TEST(ConvertGguf, Olmo3ReadsItsSlidingPattern) {
  TempDir dir;
  HfModel m = make_dense_or_moe({.type = "olmo3"});
  m.config["sliding_window"] = 3;
  m.config["layer_types"] = {"sliding_attention", "full_attention"};
  m.config["rope_scaling"] = {{"rope_type", "linear"}, {"factor", 4.0}};
  write_llama_gguf(m, dir / "m.gguf", {}, "gpt2", "gpt-2", [](GgufWriter& w) {
    w.set_u32("olmo2.attention.sliding_window", 3);
    GgufValue pattern;
    pattern.type = GgufType::array, pattern.elem = GgufType::boolean, pattern.ints = {1, 0};
    w.set("olmo2.attention.sliding_window_pattern", pattern);
    w.set_string("olmo2.rope.scaling.type", "linear"), w.set_f32("olmo2.rope.scaling.factor", 4.0f);
  }, "olmo2");
  expect_converted_matches(m, dir);
  const ModelConfig c = GgufModel(dir / "m.gguf").config();
  EXPECT_EQ(c.mixer(0).window, 3);
  EXPECT_EQ(c.mixer(1).window, 0);
}

// EXAONE 4: OLMo 2's names with QK-norm per head; a window and a sliding pattern make the full
// layers attend without RoPE.
TEST(ConvertGguf, Exaone4WindowsAndGlobalNoPE) {
  TempDir dir;
  HfModel m = make_dense_or_moe({.type = "exaone4"});
  m.config["sliding_window"] = 3;
  m.config["layer_types"] = {"sliding_attention", "full_attention"};
  write_llama_gguf(m, dir / "m.gguf", {{"attn_v.weight", GgmlType::Q8_0}}, "gpt2", "gpt-2", [](GgufWriter& w) {
    w.set_u32("exaone4.attention.sliding_window", 3), w.set_u32("exaone4.attention.sliding_window_pattern", 2);
  }, "exaone4");
  expect_converted_matches(m, dir);
  const ModelConfig c = GgufModel(dir / "m.gguf").config();
  EXPECT_TRUE(c.mixer(0).rope && !c.mixer(1).rope);
}

// Qwen3.5 / Qwen3.5-MoE as llama.cpp's converter writes them (conversion/qwen.py), from the HF
// tensors of make_qwen_hybrid: the value heads tiled over the key heads (file head j h_k + g
// holds value head j of key head g) in attn_qkv's v rows, ssm_conv1d's v channels, attn_gate,
// ssm_beta, ssm_alpha, ssm_a, ssm_dt.bias and ssm_out's columns; ssm_a = -e^A_log; conv1d
// squeezed to [channels, K]; every zero-centred gain stored as 1 + w (ssm_norm as it is);
// the shared expert's gate as a vector; the MTP block and the vision tower not written. The
// quantised tensors (`q8`) hold what the oracle then reads: their values are tiled, encoded and
// untiled back into `m`.
void write_qwen35_gguf(HfModel& m, const std::string& path, const std::string& arch, const std::set<std::string>& q8) {
  GgufWriter w;
  const std::string a = arch + ".", P = "model.language_model.";
  w.set_string("general.architecture", arch);
  w.set_u32(a + "context_length", 64), w.set_u32(a + "embedding_length", kD), w.set_u32(a + "block_count", kLayers);
  w.set_u32(a + "feed_forward_length", kInter), w.set_u32(a + "attention.head_count", kHeads);
  w.set_u32(a + "attention.head_count_kv", kKvHeads), w.set_u32(a + "attention.key_length", kHeadDim);
  w.set_f32(a + "attention.layer_norm_rms_epsilon", 1e-6f), w.set_f32(a + "rope.freq_base", 500.0f);
  w.set_u32(a + "rope.dimension_count", kHeadDim / 2), w.set_u32(a + "full_attention_interval", 2);
  w.set_u32(a + "ssm.conv_kernel", kGdnConv), w.set_u32(a + "ssm.state_size", kGdnDim);
  w.set_u32(a + "ssm.group_count", kGdnKeyHeads), w.set_u32(a + "ssm.time_step_rank", kGdnValueHeads);
  w.set_u32(a + "ssm.inner_size", kGdnValueHeads * kGdnDim);
  if (arch == "qwen35moe") {
    w.set_u32(a + "expert_count", kExperts), w.set_u32(a + "expert_used_count", kTopK);
    w.set_u32(a + "expert_feed_forward_length", kExpertHidden), w.set_u32(a + "expert_shared_feed_forward_length", kSharedHidden);
  }
  set_tokenizer(w, "gpt2", "qwen35");
  const int hk = kGdnKeyHeads, r = kGdnValueHeads / kGdnKeyHeads, key = hk * kGdnDim;
  // Tiled head of grouped head h, over `width` rows (or columns) a head.
  auto tiled = [&](int64_t h) { return (h % r) * hk + h / r; };
  auto permute = [&](std::vector<float>& v, int64_t cols, int64_t first_row, int64_t width, bool columns, bool to_file) {
    std::vector<float> out = v;
    const int64_t rows = int64_t(v.size()) / cols;
    for (int64_t h = 0; h < kGdnValueHeads; ++h) {
      const int64_t from = to_file ? h : tiled(h), to = to_file ? tiled(h) : h;
      for (int64_t e = 0; e < width; ++e) {
        if (columns)
          for (int64_t row = 0; row < rows; ++row) out[size_t(row * cols + to * width + e)] = v[size_t(row * cols + from * width + e)];
        else
          for (int64_t c = 0; c < cols; ++c)
            out[size_t((first_row + to * width + e) * cols + c)] = v[size_t((first_row + from * width + e) * cols + c)];
      }
    }
    v = std::move(out);
  };
  auto put = [&](const std::string& hf, const std::string& name, Shape shape, int64_t tile_row, int64_t tile_width, bool columns,
                 std::function<float(float)> stored = nullptr) {
    HfTensor& t = m.tensors.at(hf);
    std::vector<float> values = t.values;
    const int64_t cols = shape.size() == 1 ? 1 : shape.back();  // a vector: one value a row
    if (tile_width) permute(values, cols, tile_row, tile_width, columns, true);
    const GgmlType type = q8.count(name) ? GgmlType::Q8_0 : GgmlType::F32;
    std::vector<uint8_t> bytes = encode_for_test(type, values, shape.size() == 1 ? int64_t(values.size()) : cols, 7);
    std::vector<float> seen = values;  // what the file holds, in HF order for the oracle
    if (tile_width) permute(seen, cols, tile_row, tile_width, columns, false);
    t.values = seen;
    if (stored) {
      ASSERT_EQ(type, GgmlType::F32) << name;
      for (size_t k = 0; k < values.size(); ++k) {
        const float f = stored(values[k]);
        std::memcpy(bytes.data() + 4 * k, &f, 4);
      }
    }
    auto held = std::make_shared<std::vector<uint8_t>>(std::move(bytes));
    w.add_tensor(name, type, shape, [held](const ByteSink& sink) { sink(held->data(), held->size()); });
  };
  const auto plus_one = [](float x) { return x + 1.0f; };
  put(P + "embed_tokens.weight", "token_embd.weight", {kVocab, kD}, 0, 0, false);
  put(P + "norm.weight", "output_norm.weight", {kD}, 0, 0, false, plus_one);
  put("lm_head.weight", "output.weight", {kVocab, kD}, 0, 0, false);
  for (int i = 0; i < kLayers; ++i) {
    const std::string p = P + "layers." + std::to_string(i) + ".", b = "blk." + std::to_string(i) + ".";
    put(p + "input_layernorm.weight", b + "attn_norm.weight", {kD}, 0, 0, false, plus_one);
    put(p + "post_attention_layernorm.weight", b + "post_attention_norm.weight", {kD}, 0, 0, false, plus_one);
    if (i == 0) {
      const std::string l = p + "linear_attn.";
      const int64_t channels = 2 * key + kGdnValueHeads * kGdnDim;
      put(l + "in_proj_qkv.weight", b + "attn_qkv.weight", {channels, kD}, 2 * key, kGdnDim, false);
      put(l + "in_proj_z.weight", b + "attn_gate.weight", {kGdnValueHeads * kGdnDim, kD}, 0, kGdnDim, false);
      put(l + "in_proj_b.weight", b + "ssm_beta.weight", {kGdnValueHeads, kD}, 0, 1, false);
      put(l + "in_proj_a.weight", b + "ssm_alpha.weight", {kGdnValueHeads, kD}, 0, 1, false);
      put(l + "conv1d.weight", b + "ssm_conv1d.weight", {channels, kGdnConv}, 2 * key, kGdnDim, false);
      put(l + "A_log", b + "ssm_a", {kGdnValueHeads}, 0, 1, false, [](float x) { return -std::exp(x); });
      put(l + "dt_bias", b + "ssm_dt.bias", {kGdnValueHeads}, 0, 1, false);
      put(l + "norm.weight", b + "ssm_norm.weight", {kGdnDim}, 0, 0, false);
      put(l + "out_proj.weight", b + "ssm_out.weight", {kD, kGdnValueHeads * kGdnDim}, 0, kGdnDim, true);
    } else {
      const std::string at = p + "self_attn.";
      put(at + "q_proj.weight", b + "attn_q.weight", {2 * kHeads * kHeadDim, kD}, 0, 0, false);
      put(at + "k_proj.weight", b + "attn_k.weight", {kKvHeads * kHeadDim, kD}, 0, 0, false);
      put(at + "v_proj.weight", b + "attn_v.weight", {kKvHeads * kHeadDim, kD}, 0, 0, false);
      put(at + "o_proj.weight", b + "attn_output.weight", {kD, kHeads * kHeadDim}, 0, 0, false);
      put(at + "q_norm.weight", b + "attn_q_norm.weight", {kHeadDim}, 0, 0, false, plus_one);
      put(at + "k_norm.weight", b + "attn_k_norm.weight", {kHeadDim}, 0, 0, false, plus_one);
    }
    if (arch == "qwen35") {
      for (const char* f : {"gate", "up", "down"})
        put(p + "mlp." + f + "_proj.weight", b + "ffn_" + f + ".weight", m.tensors.at(p + "mlp." + f + "_proj.weight").shape, 0, 0, false);
      continue;
    }
    put(p + "mlp.gate.weight", b + "ffn_gate_inp.weight", {kExperts, kD}, 0, 0, false);
    for (const char* f : {"gate", "up", "down"}) {
      // The experts stacked [E, rows, cols] from the per-expert tensors (the oracle keeps reading those).
      const Shape one = m.tensors.at(p + "mlp.experts.0." + f + "_proj.weight").shape;
      std::vector<float> stacked;
      for (int e = 0; e < kExperts; ++e) {
        const auto& v = m.at(p + "mlp.experts." + std::to_string(e) + "." + f + "_proj.weight");
        stacked.insert(stacked.end(), v.begin(), v.end());
      }
      auto held = std::make_shared<std::vector<uint8_t>>(stacked.size() * 4);
      std::memcpy(held->data(), stacked.data(), held->size());
      w.add_tensor(b + "ffn_" + f + "_exps.weight", GgmlType::F32, {kExperts, one[0], one[1]},
                   [held](const ByteSink& sink) { sink(held->data(), held->size()); });
      put(p + "mlp.shared_expert." + f + "_proj.weight", b + "ffn_" + f + "_shexp.weight",
          m.tensors.at(p + "mlp.shared_expert." + f + "_proj.weight").shape, 0, 0, false);
    }
    put(p + "mlp.shared_expert_gate.weight", b + "ffn_gate_inp_shexp.weight", {kD}, 0, 0, false);
  }
  w.write(path);
}

// LFM2 as llama.cpp's converter writes it (conversion/lfm2.py): attention.head_count_kv one
// count per layer, 0 for the conv layers; the MLP width already adjusted; conv.conv squeezed to
// [d, K]; embedding_norm as token_embd_norm; no q / k permutation (NEOX rotation).
// LFM2-MoE (lfm2moe) adds leading_dense_block_count, expert_count / used_count /
// feed_forward_length, expert_gating_func 2 (sigmoid), expert_weights_scale, the stacked experts
// ffn_*_exps, the router ffn_gate_inp and the selection biases exp_probs_b.
void write_lfm2_gguf(HfModel& m, const std::string& path) {
  GgufWriter w;
  const bool moe = m.config["model_type"] == "lfm2_moe";
  const std::string arch = moe ? "lfm2moe" : "lfm2", a = arch + ".";
  w.set_string("general.architecture", arch);
  w.set_u32(a + "context_length", 64), w.set_u32(a + "embedding_length", kD), w.set_u32(a + "block_count", kLayers);
  w.set_u32(a + "feed_forward_length", kInter), w.set_u32(a + "attention.head_count", kHeads);
  w.set_u32(a + "attention.key_length", kHeadDim), w.set_u32(a + "shortconv.l_cache", kConvTaps);
  w.set_f32(a + "attention.layer_norm_rms_epsilon", 1e-5f), w.set_f32(a + "rope.freq_base", 500.0f);
  GgufValue kv;
  kv.type = GgufType::array, kv.elem = GgufType::u32, kv.ints = {0, kKvHeads};
  w.set(a + "attention.head_count_kv", kv);
  if (moe) {
    w.set_u32(a + "leading_dense_block_count", 1), w.set_u32(a + "expert_count", kExperts);
    w.set_u32(a + "expert_used_count", kTopK), w.set_u32(a + "expert_feed_forward_length", kExpertHidden);
    w.set_u32(a + "expert_gating_func", 2), w.set_f32(a + "expert_weights_scale", 2.5f);
    const std::string p = "model.layers.1.feed_forward.";
    for (const auto& [w_hf, name] : {std::pair{"w1", "ffn_gate_exps"}, std::pair{"w3", "ffn_up_exps"}, std::pair{"w2", "ffn_down_exps"}}) {
      auto stacked = std::make_shared<std::vector<float>>();
      Shape one;
      for (int e = 0; e < kExperts; ++e) {
        const HfTensor& t = m.tensors.at(p + "experts." + std::to_string(e) + "." + w_hf + ".weight");
        stacked->insert(stacked->end(), t.values.begin(), t.values.end()), one = t.shape;  // F32: the oracle's values
      }
      w.add_tensor(std::string("blk.1.") + name + ".weight", GgmlType::F32, {kExperts, one[0], one[1]},
                   [stacked](const ByteSink& sink) { sink(stacked->data(), stacked->size() * 4); });
    }
  }
  set_tokenizer(w, "gpt2", "lfm2");
  const std::map<std::string, std::string> names = {
      {"operator_norm.weight", "attn_norm.weight"}, {"ffn_norm.weight", "ffn_norm.weight"},
      {"conv.in_proj.weight", "shortconv.in_proj.weight"}, {"conv.conv.weight", "shortconv.conv.weight"},
      {"conv.out_proj.weight", "shortconv.out_proj.weight"}, {"self_attn.q_proj.weight", "attn_q.weight"},
      {"self_attn.k_proj.weight", "attn_k.weight"}, {"self_attn.v_proj.weight", "attn_v.weight"},
      {"self_attn.out_proj.weight", "attn_output.weight"}, {"self_attn.q_layernorm.weight", "attn_q_norm.weight"},
      {"self_attn.k_layernorm.weight", "attn_k_norm.weight"}, {"feed_forward.w1.weight", "ffn_gate.weight"},
      {"feed_forward.w3.weight", "ffn_up.weight"}, {"feed_forward.w2.weight", "ffn_down.weight"},
      {"feed_forward.gate.weight", "ffn_gate_inp.weight"}, {"feed_forward.expert_bias", "exp_probs_b.bias"}};
  for (auto& [hf, t] : m.tensors) {
    if (hf.find(".experts.") != std::string::npos) continue;  // written stacked above
    std::string name = hf == "model.embed_tokens.weight" ? "token_embd.weight" : hf == "model.embedding_norm.weight" ? "token_embd_norm.weight" : "";
    if (name.empty()) {
      const size_t dot = hf.find('.', 13);
      name = "blk." + hf.substr(13, dot - 13) + "." + names.at(hf.substr(dot + 1));
    }
    Shape shape = t.shape;
    if (shape.size() == 3) shape = {shape[0], shape[2]};  // conv.conv [d, 1, K] -> [d, K]
    const GgmlType type = name.find("in_proj") != std::string::npos ? GgmlType::Q8_0 : GgmlType::F32;
    std::vector<float> values = t.values;
    auto held = std::make_shared<std::vector<uint8_t>>(encode_for_test(type, values, shape.back(), 3));
    t.values = values;  // the oracle reads what the blocks hold
    w.add_tensor(name, type, shape, [held](const ByteSink& sink) { sink(held->data(), held->size()); });
  }
  w.write(path);
}

// Granite 4.0-H as llama.cpp's converter writes it (granitehybrid): attention.head_count_kv 0 for
// the Mamba-2 layer, ssm.* widths, rope.scaling.finetuned false for "nope"; ssm_in (Q8_0),
// ssm_conv1d [channels, K] and its bias, ssm_a = -e^{A_log}, ssm_d, ssm_norm [G, inner / G];
// q and k permuted as Llama's; the shared MLP as ffn_gate / ffn_up / ffn_down, or beside routed
// experts as ffn_*_shexp (expert_shared_feed_forward_length) with ffn_gate_inp and ffn_*_exps.
void write_granite4h_gguf(HfModel& m, const std::string& path) {
  GgufWriter w;
  const bool moe = m.config.value("num_local_experts", 0) > 0;
  const std::string a = "granitehybrid.";
  w.set_string("general.architecture", "granitehybrid");
  w.set_u32(a + "context_length", 64), w.set_u32(a + "embedding_length", kD), w.set_u32(a + "block_count", kLayers);
  w.set_u32(a + "feed_forward_length", moe ? kExpertHidden : kInter), w.set_u32(a + "attention.head_count", kHeads);
  w.set_u32(a + "attention.key_length", kHeadDim), w.set_u32(a + "attention.value_length", kHeadDim);
  w.set_f32(a + "attention.layer_norm_rms_epsilon", 1e-5f), w.set_f32(a + "rope.freq_base", 500.0f);
  w.set_bool(a + "rope.scaling.finetuned", false);
  if (moe) {
    w.set_u32(a + "expert_count", kExperts), w.set_u32(a + "expert_used_count", kTopK);
    w.set_u32(a + "expert_shared_feed_forward_length", kInter);
  }
  w.set_u32(a + "ssm.conv_kernel", kMambaConv), w.set_u32(a + "ssm.inner_size", kD), w.set_u32(a + "ssm.state_size", kMambaState);
  w.set_u32(a + "ssm.time_step_rank", kMambaHeads), w.set_u32(a + "ssm.group_count", 1);
  set_granite_scales(w, "granitehybrid");
  GgufValue kv;
  kv.type = GgufType::array, kv.elem = GgufType::u32, kv.ints = {0, kKvHeads};
  w.set(a + "attention.head_count_kv", kv);
  set_tokenizer(w, "gpt2", "gpt-2");
  auto add = [&](const std::string& name, GgmlType type, const Shape& shape, std::vector<float> values) {
    auto held = std::make_shared<std::vector<uint8_t>>(encode_for_test(type, values, shape.back(), 5));
    w.add_tensor(name, type, shape, [held](const ByteSink& sink) { sink(held->data(), held->size()); });
    return values;  // what the blocks hold
  };
  auto permuted = [](const std::vector<float>& v, int heads, int64_t cols) {  // our row a d/2 + i -> llama.cpp's 2i + a
    std::vector<float> out(v.size());
    const int64_t d = int64_t(v.size()) / cols / heads;
    for (int h = 0; h < heads; ++h)
      for (int a = 0; a < 2; ++a)
        for (int64_t i = 0; i < d / 2; ++i)
          std::copy_n(v.begin() + (h * d + a * d / 2 + i) * cols, cols, out.begin() + (h * d + 2 * i + a) * cols);
    return out;
  };
  add("token_embd.weight", GgmlType::F32, {kVocab, kD}, m.at("model.embed_tokens.weight"));
  add("output_norm.weight", GgmlType::F32, {kD}, m.at("model.norm.weight"));
  if (m.has("lm_head.weight")) add("output.weight", GgmlType::F32, {kVocab, kD}, m.at("lm_head.weight"));
  for (int i = 0; i < kLayers; ++i) {
    const std::string p = "model.layers." + std::to_string(i) + ".", b = "blk." + std::to_string(i) + ".";
    add(b + "attn_norm.weight", GgmlType::F32, {kD}, m.at(p + "input_layernorm.weight"));
    add(b + "ffn_norm.weight", GgmlType::F32, {kD}, m.at(p + "post_attention_layernorm.weight"));
    const std::vector<float>& in = m.at(p + "shared_mlp.input_linear.weight");
    const std::string shexp = moe ? "_shexp.weight" : ".weight";
    add(b + "ffn_gate" + shexp, GgmlType::F32, {kInter, kD}, {in.begin(), in.begin() + kInter * kD});
    add(b + "ffn_up" + shexp, GgmlType::F32, {kInter, kD}, {in.begin() + kInter * kD, in.end()});
    add(b + "ffn_down" + shexp, GgmlType::F32, {kD, kInter}, m.at(p + "shared_mlp.output_linear.weight"));
    if (moe) {  // input_linear [E, 2 h, d]: each expert's gate rows, then its up rows
      const std::string q = p + "block_sparse_moe.";
      const std::vector<float>& experts = m.at(q + "input_linear.weight");
      std::vector<float> gate, up;
      for (int e = 0; e < kExperts; ++e) {
        const auto first = experts.begin() + int64_t(e) * 2 * kExpertHidden * kD;
        gate.insert(gate.end(), first, first + kExpertHidden * kD);
        up.insert(up.end(), first + kExpertHidden * kD, first + 2 * kExpertHidden * kD);
      }
      add(b + "ffn_gate_inp.weight", GgmlType::F32, {kExperts, kD}, m.at(q + "router.layer.weight"));
      add(b + "ffn_gate_exps.weight", GgmlType::F32, {kExperts, kExpertHidden, kD}, gate);
      add(b + "ffn_up_exps.weight", GgmlType::F32, {kExperts, kExpertHidden, kD}, up);
      add(b + "ffn_down_exps.weight", GgmlType::F32, {kExperts, kD, kExpertHidden}, m.at(q + "output_linear.weight"));
    }
    if (i == 1) {
      const std::string q = p + "self_attn.";
      add(b + "attn_q.weight", GgmlType::F32, {kHeads * kHeadDim, kD}, permuted(m.at(q + "q_proj.weight"), kHeads, kD));
      add(b + "attn_k.weight", GgmlType::F32, {kKvHeads * kHeadDim, kD}, permuted(m.at(q + "k_proj.weight"), kKvHeads, kD));
      add(b + "attn_v.weight", GgmlType::F32, {kKvHeads * kHeadDim, kD}, m.at(q + "v_proj.weight"));
      add(b + "attn_output.weight", GgmlType::F32, {kD, kHeads * kHeadDim}, m.at(q + "o_proj.weight"));
      continue;
    }
    const std::string q = p + "mamba.";
    const int channels = kD + 2 * kMambaState;
    HfTensor& in_proj = m.tensors.at(q + "in_proj.weight");
    in_proj.values = add(b + "ssm_in.weight", GgmlType::Q8_0, in_proj.shape, in_proj.values);
    add(b + "ssm_conv1d.weight", GgmlType::F32, {channels, kMambaConv}, m.at(q + "conv1d.weight"));
    add(b + "ssm_conv1d.bias", GgmlType::F32, {channels}, m.at(q + "conv1d.bias"));
    add(b + "ssm_dt.bias", GgmlType::F32, {kMambaHeads}, m.at(q + "dt_bias"));
    std::vector<float> a_neg = m.at(q + "A_log");
    for (float& x : a_neg) x = -std::exp(x);
    add(b + "ssm_a", GgmlType::F32, {kMambaHeads, 1}, a_neg);
    add(b + "ssm_d", GgmlType::F32, {kMambaHeads, 1}, m.at(q + "D"));
    // [1, inner] as gguf-py writes one group's gain; llama-quantize writes it back as [inner].
    add(b + "ssm_norm.weight", GgmlType::F32, moe ? Shape{kD} : Shape{1, kD}, m.at(q + "norm.weight"));
    add(b + "ssm_out.weight", GgmlType::F32, {kD, kD}, m.at(q + "out_proj.weight"));
  }
  w.write(path);
}

TEST(ConvertGguf, Granite4HybridMamba2MatchesHfForward) {
  TempDir dir;
  HfModel m = make_granite4h();
  write_granite4h_gguf(m, dir / "m.gguf");
  expect_converted_matches(m, dir);
  const ModelConfig c = GgufModel(dir / "m.gguf").config();
  EXPECT_EQ(c.mixer(0).kind, MixerKind::mamba2);
  EXPECT_EQ(c.mixer(0).head_dim, kD / kMambaHeads);
  EXPECT_TRUE(c.mixer(0).conv_bias);
  EXPECT_FALSE(c.mixer(1).rope.has_value());
  EXPECT_EQ(c.ffn(0).hidden, kInter);
}

TEST(ConvertGguf, Granite4HybridExpertsBesideTheSharedMlpMatchHfForward) {
  TempDir dir;
  HfModel m = make_granite4h(true);
  write_granite4h_gguf(m, dir / "m.gguf");
  expect_converted_matches(m, dir);
  const GgufModel model(dir / "m.gguf");  // held: the spec below refers into its config
  const FfnSpec& f = model.config().ffn(0);
  EXPECT_EQ(f.kind, FfnKind::moe);
  EXPECT_EQ(f.expert_hidden, kExpertHidden);
  EXPECT_EQ(f.shared_hidden, kInter);
}

TEST(ConvertGguf, Lfm2ShortConvMatchesHfForward) {
  TempDir dir;
  HfModel m = make_lfm2();
  write_lfm2_gguf(m, dir / "m.gguf");
  expect_converted_matches(m, dir);
  const ModelConfig c = GgufModel(dir / "m.gguf").config();
  EXPECT_EQ(c.mixer(0).kind, MixerKind::short_conv);
  EXPECT_EQ(c.mixer(1).kind, MixerKind::attention);
  EXPECT_EQ(c.ffn(0).hidden, kInter);
}

TEST(ConvertGguf, Lfm2MoeSigmoidRoutingMatchesHfForward) {
  TempDir dir;
  HfModel m = make_lfm2_moe();
  write_lfm2_gguf(m, dir / "m.gguf");
  expect_converted_matches(m, dir);
  const GgufModel model(dir / "m.gguf");
  const FfnSpec& f = model.config().ffn(1);
  EXPECT_EQ(f.score, RouterScore::sigmoid);
  EXPECT_TRUE(f.balance_bias);
  EXPECT_DOUBLE_EQ(f.routed_scale, 2.5);
}

TEST(ConvertGguf, Qwen35TiledValueHeadsMatchHfForward) {
  TempDir dir;
  HfModel m = make_qwen_hybrid("qwen3_5");
  // ssm_out in Q8_0: each value head's 8 columns lie inside a 32-value block.
  write_qwen35_gguf(m, dir / "m.gguf", "qwen35", {"blk.0.attn_qkv.weight", "blk.0.ssm_out.weight", "blk.1.attn_q.weight"});
  expect_converted_matches(m, dir);
  const ModelConfig c = GgufModel(dir / "m.gguf").config();
  EXPECT_EQ(c.mixer(0).kind, MixerKind::gdn);
  EXPECT_EQ(c.mixer(0).value_heads(), kGdnValueHeads);
  EXPECT_TRUE(c.mixer(1).output_gate);
  EXPECT_EQ(c.mixer(1).rope->rotary_dim, kHeadDim / 2);
}

TEST(ConvertGguf, Qwen35MoeMatchesHfForward) {
  TempDir dir;
  HfModel m = make_qwen_hybrid("qwen3_5_moe");
  write_qwen35_gguf(m, dir / "m.gguf", "qwen35moe", {});
  expect_converted_matches(m, dir);
}

// YaRN outside deepseek2, as llama.cpp's converter writes transformers' rope_parameters: on an
// Olmo 3 file the full layers take it, the sliding ones rotate unscaled.
TEST(ConvertGguf, YarnMetadataMapsToTheFullLayers) {
  TempDir dir;
  GgufWriter w;
  set_fixture_shape(w, "olmo2");
  w.set_u32("olmo2.attention.sliding_window", 3);
  w.set_string("olmo2.rope.scaling.type", "yarn"), w.set_f32("olmo2.rope.scaling.factor", 8.0f);
  w.set_u32("olmo2.rope.scaling.original_context_length", 16), w.set_f32("olmo2.rope.scaling.yarn_beta_fast", 16.0f);
  w.set_f32("olmo2.rope.scaling.yarn_attn_factor", 1.5f);
  w.add_tensor("token_embd.weight", GgmlType::F32, {kVocab, kD}, [](const ByteSink& sink) {
    const std::vector<float> zeros(size_t(kVocab) * kD, 0.0f);
    sink(zeros.data(), zeros.size() * 4);
  });
  w.write(dir / "m.gguf");
  const ModelConfig c = GgufModel(dir / "m.gguf").config();
  EXPECT_EQ(c.mixer(0).window, 3);  // with two layers and the default step of 4, layer 0 slides
  EXPECT_EQ(c.mixer(0).rope->yarn_factor, 0.0);
  EXPECT_EQ(c.mixer(1).window, 3);
  w.set_u32("olmo2.attention.sliding_window_pattern", 2);
  w.write(dir / "m.gguf");
  const ModelConfig d = GgufModel(dir / "m.gguf").config();
  const Rope& full = *d.mixer(1).rope;
  EXPECT_EQ(d.mixer(1).window, 0);
  EXPECT_EQ(full.yarn_factor, 8.0);
  EXPECT_EQ(full.yarn_original_context, 16);
  EXPECT_EQ(full.yarn_beta_fast, 16.0);
  EXPECT_NEAR(full.yarn_mscale, 0.5 / (0.1 * std::log(8.0)), 1e-6);
}

// ---- Phi-3: fused tensors and LongRoPE -----------------------------------------------------------

// make_phi3() as llama.cpp's converter writes it (conversion/phi.py): attn_qkv and ffn_up as the
// fused HF tensors (no row permutation: phi3 rotates halves), the LongRoPE factors as
// rope_factors_short / rope_factors_long, the original context and attention factor as metadata.
void write_phi3_gguf(HfModel& m, const std::string& path) {
  GgufWriter w;
  set_fixture_shape(w, "phi3");
  w.set_u32("phi3.rope.dimension_count", kHeadDim * 3 / 4), w.set_u32("phi3.attention.sliding_window", 5);
  w.set_u32("phi3.rope.scaling.original_context_length", 4);
  w.set_f32("phi3.rope.scaling.attn_factor", float(std::sqrt(1 + std::log(16.0) / std::log(4.0))));
  set_tokenizer(w, "gpt2");
  static const std::map<std::string, std::pair<std::string, GgmlType>> layer = {
      {"input_layernorm.weight", {"attn_norm.weight", GgmlType::F32}},
      {"post_attention_layernorm.weight", {"ffn_norm.weight", GgmlType::F32}},
      {"self_attn.qkv_proj.weight", {"attn_qkv.weight", GgmlType::Q8_0}},
      {"self_attn.o_proj.weight", {"attn_output.weight", GgmlType::F16}},
      {"mlp.gate_up_proj.weight", {"ffn_up.weight", GgmlType::Q4_K}},
      {"mlp.down_proj.weight", {"ffn_down.weight", GgmlType::F16}}};
  uint32_t seed = 300;
  for (auto& [hf, t] : m.tensors) {
    if (hf.find("rotary_emb") != std::string::npos) continue;
    std::pair<std::string, GgmlType> to = hf == "model.embed_tokens.weight" ? std::pair{"token_embd.weight", GgmlType::F16}
                                          : hf == "model.norm.weight"       ? std::pair{"output_norm.weight", GgmlType::F32}
                                          : hf == "lm_head.weight"          ? std::pair{"output.weight", GgmlType::Q8_0}
                                                                            : std::pair<std::string, GgmlType>{};
    if (to.first.empty()) {
      const size_t dot = hf.find('.', 13);
      const auto& [name, type] = layer.at(hf.substr(dot + 1));
      to = {"blk." + hf.substr(13, dot - 13) + "." + name, type};
    }
    std::vector<float> values = t.values;
    auto held = std::make_shared<std::vector<uint8_t>>(encode_for_test(to.second, values, t.shape.back(), seed++));
    t.values = values;  // the oracle sees what the blocks hold
    w.add_tensor(to.first, to.second, t.shape, [held](const ByteSink& sink) { sink(held->data(), held->size()); });
  }
  for (const char* kind : {"short", "long"}) {
    auto f = std::make_shared<std::vector<float>>();
    for (double v : m.config["rope_scaling"][std::string(kind) + "_factor"]) f->push_back(float(v));
    w.add_tensor(std::string("rope_factors_") + kind + ".weight", GgmlType::F32, {int64_t(f->size())},
                 [f](const ByteSink& sink) { sink(f->data(), f->size() * 4); });
  }
  w.write(path);
}

// Six positions: 0-3 rotate by the short factors, 4-5 by the long ones, 5 sees five keys.
TEST(ConvertGguf, Phi3FusedTensorsAndLongRopeMatchHfForward) {
  TempDir dir;
  HfModel m = make_phi3();
  write_phi3_gguf(m, dir / "m.gguf");
  expect_converted_matches(m, dir);
}

// A factor list of the wrong length, or only one of the two, is an error naming the tensor.
TEST(ConvertGguf, Phi3LongRopeFactorsAreChecked) {
  TempDir dir;
  HfModel m = make_phi3();
  m.config["rope_scaling"]["long_factor"].erase(0);
  write_phi3_gguf(m, dir / "m.gguf");
  ConvertOptions o;
  o.dtype = kernels::DType::f32;
  try {
    convert_gguf_file(dir / "m.gguf", dir / "wren", o);
    FAIL() << "a short long-factor tensor was accepted";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("rope_factors_long.weight"), std::string::npos) << e.what();
  }
}

// ---- Llama 3's RoPE scaling as rope_freqs.weight ----------------------------------------------

// Each frequency's divisor as convert_hf_to_gguf.py computes it from transformers' llama3
// rope_scaling (factor, low_freq_factor, high_freq_factor, original_max_position_embeddings).
std::vector<float> llama3_divisors(double theta, int dim, double factor, double low, double high, double context) {
  std::vector<float> d;
  for (int i = 0; i < dim; i += 2) {
    const double freq = 1.0 / std::pow(theta, double(i) / dim), wavelen = 2 * 3.14159265358979323846 / freq;
    if (wavelen < context / high) {
      d.push_back(1.0f);
    } else if (wavelen > context / low) {
      d.push_back(float(factor));
    } else {
      const double smooth = (context / wavelen - low) / (high - low);
      d.push_back(float(1 / ((1 - smooth) / factor + smooth)));
    }
  }
  return d;
}

std::function<void(GgufWriter&)> with_divisors(std::vector<float> d) {
  return [d = std::move(d)](GgufWriter& w) {
    auto held = std::make_shared<std::vector<float>>(d);
    w.add_tensor("rope_freqs.weight", GgmlType::F32, {int64_t(d.size())},
                 [held](const ByteSink& sink) { sink(held->data(), held->size() * 4); });
  };
}

// Llama-3.2-1B's scaling (theta 500000, 64 rotary dimensions, factor 32, low 1, high 4, 8192)
// reads back as exactly those parameters; a divisor moved by 1% is an error naming the tensor.
TEST(ConvertGguf, Llama3DivisorsReadAsTheirParameters) {
  TempDir dir;
  HfModel m = make_dense_or_moe({.type = "llama"});
  std::vector<float> d = llama3_divisors(500000.0, 64, 32.0, 1.0, 4.0, 8192.0);
  auto llama32 = [&](const std::vector<float>& divisors) {
    const auto add = with_divisors(divisors);
    return [add](GgufWriter& w) {
      w.set_u32("llama.attention.key_length", 64), w.set_u32("llama.rope.dimension_count", 64);
      w.set_f32("llama.rope.freq_base", 500000.0f);
      add(w);
    };
  };
  write_llama_gguf(m, dir / "m.gguf", {}, "gpt2", "gpt-2", llama32(d));
  const Json want = {{"rope_type", "llama3"}, {"factor", 32.0}, {"low_freq_factor", 1.0}, {"high_freq_factor", 4.0},
                     {"original_max_position_embeddings", 8192}};
  EXPECT_EQ(GgufModel(dir / "m.gguf").hf_config()["rope_scaling"], want);
  d[16] *= 1.01f;
  write_llama_gguf(m, dir / "m.gguf", {}, "gpt2", "gpt-2", llama32(d));
  try {
    (void)GgufModel(dir / "m.gguf");
    FAIL() << "accepted divisors off Llama-3's curve";
  } catch (const IoError& e) {
    EXPECT_NE(std::string(e.what()).find("rope_freqs.weight"), std::string::npos) << e.what();
  }
}

// The fixture's model with a Llama-3 scaling whose middle band covers its wavelengths (theta
// 500, 16 rotary dimensions: factor 8, low 64, high 1024, context 8192): the GGUF carrying the
// divisors decodes as the Hugging Face folder carrying the parameters.
TEST(ConvertGguf, Llama3DivisorsDecodeAsTheHfScaling) {
  TempDir dir;
  HfModel m = make_dense_or_moe({.type = "llama"});
  write_llama_gguf(m, dir / "m.gguf", {}, "gpt2", "gpt-2", with_divisors(llama3_divisors(500.0, kHeadDim, 8, 64, 1024, 8192)));
  m.config["rope_scaling"] = {{"rope_type", "llama3"}, {"factor", 8.0}, {"low_freq_factor", 64.0}, {"high_freq_factor", 1024.0},
                              {"original_max_position_embeddings", 8192}};
  std::filesystem::create_directories(dir / "hf");
  m.write(dir / "hf", 1, tokenizer_json());  // the values the GGUF's blocks hold
  ConvertOptions o;
  o.dtype = kernels::DType::f32;
  convert_gguf_file(dir / "m.gguf", dir / "from_gguf", o);
  convert_hf_checkpoint(dir / "hf", dir / "from_hf", o);
  Session a(open_model(dir / "from_gguf")), b(open_model(dir / "from_hf"));
  std::vector<float> la(size_t(a.vocab_rows())), lb(la.size()), lc(la.size());
  Session plain_hf = [&] {
    m.config.erase("rope_scaling");
    std::filesystem::create_directories(dir / "hf_plain");
  m.write(dir / "hf_plain", 1, tokenizer_json());
    convert_hf_checkpoint(dir / "hf_plain", dir / "plain", o);
    return Session(open_model(dir / "plain"));
  }();
  float moved = 0;
  for (int32_t t : testing_util::random_tokens(8, kVocab, 9)) {
    a.decode(t, la.data()), b.decode(t, lb.data()), plain_hf.decode(t, lc.data());
    float scale = 0;
    for (float v : lb) scale = std::max(scale, std::fabs(v));
    EXPECT_LE(testing_util::max_abs_diff(la, lb), 1e-5f * scale) << "at position " << a.position() - 1;
    moved = std::max(moved, testing_util::max_abs_diff(lb, lc) / scale);
  }
  EXPECT_GT(moved, 1e-3f) << "the scaling changes nothing at these positions: the comparison cannot fail";
}

// Export writes the divisors llama.cpp's converter would (llama3_divisors above), and import
// reads the parameters back from them.
TEST(ConvertGguf, Llama3ScalingExportsAsDivisors) {
  TempDir dir;
  HfModel m = make_dense_or_moe({.type = "llama"});
  const Json scaling = {{"rope_type", "llama3"}, {"factor", 8.0}, {"low_freq_factor", 64.0}, {"high_freq_factor", 1024.0},
                        {"original_max_position_embeddings", 8192}};
  m.config["rope_scaling"] = scaling;
  std::filesystem::create_directories(dir / "hf");
  m.write(dir / "hf", 1, tokenizer_json());
  convert_hf_checkpoint(dir / "hf", dir / "a", {});
  EXPECT_EQ(export_gguf(dir / "a", dir / "a.gguf"), "llama");
  const GgufModel g(dir / "a.gguf");
  const GgufTensor* t = g.file().find("rope_freqs.weight");
  ASSERT_NE(t, nullptr);
  ASSERT_EQ(t->type, GgmlType::F32);
  const std::vector<float> want = llama3_divisors(500.0, kHeadDim, 8, 64, 1024, 8192);
  ASSERT_EQ(t->ne, std::vector<int64_t>{int64_t(want.size())});
  for (size_t i = 0; i < want.size(); ++i) {
    float got;
    std::memcpy(&got, t->data + 4 * i, 4);
    EXPECT_NEAR(got, want[i], 1e-6f * want[i]) << "divisor " << i;
  }
  EXPECT_EQ(g.hf_config()["rope_scaling"], scaling);
  EXPECT_TRUE(g.unused(build_weight_map(g.config())).empty());
}

// ---- Model directory -> GGUF -> model directory ---------------------------------------------------

ModelConfig small_llama() {
  HfModel m = make_dense_or_moe({.type = "llama"});
  TempDir dir;
  m.write(dir.path.string(), 1, tokenizer_json());
  return HfCheckpoint(dir.path.string()).config();
}

// A model directory exported as `arch` and read back: the same bytes for every tensor, the same logits.
void expect_round_trip(const ModelConfig& c, const std::string& arch) {
  TempDir dir;
  write_random_model(dir / "a", c, 7, kernels::DType::q8, 32, tokenizer_json(), false, 1);
  EXPECT_EQ(export_gguf(dir / "a", dir / "a.gguf"), arch);
  ConvertOptions o;
  o.dtype = kernels::DType::q8;
  convert_gguf_file(dir / "a.gguf", dir / "b", o);
  const ModelFiles a(dir / "a"), b(dir / "b");
  for (const TensorInfo& t : a.weight_map().tensors) {
    const WeightView &x = a.weight(t.name), &y = b.weight(t.name);
    ASSERT_EQ(x.storage, y.storage) << t.name;
    ASSERT_EQ(std::memcmp(x.data, y.data, x.stored->nbytes), 0) << t.name;
    if (x.scales) {
      ASSERT_EQ(std::memcmp(x.scales, y.scales, x.stored_scales->nbytes), 0) << t.name;
    }
  }
  Session sa(open_model(dir / "a")), sb(open_model(dir / "b"));
  std::vector<float> la(static_cast<size_t>(sa.vocab_rows())), lb(la.size());
  for (int32_t t : testing_util::random_tokens(5, kVocab, 6)) {
    sa.decode(t, la.data()), sb.decode(t, lb.data());
    ASSERT_EQ(la, lb);
  }
}

TEST(ConvertGguf, RoundTripIsBitIdenticalAtQ8) { expect_round_trip(small_llama(), "llama"); }

// OLMo 2 as llama.cpp's olmo2: post norms as post_attention_norm / post_ffw_norm, full QK-norm.
TEST(ConvertGguf, Olmo2RoundTripIsBitIdenticalAtQ8) {
  HfModel m = make_dense_or_moe({.type = "olmo2"});
  TempDir dir;
  m.write(dir.path.string(), 1, tokenizer_json());
  ModelConfig c = HfCheckpoint(dir.path.string()).config();
  for (NamedMixer& n : c.mixers) n.spec.head_dim = c.d_model / n.spec.n_heads;  // llama.cpp's olmo2: q as wide as d
  expect_round_trip(c, "olmo2");
}

TEST(ConvertGguf, ExportRefusesEmblaMechanisms) {
  TempDir dir;
  ModelConfig c = small_llama();
  c.residual.kind = ResidualKind::attn_residuals;
  c.residual.block_size = 2;
  write_random_model(dir / "e", c, 7, kernels::DType::q8, 32, tokenizer_json(), false, 1);
  try {
    export_gguf(dir / "e", dir / "e.gguf");
    FAIL() << "exported attention residuals";
  } catch (const IoError& e) {
    EXPECT_NE(std::string(e.what()).find("attention residuals"), std::string::npos) << e.what();
  }
  EXPECT_FALSE(std::filesystem::exists(dir / "e.gguf"));
}

// A tokenizer kind Wren cannot run is a clear error naming it; a SentencePiece vocabulary
// without its scores names the missing key (test_tokenizer_spm converts real ones).
TEST(ConvertGguf, UnknownTokenizerKindIsANamedError) {
  TempDir dir;
  HfModel m = make_dense_or_moe({.type = "llama"});
  for (const char* kind : {"bert", "llama"}) {
    write_llama_gguf(m, dir / "m.gguf", {}, kind);
    try {
      convert_gguf_file(dir / "m.gguf", dir / "out", {});
      FAIL() << "accepted tokenizer kind " << kind;
    } catch (const IoError& e) {
      EXPECT_NE(std::string(e.what()).find(kind == std::string("bert") ? "\"bert\"" : "tokenizer.ggml.scores"),
                std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("m.gguf"), std::string::npos) << e.what();
    }
    EXPECT_FALSE(std::filesystem::exists(dir / "out"));
  }
}

// llama.cpp gives one pre-tokenizer type several names (llama-vocab.cpp): some of the other
// names of the types we run, with the regex their type uses there. SMOLLM's type isolates
// each digit before GPT-2's regex (SmolLM's tokenizer.json: Digits, then ByteLevel), seen
// through text/'s own pre-tokenizer. A name of a type we do not run stays an error that lists
// the names.
std::vector<std::string> pre_pieces(const Json& tokenizer, std::string_view text) {
  JsonReader r(tokenizer, "tokenizer.json", "");
  std::vector<std::string> pieces;
  text::PreTokenizer::read(r).split(text, pieces, true);
  return pieces;
}

TEST(ConvertGguf, PreTokenizerAliasesReadAsTheirType) {
  TempDir dir;
  HfModel m = make_dense_or_moe({.type = "llama"});
  auto tokenizer = [&](const char* pre) {
    write_llama_gguf(m, dir / "m.gguf", {}, "gpt2", pre);
    return Json::parse(GgufModel(dir / "m.gguf").tokenizer_json());
  };
  using text::SplitPattern;
  const std::pair<const char*, SplitPattern> cases[] = {{"deepseek-r1-qwen", SplitPattern::qwen2},
                                                        {"stablelm2", SplitPattern::qwen2},
                                                        {"falcon3", SplitPattern::cl100k},
                                                        {"llama4", SplitPattern::o200k},
                                                        {"phi-2", SplitPattern::gpt2},
                                                        {"smollm", SplitPattern::gpt2}};
  for (auto [pre, pattern] : cases) {
    const Json steps = tokenizer(pre)["pre_tokenizer"]["pretokenizers"];
    EXPECT_EQ(steps[steps.size() - 2]["pattern"]["Regex"], text::split_pattern_regex(pattern)) << pre;
  }
  EXPECT_EQ(pre_pieces(tokenizer("gpt-2"), "x 2024"), (std::vector<std::string>{"x", " 2024"}));
  EXPECT_EQ(pre_pieces(tokenizer("smollm"), "x 2024"), (std::vector<std::string>{"x", " ", "2", "0", "2", "4"}));
  // llama.cpp's LLAMA3 type and tekken take a piece that is a token whole (ignore_merges); DBRX does not.
  EXPECT_TRUE(tokenizer("llama-bpe")["model"]["ignore_merges"].get<bool>());
  EXPECT_TRUE(tokenizer("tekken")["model"]["ignore_merges"].get<bool>());
  EXPECT_FALSE(tokenizer("dbrx")["model"]["ignore_merges"].get<bool>());
  write_llama_gguf(m, dir / "m.gguf", {}, "gpt2", "viking");
  try {
    (void)GgufModel(dir / "m.gguf").tokenizer_json();
    FAIL() << "accepted tokenizer.ggml.pre viking";
  } catch (const IoError& e) {
    EXPECT_NE(std::string(e.what()).find("\"viking\""), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("deepseek-r1-qwen"), std::string::npos) << e.what();
  }
}

// The types without a hand matcher run their regexes in order, each cutting the pieces of the
// one before. The pieces below are worked out by hand from the regexes llama.cpp quotes:
// tekken keeps o200k's cased words without contractions and cuts digits one by one; DeepSeek-V3
// isolates digits in threes, then CJK runs, then words and punctuation.
TEST(ConvertGguf, PreTokenizersWithTheirOwnRegexes) {
  TempDir dir;
  HfModel m = make_dense_or_moe({.type = "llama"});
  auto tokenizer = [&](const char* pre) {
    write_llama_gguf(m, dir / "m.gguf", {}, "gpt2", pre);
    return Json::parse(GgufModel(dir / "m.gguf").tokenizer_json());
  };
  using V = std::vector<std::string>;
  EXPECT_EQ(pre_pieces(tokenizer("tekken"), "McDonald's 2024"), (V{"Mc", "Donald", "'s", " ", "2", "0", "2", "4"}));
  EXPECT_EQ(pre_pieces(tokenizer("gpt-4o"), "McDonald's 2024"), (V{"Mc", "Donald's", " ", "202", "4"}));
  EXPECT_EQ(pre_pieces(tokenizer("deepseek-v3"), "Hello\u4e16\u754c 12345!"), (V{"Hello", "\u4e16\u754c", " ", "123", "45", "!"}));
  EXPECT_EQ(pre_pieces(tokenizer("deepseek-coder"), "ab cd\n12"), (V{"ab", " cd", "\n", "1", "2"}));
  EXPECT_EQ(pre_pieces(tokenizer("glm4"), "It'S 12345"), (V{"It", "'S", " ", "123", "45"}));
  // Qwen3.5 keeps a combining mark inside its word (U+0301 after e), where Qwen2 cuts it off.
  EXPECT_EQ(pre_pieces(tokenizer("qwen35"), "cafe\u0301 It'S 42"), (V{"cafe\u0301", " It", "'S", " ", "4", "2"}));
  EXPECT_EQ(pre_pieces(tokenizer("qwen2"), "cafe\u0301 It'S 42"), (V{"cafe", "\u0301", " It", "'S", " ", "4", "2"}));
}
}  // namespace
}  // namespace wren
