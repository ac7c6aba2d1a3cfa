// GGUF test helpers: ggml blocks packed from the published layouts (ggml-common.h,
// quantize_row_*_ref), with values known exactly; a tensor encoded in any GGUF type with the
// oracle's values replaced by what the blocks hold; the fixture tokenizer as tokenizer.ggml.*;
// and the converted file's logits against the HF-semantics oracle (hf_fixture.h).
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>

#include "hf_fixture.h"
#include "io/gguf.h"
#include "io/gguf_blocks.h"
#include "runtime/convert.h"
#include "runtime/model_files.h"
#include "runtime/session.h"
#include "test_util.h"

namespace wren::gguf_fixture {

using namespace hf_fixture;
using testing_util::TempDir;

inline uint16_t f16(float x) { return kernels::f32_to_f16(x).bits; }
inline void put16(uint8_t* p, uint16_t v) { std::memcpy(p, &v, 2); }

// ---- Packers written from the published block layouts (ggml-common.h / quantize_row_*_ref) --

// Q4_K / Q5_K scales: sub-blocks 0..3 in the low 6 bits of bytes j (scale) and j + 4 (min);
// 4..7 as nibbles of byte j + 4, their top two bits in the top bits of bytes j - 4 and j.
inline void pack_k_scales(const int* sc, const int* mn, uint8_t* s) {
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
inline void pack_q4_k(float d, float dmin, const int* sc, const int* mn, const int* L, uint8_t* b) {
  put16(b, f16(d)), put16(b + 2, f16(dmin));
  pack_k_scales(sc, mn, b + 4);
  uint8_t* q = b + 16;
  for (int j = 0; j < 256; j += 64, q += 32)
    for (int l = 0; l < 32; ++l) q[l] = uint8_t(L[j + l] | (L[j + l + 32] << 4));
}

// Q5_K: L in [0, 31]; the fifth bit of values j..j+63 (j = 64 k) in bits 2k, 2k + 1 of qh.
inline void pack_q5_k(float d, float dmin, const int* sc, const int* mn, const int* L, uint8_t* b) {
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
inline void pack_q6_k(float d, const int* scales, const int* L, uint8_t* b) {
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

inline KBlock random_k_block(uint32_t seed, int levels, bool with_min) {
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

// Encodes `values` (rows of `cols`) as `type`, and replaces them by what the blocks decode to
// (computed here from the packers' formulas, not by the reader).
inline std::vector<uint8_t> encode_for_test(GgmlType type, std::vector<float>& values, int64_t cols, uint32_t seed) {
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

// The fixture's tokenizer as tokenizer.ggml.* metadata.
inline void set_tokenizer(GgufWriter& w, const std::string& tokenizer_model) {
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
}

// Converts dir/m.gguf at f32 and runs it beside the oracle over the HF tensors `m` holds.
inline void expect_converted_matches(const HfModel& m, const TempDir& dir) {
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

}  // namespace wren::gguf_fixture
