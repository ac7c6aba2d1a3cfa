// model/: the key/value caches and the one storage they share.
//
// KvRows holds rows of `width` values in one KvType; callers write f32 rows and read f32
// segments, and the format stays private here:
//   f32   4 bytes per value.
//   bf16  2 bytes per value (kernels/types.h: round to nearest even).
//   f16   2 bytes per value, round to nearest even, 3 more bits of mantissa than bf16 and a
//         range of +-65504 (a larger value is an error, not inf): llama.cpp's default cache.
//   q8    one int8 per value and one f16 scale per group of G values: a KV cache has one
//         scale per head row (G = head_dim: 128 in Embla 1, whose 5 full layers then hold
//         2,600 bytes per token); an MLA row has one group size for the latent and the shared
//         key, the gcd of their widths (Nenya 320 + 32: 32; DeepSeek-V2 512 + 64: 64). Symmetric,
//         s = max|x| / 127 rounded up to f16, so |x - s q| <= s / 2 and nothing clips
//         (kernels quantize_q8_row). Bytes per value: 1 + 2 / G, the explorer's "int8:gG".
// A window layer keeps a ring of `capacity` slots (the most recent tokens); a full layer
// keeps every token up to `capacity` (the session's context). Keys are stored as the
// mechanisms use them: rotated (RoPE layers) or normalised (ReLU^2 layers), so reading never
// recomputes them.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "kernels/huge_pages.h"
#include "kernels/ops.h"
#include "kernels/types.h"

namespace wren {

enum class KvType : uint8_t { f32, bf16, q8, f16 };
const char* to_string(KvType);
// "f32", "bf16", "f16" or "q8"; throws std::invalid_argument naming the text otherwise.
KvType parse_kv_type(const std::string& text);

// The q8 group of a KV head row of n values: the whole row (see above).
inline int kv_group(int n) { return n; }

// Up to kRows rows of one KV head's keys or values as the attention kernels read them
// (kernels::CacheRows): pointers into the cache, in its type (q8 with each row's scale). A
// thread keeps one and fills it tile by tile; a skipped row is null (never read).
struct KvTile {
  static constexpr int kRows = 64;
  const float* f32[kRows] = {};
  const int8_t* q8[kRows] = {};
  const kernels::BF16* bf16[kRows] = {};
  const kernels::F16* f16[kRows] = {};
  float scale[kRows] = {};
  KvType type = KvType::f32;
  bool in_q8() const { return type == KvType::q8; }
  kernels::CacheRows rows() const {
    switch (type) {
      case KvType::q8: return {.q8 = q8, .scale = scale};
      case KvType::bf16: return {.bf16 = bf16};
      case KvType::f16: return {.f16 = f16};
      default: return {.f32 = f32};
    }
  }
  void skip(int j) { f32[j] = nullptr, q8[j] = nullptr, bf16[j] = nullptr, f16[j] = nullptr; }
};

// Stored head-major: a row of `width` values is `heads` head rows of width / heads, and head h's
// rows are contiguous, [heads][rows][width / heads] (q8 scales the same way), so a step that
// walks one KV head over the context streams one contiguous run of bytes instead of a line
// every `width` values (the hardware prefetchers follow the first, not the second).
class KvRows {
 public:
  // Room for `rows` rows of `width` values in `heads` head rows each; q8 scales groups of
  // `group` values (group divides width / heads). Throws std::invalid_argument on
  // non-positive sizes or sizes that do not divide.
  void init(KvType type, int width, int group, int64_t rows, int heads = 1);
  KvType type() const { return type_; }
  int width() const { return width_; }
  int64_t rows() const { return rows_; }
  // Stores row r from x[0, width) (quantised for q8; throws kernels::KernelError on a value
  // no f16 scale, or for f16 no f16, can hold).
  void write(int64_t r, const float* x);
  // Values [offset, offset + n) of row r, where offset and n cover whole groups of one head
  // row (throws std::logic_error otherwise). f32: a pointer into the cache (buf unused);
  // otherwise decoded into buf[0, n).
  const float* read(int64_t r, int offset, int n, float* buf) const;
  // Head `head`'s values [head n, (head + 1) n) of rows r0 .. r0 + rows - 1 as rows j0 .. of
  // a tile, n the head row's width: pointers into the cache, for q8 when they are one group
  // (a KV head row; throws std::logic_error otherwise).
  void to_tile(int64_t r0, int rows, int head, int n, KvTile& t, int j0) const;
  // Bytes of one row as allocated (values and scales), and of the whole store.
  double bytes_per_row() const;
  size_t bytes() const { return values_.size() + scales_.size() * sizeof(kernels::F16); }
  // The stored bytes, for a session's state save and restore (runtime/session_state.h).
  std::span<std::byte> stored_values() { return std::as_writable_bytes(std::span(values_.data(), values_.size())); }
  std::span<std::byte> stored_scales() { return std::as_writable_bytes(std::span(scales_.data(), scales_.size())); }

 private:
  KvType type_ = KvType::f32;
  int width_ = 0, heads_ = 1, head_width_ = 0, group_ = 0;
  int64_t rows_ = 0;
  kernels::LargeArray<uint8_t> values_;       // [heads][rows][head_width] in type_
  kernels::LargeArray<kernels::F16> scales_;  // q8: [heads][rows][head_width / group]
  // Index of value `i` of head `h`'s part of row r.
  size_t at(int64_t r, int h, int i) const {
    return (size_t(h) * size_t(rows_) + size_t(r)) * size_t(head_width_) + size_t(i);
  }
};

struct KvCache {
  int kv_dim = 0;  // n_kv_heads * head_dim
  int head_dim = 0;
  int64_t capacity = 0;
  bool ring = false;
  int64_t count = 0;  // tokens appended so far (positions 0 .. count-1)

  // Room for `cap` tokens of kv_heads heads of head_dim values, in `type`.
  void init(int kv_heads, int head, int64_t cap, bool is_ring, KvType type = KvType::f32);
  bool empty() const { return kv_dim == 0; }
  KvType type() const { return k_.type(); }
  // The oldest position held once the token at `pos` is the newest: what that token reads.
  int64_t first_for(int64_t pos) const { return ring ? std::max<int64_t>(0, pos + 1 - capacity) : 0; }
  // The oldest position still held.
  int64_t first() const { return first_for(count - 1); }
  int64_t slot(int64_t pos) const { return ring ? pos % capacity : pos; }
  // This token's key and value ([kv_dim] each), stored in the cache's type. Throws
  // std::runtime_error when a full (non-ring) cache has no room.
  void append(const float* k, const float* v);
  // KV head g's key / value at `pos` ([head_dim] values): a pointer into the cache (f32) or
  // decoded into buf.
  const float* key(int64_t pos, int g, float* buf) const { return k_.read(slot(pos), g * head_dim, head_dim, buf); }
  const float* value(int64_t pos, int g, float* buf) const { return v_.read(slot(pos), g * head_dim, head_dim, buf); }
  // The same as row j of a tile (KvTile).
  void key_to_tile(int64_t pos, int g, KvTile& t, int j) const { k_.to_tile(slot(pos), 1, g, head_dim, t, j); }
  void value_to_tile(int64_t pos, int g, KvTile& t, int j) const { v_.to_tile(slot(pos), 1, g, head_dim, t, j); }
  // Positions pos0 .. pos0 + n - 1 as rows 0 .. n - 1 of a tile.
  void keys_to_tile(int64_t pos0, int n, int g, KvTile& t) const { rows_to_tile(k_, pos0, n, g, t); }
  void values_to_tile(int64_t pos0, int n, int g, KvTile& t) const { rows_to_tile(v_, pos0, n, g, t); }
  // Bytes of one token's key and value as allocated, and of the whole cache.
  double bytes_per_token() const { return k_.bytes_per_row() + v_.bytes_per_row(); }
  size_t bytes() const { return k_.bytes() + v_.bytes(); }
  // Bytes of one KV head's value row (what V-skip saves per skipped row).
  double head_row_bytes() const { return v_.bytes_per_row() * head_dim / kv_dim; }
  KvRows& keys() { return k_; }
  KvRows& values() { return v_; }

 private:
  // Consecutive positions are consecutive slots but where a ring wraps.
  void rows_to_tile(const KvRows& rows, int64_t pos0, int n, int g, KvTile& t) const {
    for (int j = 0; j < n;) {
      const int64_t s = slot(pos0 + j);
      const int run = int(std::min<int64_t>(n - j, ring ? capacity - s : n - j));
      rows.to_tile(s, run, g, head_dim, t, j);
      j += run;
    }
  }
  KvRows k_, v_;
};

}  // namespace wren
