// GGUF: the block formats on hand-made blocks (packed here from the published layouts, values
// known exactly), the reader on damaged files, GGUF -> model directory against the HF-semantics
// oracle for every tensor type, and model directory -> GGUF -> model directory bit for bit.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>

#include "config/read_file.h"
#include "hf_fixture.h"
#include "io/gguf.h"
#include "io/gguf_blocks.h"
#include "runtime/convert.h"
#include "runtime/gguf_export.h"
#include "runtime/gguf_import.h"
#include "runtime/model_files.h"
#include "runtime/session.h"
#include "test_util.h"

namespace wren {
namespace {

using namespace hf_fixture;
using testing_util::TempDir;

uint16_t f16(float x) { return kernels::f32_to_f16(x).bits; }
void put16(uint8_t* p, uint16_t v) { std::memcpy(p, &v, 2); }

// ---- Packers written from the published block layouts (ggml-common.h / quantize_row_*_ref) --

// Q4_K / Q5_K scales: sub-blocks 0..3 in the low 6 bits of bytes j (scale) and j + 4 (min);
// 4..7 as nibbles of byte j + 4, their top two bits in the top bits of bytes j - 4 and j.
void pack_k_scales(const int* sc, const int* mn, uint8_t* s) {
  std::memset(s, 0, 12);
  for (int j = 0; j < 8; ++j) {
    if (j < 4) {
      s[j] = uint8_t(sc[j]), s[j + 4] = uint8_t(mn[j]);
    } else {
      s[j + 4] = uint8_t((sc[j] & 0xF) | ((mn[j] & 0xF) << 4));
      s[j - 4] |= uint8_t((sc[j] >> 4) << 6);
      s[j] |= uint8_t((mn[j] >> 4) << 6);
    }
  }
}

// Q4_K block of 256 values: x_i = d sc_{i/32} L_i - dmin m_{i/32}, L in [0, 15].
void pack_q4_k(float d, float dmin, const int* sc, const int* mn, const int* L, uint8_t* b) {
  put16(b, f16(d)), put16(b + 2, f16(dmin));
  pack_k_scales(sc, mn, b + 4);
  uint8_t* q = b + 16;
  for (int j = 0; j < 256; j += 64, q += 32)
    for (int l = 0; l < 32; ++l) q[l] = uint8_t(L[j + l] | (L[j + l + 32] << 4));
}

// Q5_K: L in [0, 31]; the fifth bit of values j..j+63 (j = 64 k) in bits 2k, 2k + 1 of qh.
void pack_q5_k(float d, float dmin, const int* sc, const int* mn, const int* L, uint8_t* b) {
  put16(b, f16(d)), put16(b + 2, f16(dmin));
  pack_k_scales(sc, mn, b + 4);
  uint8_t* qh = b + 16;
  uint8_t* ql = b + 48;
  std::memset(qh, 0, 32);
  uint8_t m1 = 1, m2 = 2;
  for (int n = 0; n < 256; n += 64, ql += 32, m1 <<= 2, m2 <<= 2)
    for (int l = 0; l < 32; ++l) {
      int l1 = L[n + l], l2 = L[n + l + 32];
      if (l1 > 15) l1 -= 16, qh[l] |= m1;
      if (l2 > 15) l2 -= 16, qh[l] |= m2;
      ql[l] = uint8_t(l1 | (l2 << 4));
    }
}

// Q6_K: x_i = d scale_{i/16} (L_i - 32), L in [0, 63].
void pack_q6_k(float d, const int* scales, const int* L, uint8_t* b) {
  uint8_t* ql = b;
  uint8_t* qh = b + 128;
  for (int j = 0; j < 256; j += 128, ql += 64, qh += 32)
    for (int l = 0; l < 32; ++l) {
      const int q1 = L[j + l], q2 = L[j + l + 32], q3 = L[j + l + 64], q4 = L[j + l + 96];
      ql[l] = uint8_t((q1 & 0xF) | ((q3 & 0xF) << 4));
      ql[l + 32] = uint8_t((q2 & 0xF) | ((q4 & 0xF) << 4));
      qh[l] = uint8_t((q1 >> 4) | ((q2 >> 4) << 2) | ((q3 >> 4) << 4) | ((q4 >> 4) << 6));
    }
  for (int k = 0; k < 16; ++k) b[192 + k] = uint8_t(int8_t(scales[k]));
  put16(b + 208, f16(d));
}

// d and dmin share an exponent range and every product is a short binary fraction, so each
// value below is exact in float: the comparisons are EXPECT_EQ.
constexpr float kD1 = 0.000732421875f /* 1.5 * 2^-11 */, kDmin = 0.0006103515625f /* 1.25 * 2^-11 */;

struct KBlock {
  int sc[8], mn[8], L[256];
  std::vector<float> expect;
};

KBlock random_k_block(uint32_t seed, int levels, bool with_min) {
  std::mt19937 rng(seed);
  KBlock k;
  for (int j = 0; j < 8; ++j) k.sc[j] = int(rng() % 64), k.mn[j] = with_min ? int(rng() % 64) : 0;
  k.sc[5] = 63, k.mn[6] = 47;  // the top bits of sub-blocks >= 4 are used
  for (int& l : k.L) l = int(rng() % uint32_t(levels));
  k.L[0] = levels - 1;
  for (int i = 0; i < 256; ++i)
    k.expect.push_back(float(double(kD1) * k.sc[i / 32] * k.L[i] - double(kDmin) * k.mn[i / 32]));
  return k;
}

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

// Encodes `values` (rows of `cols`) as `type`, and replaces them by what the blocks decode to
// (computed here from the packers' formulas, not by the reader).
std::vector<uint8_t> encode_for_test(GgmlType type, std::vector<float>& values, int64_t cols, uint32_t seed) {
  std::mt19937 rng(seed);
  const int64_t n = int64_t(values.size());
  const int64_t bv = ggml_block_values(type), bb = ggml_block_bytes(type);
  std::vector<uint8_t> out(static_cast<size_t>(n / bv * bb));
  for (int64_t k = 0; k < n / bv; ++k) {
    uint8_t* b = out.data() + k * bb;
    float* x = values.data() + k * bv;
    switch (type) {
      case GgmlType::F32: std::memcpy(b, x, 4); break;
      case GgmlType::F16: put16(b, f16(*x)), *x = kernels::f16_to_f32(kernels::F16{f16(*x)}); break;
      case GgmlType::BF16: put16(b, kernels::f32_to_bf16(*x).bits), *x = kernels::bf16_to_f32(kernels::f32_to_bf16(*x)); break;
      case GgmlType::Q8_0:
      case GgmlType::Q4_0: {
        const float qmax = type == GgmlType::Q8_0 ? 127.0f : 7.0f;
        float amax = 0;
        for (int j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(x[j]));
        const float d = kernels::f16_to_f32(kernels::F16{f16(amax / qmax)});
        put16(b, f16(amax / qmax));
        for (int j = 0; j < 32; ++j) {
          const int q = d > 0 ? int(std::clamp(std::nearbyint(x[j] / d), -qmax, qmax)) : 0;
          if (type == GgmlType::Q8_0) b[2 + j] = uint8_t(int8_t(q));
          else b[2 + j % 16] |= uint8_t((q + 8) << (j < 16 ? 0 : 4));
          x[j] = d * float(q);
        }
        break;
      }
      case GgmlType::Q4_K:
      case GgmlType::Q5_K: {
        KBlock kb = random_k_block(seed + uint32_t(k), type == GgmlType::Q4_K ? 16 : 32, true);
        if (type == GgmlType::Q4_K) pack_q4_k(kD1, kDmin, kb.sc, kb.mn, kb.L, b);
        else pack_q5_k(kD1, kDmin, kb.sc, kb.mn, kb.L, b);
        // Scaled down (by a power of two: still exact) to weights of std ~0.05.
        for (int i = 0; i < 256; ++i) x[i] = kb.expect[size_t(i)] * 0.25f;
        put16(b, f16(kD1 * 0.25f)), put16(b + 2, f16(kDmin * 0.25f));
        break;
      }
      case GgmlType::Q6_K: {
        int scales[16], L[256];
        for (int& s : scales) s = int(rng() % 41) - 20;
        for (int& l : L) l = int(rng() % 64);
        pack_q6_k(kD1 * 0.125f, scales, L, b);
        for (int i = 0; i < 256; ++i) x[i] = float(double(kD1 * 0.125f) * scales[i / 16] * (L[i] - 32));
        break;
      }
    }
  }
  (void)cols;
  return out;
}

// The HF model written as llama.cpp's converter would: names, q / k rows permuted for
// interleaved RoPE (reshape(heads, 2, d/2, in).swapaxes(1, 2)), each matrix in its own type.
void write_llama_gguf(HfModel& m, const std::string& path, const std::map<std::string, GgmlType>& types,
                      const std::string& tokenizer_model = "gpt2") {
  GgufWriter w;
  w.set_string("general.architecture", "llama");
  w.set_u32("llama.context_length", 64), w.set_u32("llama.embedding_length", kD), w.set_u32("llama.block_count", kLayers);
  w.set_u32("llama.feed_forward_length", kInter), w.set_u32("llama.attention.head_count", kHeads);
  w.set_u32("llama.attention.head_count_kv", kKvHeads), w.set_u32("llama.attention.key_length", kHeadDim);
  w.set_f32("llama.attention.layer_norm_rms_epsilon", 1e-5f), w.set_f32("llama.rope.freq_base", 500.0f);
  const Json tok = Json::parse(tokenizer_json());
  GgufValue tokens, merges;
  tokens.type = merges.type = GgufType::array, tokens.elem = merges.elem = GgufType::string;
  tokens.strings.resize(tok["model"]["vocab"].size());
  for (auto it = tok["model"]["vocab"].begin(); it != tok["model"]["vocab"].end(); ++it)
    tokens.strings[it.value().get<size_t>()] = it.key();
  for (auto& a : tok["added_tokens"]) tokens.strings[a["id"].get<size_t>()] = a["content"].get<std::string>();
  for (auto& mg : tok["model"]["merges"]) merges.strings.push_back(mg.is_string() ? mg.get<std::string>() : mg[0].get<std::string>() + " " + mg[1].get<std::string>());
  w.set_string("tokenizer.ggml.model", tokenizer_model), w.set_string("tokenizer.ggml.pre", "gpt-2");
  w.set("tokenizer.ggml.tokens", tokens), w.set("tokenizer.ggml.merges", merges);
  w.set_u32("tokenizer.ggml.eos_token_id", 256);
  auto name_of = [](const std::string& hf) -> std::string {
    if (hf == "model.embed_tokens.weight") return "token_embd.weight";
    if (hf == "model.norm.weight") return "output_norm.weight";
    if (hf == "lm_head.weight") return "output.weight";
    static const std::map<std::string, std::string> layer = {
        {"input_layernorm.weight", "attn_norm.weight"}, {"post_attention_layernorm.weight", "ffn_norm.weight"},
        {"self_attn.q_proj.weight", "attn_q.weight"}, {"self_attn.k_proj.weight", "attn_k.weight"},
        {"self_attn.v_proj.weight", "attn_v.weight"}, {"self_attn.o_proj.weight", "attn_output.weight"},
        {"mlp.gate_proj.weight", "ffn_gate.weight"}, {"mlp.up_proj.weight", "ffn_up.weight"},
        {"mlp.down_proj.weight", "ffn_down.weight"}};
    const size_t dot = hf.find('.', 13);
    return "blk." + hf.substr(13, dot - 13) + "." + layer.at(hf.substr(dot + 1));
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
    const bool permute = name.find("attn_q.") != std::string::npos || name.find("attn_k.") != std::string::npos;
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
  w.write(path);
}

void expect_gguf_matches(const std::map<std::string, GgmlType>& types) {
  TempDir dir;
  HfModel m = make_dense_or_moe({.type = "llama"});
  write_llama_gguf(m, dir / "m.gguf", types);
  ConvertOptions o;
  o.dtype = kernels::DType::f32;
  convert_gguf_file(dir / "m.gguf", dir / "wren", o);
  Session s(open_model(dir / "wren"));
  HfOracle oracle(m);
  std::vector<float> logits(static_cast<size_t>(s.vocab_rows()));
  for (int32_t t : testing_util::random_tokens(6, kVocab, 5)) {
    s.decode(t, logits.data());
    const Vec want = oracle.step(t);
    float scale = 0;
    for (float v : want) scale = std::max(scale, std::fabs(v));
    EXPECT_LE(testing_util::max_abs_diff(logits, want), 2e-4f * scale + 1e-5f) << "at position " << s.position() - 1;
  }
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

// ---- Model directory -> GGUF -> model directory ---------------------------------------------------

ModelConfig small_llama() {
  HfModel m = make_dense_or_moe({.type = "llama"});
  TempDir dir;
  m.write(dir.path.string(), 1, tokenizer_json());
  return HfCheckpoint(dir.path.string()).config();
}

TEST(ConvertGguf, RoundTripIsBitIdenticalAtQ8) {
  TempDir dir;
  const ModelConfig c = small_llama();
  write_random_model(dir / "a", c, 7, kernels::DType::q8, 32, tokenizer_json(), false, 1);
  EXPECT_EQ(export_gguf(dir / "a", dir / "a.gguf"), "llama");
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

TEST(ConvertGguf, SentencePieceTokenizerIsANamedError) {
  TempDir dir;
  HfModel m = make_dense_or_moe({.type = "llama"});
  write_llama_gguf(m, dir / "m.gguf", {}, "llama");
  try {
    convert_gguf_file(dir / "m.gguf", dir / "out", {});
    FAIL() << "accepted a SentencePiece tokenizer";
  } catch (const IoError& e) {
    EXPECT_NE(std::string(e.what()).find("\"llama\" (SentencePiece)"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("m.gguf"), std::string::npos) << e.what();
  }
  EXPECT_FALSE(std::filesystem::exists(dir / "out"));
}

}  // namespace
}  // namespace wren
