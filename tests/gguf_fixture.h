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

// Q4_0 / Q4_1 / Q5_0 / Q5_1 / IQ4_NL (32 values): level n_j of value j (0..15; Q5: 0..31;
// IQ4_NL: an index into its 16 levels) in the low nibble of byte j (j < 16) or the high
// nibble of byte j - 16; Q5's fifth bit of value j is bit j of the little-endian u32 qh.
inline void pack_nibble_block(GgmlType type, float d, float m, const int* n, uint8_t* b) {
  const bool has_min = type == GgmlType::Q4_1 || type == GgmlType::Q5_1;
  const bool has_high = type == GgmlType::Q5_0 || type == GgmlType::Q5_1;
  put16(b, f16(d));
  if (has_min) put16(b + 2, f16(m));
  uint8_t* qh = b + (has_min ? 4 : 2);
  uint8_t* qs = qh + (has_high ? 4 : 0);
  std::memset(qs, 0, 16);
  uint32_t high = 0;
  for (int j = 0; j < 32; ++j) {
    qs[j % 16] |= uint8_t((n[j] & 15) << (j < 16 ? 0 : 4));
    if (n[j] > 15) high |= uint32_t(1) << j;
  }
  if (has_high)
    for (int k = 0; k < 4; ++k) qh[k] = uint8_t(high >> (8 * k));
}

// Q2_K / Q3_K: the two low bits of value 128 h + 32 k + l (k = 0..3, l = 0..31) in bits 2k,
// 2k + 1 of qs[32 h + l].
inline void pack_two_bit_values(const int* L, uint8_t* qs) {
  std::memset(qs, 0, 64);
  for (int i = 0; i < 256; ++i) qs[32 * (i / 128) + i % 32] |= uint8_t((L[i] & 3) << (2 * (i % 128 / 32)));
}

// Q2_K: x_i = d sc_{i/16} L_i - dmin m_{i/16}, L in [0, 3], sc and m in [0, 15] (byte j of
// scales: sc_j low nibble, m_j high).
inline void pack_q2_k(float d, float dmin, const int* sc, const int* mn, const int* L, uint8_t* b) {
  for (int j = 0; j < 16; ++j) b[j] = uint8_t(sc[j] | (mn[j] << 4));
  pack_two_bit_values(L, b + 16);
  put16(b + 80, f16(d)), put16(b + 82, f16(dmin));
}

// Q3_K: x_i = d (s_{i/16} - 32) (L_i - 4), L in [0, 7] (its third bit in bit 4 h + k of
// hmask[l]), s in [0, 63]: the low four bits of s_j in the low nibble of byte j (j < 8) or the
// high nibble of byte j - 8, the top two in bits 2 (j / 4), +1 of byte 8 + j % 4.
inline void pack_q3_k(float d, const int* s, const int* L, uint8_t* b) {
  uint8_t* hmask = b;
  std::memset(hmask, 0, 32);
  for (int i = 0; i < 256; ++i)
    if (L[i] > 3) hmask[i % 32] |= uint8_t(1 << (4 * (i / 128) + i % 128 / 32));
  pack_two_bit_values(L, b + 32);
  uint8_t* scales = b + 96;
  std::memset(scales, 0, 12);
  for (int j = 0; j < 16; ++j) {
    scales[j % 8] |= uint8_t((s[j] & 15) << (j < 8 ? 0 : 4));
    scales[8 + j % 4] |= uint8_t((s[j] >> 4) << (2 * (j / 4)));
  }
  put16(b + 108, f16(d));
}

// IQ4_XS: x_i = d (s_{i/32} - 32) kIq4NlValues[L_i], s in [0, 63]: its low four bits in
// nibble j % 2 of scales_l[j / 2], its top two in bits 2j, 2j + 1 of the u16 scales_h; the
// indices of sub-block j as a 32-value nibble block at byte 8 + 16 j.
inline void pack_iq4_xs(float d, const int* s, const int* L, uint8_t* b) {
  put16(b, f16(d));
  uint16_t scales_h = 0;
  std::memset(b + 4, 0, 4);
  for (int j = 0; j < 8; ++j) {
    b[4 + j / 2] |= uint8_t((s[j] & 15) << (4 * (j % 2)));
    scales_h |= uint16_t((s[j] >> 4) << (2 * j));
  }
  put16(b + 2, scales_h);
  for (int j = 0; j < 8; ++j) {
    uint8_t* qs = b + 8 + 16 * j;
    std::memset(qs, 0, 16);
    for (int l = 0; l < 32; ++l) qs[l % 16] |= uint8_t(L[32 * j + l] << (l < 16 ? 0 : 4));
  }
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

// A block of Q4_1, Q5_0, Q5_1, IQ4_NL, Q2_K, Q3_K or IQ4_XS with random levels and scales
// (every bit of the scale fields used), its bytes from the packers above and its values from
// the layouts' formulas in double (exact in float: d is a short binary fraction).
struct PackedBlock {
  std::vector<uint8_t> bytes;
  std::vector<float> values;
};

inline PackedBlock random_block(GgmlType type, uint32_t seed, float d) {
  std::mt19937 rng(seed);
  auto draw = [&](int n) { return int(rng() % uint32_t(n)); };
  PackedBlock p{std::vector<uint8_t>(size_t(ggml_block_bytes(type))), {}};
  const double dd = d, m = d * 3;  // Q4_1 / Q5_1's m, Q2_K's dmin
  int L[256], sc[16], mn[16];
  switch (type) {
    case GgmlType::Q4_1: case GgmlType::Q5_0: case GgmlType::Q5_1: case GgmlType::IQ4_NL: {
      const bool five = type == GgmlType::Q5_0 || type == GgmlType::Q5_1;
      for (int j = 0; j < 32; ++j) L[j] = draw(five ? 32 : 16);
      L[3] = five ? 31 : 15, L[20] = 0;
      pack_nibble_block(type, d, float(m), L, p.bytes.data());
      for (int j = 0; j < 32; ++j) {
        const double x = type == GgmlType::IQ4_NL ? dd * gguf_blocks::kIq4NlValues[L[j]]
                         : type == GgmlType::Q5_0 ? dd * (L[j] - 16)
                                                  : dd * L[j] + m;
        p.values.push_back(float(x));
      }
      break;
    }
    case GgmlType::Q2_K:
      for (int j = 0; j < 16; ++j) sc[j] = draw(16), mn[j] = draw(16);
      for (int& l : L) l = draw(4);
      sc[9] = mn[14] = 15, L[255] = 3;
      pack_q2_k(d, float(m), sc, mn, L, p.bytes.data());
      for (int i = 0; i < 256; ++i) p.values.push_back(float(dd * sc[i / 16] * L[i] - m * mn[i / 16]));
      break;
    case GgmlType::Q3_K:
      for (int j = 0; j < 16; ++j) sc[j] = draw(64);
      for (int& l : L) l = draw(8);
      sc[13] = 63, sc[2] = 0, L[200] = 7, L[201] = 0;
      pack_q3_k(d, sc, L, p.bytes.data());
      for (int i = 0; i < 256; ++i) p.values.push_back(float(dd * (sc[i / 16] - 32) * (L[i] - 4)));
      break;
    case GgmlType::IQ4_XS:
      for (int j = 0; j < 8; ++j) sc[j] = draw(64);
      for (int& l : L) l = draw(16);
      sc[7] = 63, L[255] = 15;
      pack_iq4_xs(d, sc, L, p.bytes.data());
      for (int i = 0; i < 256; ++i) p.values.push_back(float(dd * (sc[i / 32] - 32) * gguf_blocks::kIq4NlValues[L[i]]));
      break;
    default: ADD_FAILURE() << "random_block: " << to_string(type) << " is packed elsewhere";
  }
  return p;
}

// The scale random_block's d takes in a model's tensors: its largest value near 0.2.
inline float model_scale(GgmlType type) {
  switch (type) {
    case GgmlType::Q4_1: case GgmlType::Q5_1: return kD1 * 4;   // (31 + 3) x 0.0059
    case GgmlType::Q5_0: return kD1 * 16;                      // 16 x 0.0117
    case GgmlType::IQ4_NL: return kD1 * 2;                     // 127 x 0.0015
    case GgmlType::Q2_K: return kD1 * 4;                       // 45 x 0.0029
    case GgmlType::Q3_K: return kD1 * 2;                       // 32 x 4 x 0.0015
    default: return kD1 / 8;                                   // IQ4_XS: 32 x 127 x 0.000092
  }
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
      case GgmlType::Q4_1: case GgmlType::Q5_0: case GgmlType::Q5_1: case GgmlType::IQ4_NL:
      case GgmlType::Q2_K: case GgmlType::Q3_K: case GgmlType::IQ4_XS: {
        const PackedBlock pb = random_block(type, seed + uint32_t(k), model_scale(type));
        std::memcpy(b, pb.bytes.data(), pb.bytes.size());
        std::copy(pb.values.begin(), pb.values.end(), x);
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
inline void set_tokenizer(GgufWriter& w, const std::string& tokenizer_model, const std::string& pre = "gpt-2") {
  const Json tok = Json::parse(tokenizer_json());
  GgufValue tokens, merges;
  tokens.type = merges.type = GgufType::array, tokens.elem = merges.elem = GgufType::string;
  tokens.strings.resize(tok["model"]["vocab"].size());
  for (auto it = tok["model"]["vocab"].begin(); it != tok["model"]["vocab"].end(); ++it)
    tokens.strings[it.value().get<size_t>()] = it.key();
  for (auto& a : tok["added_tokens"]) tokens.strings[a["id"].get<size_t>()] = a["content"].get<std::string>();
  for (auto& mg : tok["model"]["merges"]) merges.strings.push_back(mg.is_string() ? mg.get<std::string>() : mg[0].get<std::string>() + " " + mg[1].get<std::string>());
  w.set_string("tokenizer.ggml.model", tokenizer_model), w.set_string("tokenizer.ggml.pre", pre);
  w.set("tokenizer.ggml.tokens", tokens), w.set("tokenizer.ggml.merges", merges);
  w.set_u32("tokenizer.ggml.eos_token_id", 256);
}

// Converts dir/m.gguf at f32 and runs it beside the oracle over the HF tensors `m` holds.
inline void expect_converted_matches(const HfModel& m, const TempDir& dir) {
  ConvertOptions o;
  o.dtype = kernels::DType::f32;
  convert_gguf_file(dir / "m.gguf", dir / "wren", o);
  Session s(open_model(dir / "wren"), {.kv = KvType::f32});  // the oracle's f32, not the default f16 cache
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
