// Decoding of the ggml block formats (gguf_blocks.h), transcribed from their published
// definitions, and the bit-for-bit relations of Q8_0 / Q4_0 to our q8 / q4.
#include "io/gguf_blocks.h"

#include <cstring>

namespace wren::gguf_blocks {

namespace {

using kernels::F16;

float half(const uint8_t* p) {
  F16 h;
  std::memcpy(&h.bits, p, 2);
  return kernels::f16_to_f32(h);
}

// The 6-bit scale and min of sub-block j (0..7) of a Q4_K / Q5_K block: j < 4 in the low six
// bits of bytes j and j + 4; j >= 4 from the nibbles of byte j + 4 and the top two bits of
// bytes j - 4 (scale) and j (min).
void scale_min(int j, const uint8_t* q, int& sc, int& m) {
  if (j < 4) {
    sc = q[j] & 63;
    m = q[j + 4] & 63;
  } else {
    sc = (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4);
    m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
  }
}

void q4_k_block(const uint8_t* b, float* y) {
  const float d = half(b), dmin = half(b + 2);
  const uint8_t* scales = b + 4;
  const uint8_t* q = b + 16;
  for (int j = 0; j < 8; j += 2, q += 32, y += 64) {
    int sc, m;
    scale_min(j, scales, sc, m);
    const float d1 = d * float(sc), m1 = dmin * float(m);
    scale_min(j + 1, scales, sc, m);
    const float d2 = d * float(sc), m2 = dmin * float(m);
    for (int l = 0; l < 32; ++l) y[l] = d1 * float(q[l] & 0xF) - m1;
    for (int l = 0; l < 32; ++l) y[32 + l] = d2 * float(q[l] >> 4) - m2;
  }
}

void q5_k_block(const uint8_t* b, float* y) {
  const float d = half(b), dmin = half(b + 2);
  const uint8_t* scales = b + 4;
  const uint8_t* qh = b + 16;
  const uint8_t* ql = b + 48;
  uint8_t u1 = 1, u2 = 2;
  for (int j = 0; j < 8; j += 2, ql += 32, y += 64, u1 <<= 2, u2 <<= 2) {
    int sc, m;
    scale_min(j, scales, sc, m);
    const float d1 = d * float(sc), m1 = dmin * float(m);
    scale_min(j + 1, scales, sc, m);
    const float d2 = d * float(sc), m2 = dmin * float(m);
    for (int l = 0; l < 32; ++l) y[l] = d1 * float((ql[l] & 0xF) + (qh[l] & u1 ? 16 : 0)) - m1;
    for (int l = 0; l < 32; ++l) y[32 + l] = d2 * float((ql[l] >> 4) + (qh[l] & u2 ? 16 : 0)) - m2;
  }
}

void q6_k_block(const uint8_t* b, float* y) {
  const uint8_t* ql = b;
  const uint8_t* qh = b + 128;
  const int8_t* sc = reinterpret_cast<const int8_t*>(b + 192);
  const float d = half(b + 208);
  for (int n = 0; n < 256; n += 128, ql += 64, qh += 32, sc += 8, y += 128) {
    for (int l = 0; l < 32; ++l) {
      const int is = l / 16;
      const int q1 = int((ql[l] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32;
      const int q2 = int((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32;
      const int q3 = int((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
      const int q4 = int((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
      y[l] = d * float(sc[is]) * float(q1);
      y[l + 32] = d * float(sc[is + 2]) * float(q2);
      y[l + 64] = d * float(sc[is + 4]) * float(q3);
      y[l + 96] = d * float(sc[is + 6]) * float(q4);
    }
  }
}

// The 32-value blocks: x = d n + m with n from the nibbles (and Q5's fifth bits), or
// from the IQ4_NL table.
void nibble_block(GgmlType t, const uint8_t* b, float* y) {
  const bool has_min = t == GgmlType::Q4_1 || t == GgmlType::Q5_1;
  const bool has_high = t == GgmlType::Q5_0 || t == GgmlType::Q5_1;
  const float d = half(b), m = has_min ? half(b + 2) : 0.0f;
  const uint8_t* qh = b + (has_min ? 4 : 2);
  const uint8_t* qs = qh + (has_high ? 4 : 0);
  uint32_t high = 0;
  if (has_high) high = uint32_t(qh[0]) | uint32_t(qh[1]) << 8 | uint32_t(qh[2]) << 16 | uint32_t(qh[3]) << 24;
  const int offset = t == GgmlType::Q4_0 ? 8 : t == GgmlType::Q5_0 ? 16 : 0;
  for (int j = 0; j < 32; ++j) {
    const int nibble = j < 16 ? qs[j] & 0xF : qs[j - 16] >> 4;
    if (t == GgmlType::IQ4_NL) {
      y[j] = d * float(kIq4NlValues[nibble]);
      continue;
    }
    const int n = nibble + int((high >> j) & 1) * 16;
    y[j] = d * float(n - offset) + m;
  }
}

void q2_k_block(const uint8_t* b, float* y) {
  const uint8_t* scales = b;
  const uint8_t* q = b + 16;
  const float d = half(b + 80), dmin = half(b + 82);
  for (int i = 0; i < 256; ++i) {
    const int half_i = i / 128, k = i % 128 / 32, l = i % 32;
    const int n = (q[32 * half_i + l] >> (2 * k)) & 3;
    const uint8_t sc = scales[i / 16];
    y[i] = d * float(sc & 0xF) * float(n) - dmin * float(sc >> 4);
  }
}

// Q3_K's 16 six-bit scales: the low four bits of scale j in the low nibble of byte j (j < 8)
// or the high nibble of byte j - 8; its top two bits in bits 2 (j / 4), +1 of byte 8 + j % 4.
int q3_k_scale(const uint8_t* s, int j) {
  const int low = j < 8 ? s[j] & 0xF : s[j - 8] >> 4;
  const int top = (s[8 + j % 4] >> (2 * (j / 4))) & 3;
  return low | top << 4;
}

void q3_k_block(const uint8_t* b, float* y) {
  const uint8_t* hmask = b;
  const uint8_t* q = b + 32;
  const uint8_t* scales = b + 96;
  const float d = half(b + 108);
  for (int i = 0; i < 256; ++i) {
    const int half_i = i / 128, k = i % 128 / 32, l = i % 32;
    const int n = (q[32 * half_i + l] >> (2 * k)) & 3;
    const int high = (hmask[l] >> (4 * half_i + k)) & 1;
    y[i] = d * float(q3_k_scale(scales, i / 16) - 32) * float(n + 4 * high - 4);
  }
}

void iq4_xs_block(const uint8_t* b, float* y) {
  const float d = half(b);
  const uint32_t scales_h = uint32_t(b[2]) | uint32_t(b[3]) << 8;
  const uint8_t* scales_l = b + 4;
  const uint8_t* qs = b + 8;
  for (int j = 0; j < 8; ++j, qs += 16, y += 32) {
    const int s = ((scales_l[j / 2] >> (4 * (j % 2))) & 0xF) | int((scales_h >> (2 * j)) & 3) << 4;
    const float dl = d * float(s - 32);
    for (int l = 0; l < 16; ++l) {
      y[l] = dl * float(kIq4NlValues[qs[l] & 0xF]);
      y[l + 16] = dl * float(kIq4NlValues[qs[l] >> 4]);
    }
  }
}

}  // namespace

void dequantize_row(GgmlType t, const uint8_t* row, int64_t n, float* out) {
  const int64_t bv = ggml_block_values(t), bb = ggml_block_bytes(t);
  for (int64_t k = 0; k < n / bv; ++k) {
    const uint8_t* b = row + k * bb;
    float* y = out + k * bv;
    switch (t) {
      case GgmlType::F32: std::memcpy(y, b, 4); break;
      case GgmlType::F16: *y = half(b); break;
      case GgmlType::BF16: {
        kernels::BF16 h;
        std::memcpy(&h.bits, b, 2);
        *y = kernels::bf16_to_f32(h);
        break;
      }
      case GgmlType::Q8_0: {
        const float d = half(b);
        for (int j = 0; j < 32; ++j) y[j] = d * float(int8_t(b[2 + j]));
        break;
      }
      case GgmlType::Q4_0: case GgmlType::Q4_1: case GgmlType::Q5_0: case GgmlType::Q5_1: case GgmlType::IQ4_NL:
        nibble_block(t, b, y);
        break;
      case GgmlType::Q2_K: q2_k_block(b, y); break;
      case GgmlType::Q3_K: q3_k_block(b, y); break;
      case GgmlType::Q4_K: q4_k_block(b, y); break;
      case GgmlType::Q5_K: q5_k_block(b, y); break;
      case GgmlType::Q6_K: q6_k_block(b, y); break;
      case GgmlType::IQ4_XS: iq4_xs_block(b, y); break;
    }
  }
}

void q8_0_to_q8(const uint8_t* row, int64_t n, int8_t* q, F16* scales) {
  for (int64_t k = 0; k < n / 32; ++k, row += 34) {
    std::memcpy(&scales[k].bits, row, 2);
    std::memcpy(q + k * 32, row + 2, 32);
  }
}

void q8_to_q8_0(const int8_t* q, const F16* scales, int64_t n, uint8_t* row) {
  for (int64_t k = 0; k < n / 32; ++k, row += 34) {
    std::memcpy(row, &scales[k].bits, 2);
    std::memcpy(row + 2, q + k * 32, 32);
  }
}

// Both store n + 8 in a nibble; only which value sits in which nibble differs.
void q4_0_to_q4(const uint8_t* row, int64_t n, uint8_t* q, F16* scales) {
  for (int64_t k = 0; k < n / 32; ++k, row += 18) {
    std::memcpy(&scales[k].bits, row, 2);
    uint8_t nib[32];
    for (int j = 0; j < 16; ++j) nib[j] = row[2 + j] & 0xF, nib[j + 16] = row[2 + j] >> 4;
    for (int j = 0; j < 16; ++j) q[k * 16 + j] = uint8_t(nib[2 * j] | (nib[2 * j + 1] << 4));
  }
}

void q4_to_q4_0(const uint8_t* q, const F16* scales, int64_t n, uint8_t* row) {
  for (int64_t k = 0; k < n / 32; ++k, row += 18) {
    std::memcpy(row, &scales[k].bits, 2);
    uint8_t nib[32];
    for (int j = 0; j < 16; ++j) nib[2 * j] = q[k * 16 + j] & 0xF, nib[2 * j + 1] = q[k * 16 + j] >> 4;
    for (int j = 0; j < 16; ++j) row[2 + j] = uint8_t(nib[j] | (nib[j + 16] << 4));
  }
}

}  // namespace wren::gguf_blocks
