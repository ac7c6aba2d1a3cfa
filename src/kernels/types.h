// kernels/: storage types of weights and caches, and their conversions to and from f32.
//
// A matrix is `rows x cols`, row-major, y = W x. Every type is little-endian, as the
// machines we target are; nothing here reorders bytes.
//
//   f32   4 bytes per value, IEEE binary32.
//   bf16  2 bytes per value: the high 16 bits of the f32 (sign, 8-bit exponent, 7-bit
//         mantissa). f32 -> bf16 rounds to nearest, ties to even; NaN stays NaN (quiet).
//   f16   2 bytes, IEEE binary16 (5-bit exponent, 10-bit mantissa). Used for group scales.
//   q8    one int8 per value; one f16 scale per group of G consecutive values of a row
//         (G divides cols; 32 by default, head_dim = 128 for 8-bit KV cache rows).
//         Symmetric: s = max|x| / 127 (rounded *up* to the next f16, so no value clips),
//         q = round_half_even(x / s), x ~ s q. Every element is within s/2 of its value.
//         Values: [rows][cols] int8; scales: [rows][cols / G] f16.
//         On disk: `name` I8 with the tensor's shape, `name.scales` F16 [..., cols / G].
//   q4    two values per byte, column 2j in the low nibble and 2j+1 in the high nibble,
//         each stored as v + 8 with v in [-8, 7]; one f16 scale per group of G values
//         (G even, divides cols). s = max|x| / 7 rounded up to f16, v = round(x / s), so
//         quantize uses [-7, 7] and every element is within s/2; dequantize accepts -8.
//         Values: [rows][cols / 2] uint8; scales: [rows][cols / G] f16.
//         On disk: `name` U8 [..., cols / 2], `name.scales` F16 [..., cols / G].
#pragma once

#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

namespace wren::kernels {

// A kernel-level error: a bad shape, group size or value range, named in the message.
struct KernelError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

enum class DType : uint8_t { f32, bf16, f16, q8, q4 };
const char* to_string(DType);

struct BF16 { uint16_t bits = 0; };
struct F16 { uint16_t bits = 0; };
static_assert(sizeof(BF16) == 2 && sizeof(F16) == 2, "half types must be 2 bytes (file layout)");

constexpr int kDefaultGroup = 32;

// Scalar conversions (exact where the target can hold the value).
float bf16_to_f32(BF16 v);
BF16 f32_to_bf16(float x);  // round to nearest even; NaN -> quiet NaN with the same sign
inline float f16_to_f32(F16 v);  // exact; defined below (inline: kernels call it per group)
F16 f32_to_f16(float x);    // round to nearest even; overflow -> inf; NaN -> quiet NaN
// The smallest f16 >= x, for x >= 0 finite (the scale rounding that keeps q in range).
F16 f16_round_up(float x);

// A read-only view of a weight matrix (or a cache) in one storage type. It owns nothing:
// `data` and `scales` point into a mapped file, a Matrix, or a cache buffer.
struct MatrixView {
  DType type = DType::f32;
  const void* data = nullptr;    // f32: float, bf16: BF16, q8: int8_t, q4: uint8_t
  const F16* scales = nullptr;   // q8 / q4: [rows][cols / group]
  int64_t rows = 0, cols = 0;
  int group = 0;                 // q8 / q4 only
  // q8 / q4: the same values again in the decode order of the integer dot paths (ops.h
  // pack_for_dot), or null. Only those paths read it; everything else reads `data`.
  const void* packed = nullptr;
  // Where this view's rows lie in that copy: from its row packed_first, in a copy of
  // packed_rows rows (0: this view's). A slice keeps the copy's start, so the rows keep
  // their places in its tiles of rows (packed_tile_rows).
  int64_t packed_first = 0, packed_rows = 0;
  int64_t packed_copy_rows() const { return packed_rows ? packed_rows : rows; }

  // Checked constructors: throw KernelError naming the bad shape or group.
  static MatrixView f32(const float* w, int64_t rows, int64_t cols);
  static MatrixView bf16(const BF16* w, int64_t rows, int64_t cols);
  static MatrixView q8(const int8_t* q, const F16* scales, int64_t rows, int64_t cols, int group);
  static MatrixView q4(const uint8_t* q, const F16* scales, int64_t rows, int64_t cols, int group);

  int64_t groups() const { return group ? cols / group : 0; }  // scales per row
  int64_t row_bytes() const;       // bytes of one row's values (scales not included)
  int64_t bytes() const;           // values + scales of the whole matrix
  // Rows [first, first + count): an expert of a stacked [E, out, in] tensor, a KV range.
  MatrixView slice_rows(int64_t first, int64_t count) const;

  // Typed pointers to row r (valid for the matching type only).
  const float* f32_row(int64_t r) const { return static_cast<const float*>(data) + r * cols; }
  const BF16* bf16_row(int64_t r) const { return static_cast<const BF16*>(data) + r * cols; }
  const int8_t* q8_row(int64_t r) const { return static_cast<const int8_t*>(data) + r * cols; }
  const uint8_t* q4_row(int64_t r) const {
    return static_cast<const uint8_t*>(data) + r * (cols / 2);
  }
  const F16* row_scales(int64_t r) const { return scales + r * groups(); }
};

// The rows of a tile of a packed copy (ops.h pack_for_dot): q4 rows' blocks are interleaved
// four rows at a time, and so are q8 rows of more than one block and a tail (nenya's d =
// 960); other q8 rows lie one after another. On a Xeon with AMX (family 6 model 167, zmm
// path, lines into L2: decode_prefetch), BM_DecodeStreamVsRead, 1 / 2 threads: nenya's
// 960-column q8 rows read 0.84-0.85 of a plain read of their bytes one after another and
// 0.92-0.93 in tiles of four; q8 rows of whole blocks (eight to a zmm tile, which then reads
// two runs) 0.97-0.98 one after another against 0.85, and rows of one block and a tail
// (nenya's 384-column experts) 0.90 against 0.83.
constexpr int64_t kPackedTileRows = 4;
constexpr int64_t packed_tile_rows(DType type, int64_t cols) {
  return type == DType::q4 || (cols > 512 && cols % 256 != 0) ? kPackedTileRows : 1;
}

// An owning matrix, for conversion, tests and benchmarks (the engine maps files instead).
struct Matrix {
  DType type = DType::f32;
  int64_t rows = 0, cols = 0;
  int group = 0;
  std::vector<uint8_t> values;  // row-major, layout as above
  std::vector<F16> scales;
  MatrixView view() const;
};

// Encodes a row-major f32 matrix. `group` is used by q8 / q4 only (0: kDefaultGroup).
// Throws KernelError on a bad shape or a value no f16 scale can hold (non-finite, or
// max|x| / 127 beyond 65504).
Matrix encode_matrix(const float* w, int64_t rows, int64_t cols, DType type, int group = 0);
// Decodes row r into out[0, cols).
void decode_row(const MatrixView& w, int64_t r, float* out);

// Row codecs (SIMD, dispatched at run time; reference versions in kernels/reference.h).
// n is the row length; q8 / q4 require n % group == 0 (q4: group even). Quantize throws
// KernelError if a group's scale does not fit an f16.
void quantize_q8_row(const float* x, int64_t n, int group, int8_t* q, F16* scales);
void dequantize_q8_row(const int8_t* q, const F16* scales, int64_t n, int group, float* out);
void quantize_q4_row(const float* x, int64_t n, int group, uint8_t* q, F16* scales);
void dequantize_q4_row(const uint8_t* q, const F16* scales, int64_t n, int group, float* out);
void f32_to_bf16_row(const float* x, int64_t n, BF16* out);
void bf16_to_f32_row(const BF16* x, int64_t n, float* out);
// f16 rows (round to nearest even). The writer is scalar (rows are written once a token) and
// throws KernelError naming the value when a finite x is beyond f16's range (|x| >= 65520
// would round to inf); NaN stays NaN. The reader is SIMD and exact (kernels/f16_hwy-inl.h).
void f32_to_f16_row(const float* x, int64_t n, F16* out);
void f16_to_f32_row(const F16* x, int64_t n, float* out);

// Shared helpers of the codecs: checks and the per-group scale rule.
void check_groups(const char* what, int64_t n, int group, bool q4);
float group_scale(float max_abs, float qmax, F16* stored);  // returns the f32 value of *stored

// Branch-free f16 -> f32 (the FP16 library's method). Normal: shift exponent and mantissa
// into place (exponent bias 15 -> 127 by multiplying by 2^-112 after adding 0xE0 << 23,
// which also maps f16 inf / NaN to f32 inf / NaN). Subnormal (exponent field 0): place the
// mantissa under the exponent of 0.5 and subtract 0.5, giving man * 2^-24 exactly.
inline float f16_to_f32(F16 v) {
  const auto as_float = [](uint32_t b) { float f; std::memcpy(&f, &b, 4); return f; };
  const uint32_t w = uint32_t(v.bits) << 16, sign = w & 0x80000000u, two_w = w + w;
  const float normal = as_float((two_w >> 4) + (0xE0u << 23)) * 0x1p-112f;
  const float subnormal = as_float((two_w >> 17) | (126u << 23)) - 0.5f;
  const float mag = two_w < (1u << 27) ? subnormal : normal;
  uint32_t b;
  std::memcpy(&b, &mag, 4);
  return as_float(sign | b);
}

}  // namespace wren::kernels
