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
      case GgmlType::Q4_0: {
        const float d = half(b);
        for (int j = 0; j < 16; ++j) {
          y[j] = d * float((b[2 + j] & 0xF) - 8);
          y[j + 16] = d * float((b[2 + j] >> 4) - 8);
        }
        break;
      }
      case GgmlType::Q4_K: q4_k_block(b, y); break;
      case GgmlType::Q5_K: q5_k_block(b, y); break;
      case GgmlType::Q6_K: q6_k_block(b, y); break;
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
