// The cache storage: f32, bf16 or q8 rows written and read through the kernels' row codecs
// (SIMD, dispatched at run time). The layout is in model/kv_cache.h.
#include "model/kv_cache.h"

#include <cstring>

namespace wren {

const char* to_string(KvType t) {
  switch (t) {
    case KvType::f32: return "f32";
    case KvType::bf16: return "bf16";
    case KvType::q8: return "q8";
  }
  return "?";
}

KvType parse_kv_type(const std::string& text) {
  if (text == "f32") return KvType::f32;
  if (text == "bf16") return KvType::bf16;
  if (text == "q8") return KvType::q8;
  throw std::invalid_argument("KV cache type \"" + text + "\": expected f32, bf16 or q8");
}

namespace {

size_t value_bytes(KvType t) { return t == KvType::f32 ? 4 : t == KvType::bf16 ? 2 : 1; }

}  // namespace

void KvRows::init(KvType type, int width, int group, int64_t rows) {
  if (width <= 0 || group <= 0 || width % group != 0 || rows <= 0)
    throw std::invalid_argument("KV cache rows: width " + std::to_string(width) + ", group " +
                                std::to_string(group) + ", rows " + std::to_string(rows) +
                                ": expected positive sizes with the group dividing the width");
  type_ = type;
  width_ = width;
  rows_ = rows;
  group_ = type == KvType::q8 ? group : 0;
  groups_per_row_ = type == KvType::q8 ? width / group : 0;
  values_.assign(size_t(rows) * size_t(width) * value_bytes(type));
  scales_.assign(type == KvType::q8 ? size_t(rows) * size_t(width / group_) : 0);
}

void KvRows::write(int64_t r, const float* x) {
  uint8_t* row = values_.data() + size_t(r) * size_t(width_) * value_bytes(type_);
  switch (type_) {
    case KvType::f32: std::memcpy(row, x, size_t(width_) * sizeof(float)); break;
    case KvType::bf16: kernels::f32_to_bf16_row(x, width_, reinterpret_cast<kernels::BF16*>(row)); break;
    case KvType::q8:
      kernels::quantize_q8_row(x, width_, group_, reinterpret_cast<int8_t*>(row),
                               scales_.data() + size_t(r) * size_t(width_ / group_));
      break;
  }
}

const float* KvRows::read(int64_t r, int offset, int n, float* buf) const {
  const size_t at = size_t(r) * size_t(width_) + size_t(offset);
  switch (type_) {
    case KvType::f32: return reinterpret_cast<const float*>(values_.data()) + at;
    case KvType::bf16: kernels::bf16_to_f32_row(reinterpret_cast<const kernels::BF16*>(values_.data()) + at, n, buf); break;
    case KvType::q8:
      kernels::dequantize_q8_row(reinterpret_cast<const int8_t*>(values_.data()) + at, scales_.data() + at / size_t(group_),
                                 n, group_, buf);
      break;
  }
  return buf;
}

void KvRows::to_tile(int64_t r0, int rows, int head, int n, KvTile& t, int j0) const {
  // No division on this path: it runs for every row and step at every depth.
  const size_t at = size_t(r0) * size_t(width_) + size_t(head) * size_t(n), w = size_t(width_);
  t.in_q8 = type_ == KvType::q8;
  switch (type_) {
    case KvType::f32: {
      const float* p = reinterpret_cast<const float*>(values_.data()) + at;
      for (int i = 0; i < rows; ++i) t.f32[j0 + i] = p + size_t(i) * w;
      break;
    }
    case KvType::bf16:
      if (t.decoded.size() < size_t(KvTile::kRows) * size_t(n)) t.decoded.resize(size_t(KvTile::kRows) * size_t(n));
      for (int i = 0; i < rows; ++i)
        t.f32[j0 + i] = read(r0 + i, head * n, n, t.decoded.data() + size_t(j0 + i) * size_t(n));
      break;
    case KvType::q8: {
      if (n != group_)
        throw std::logic_error("KV tile: head rows of " + std::to_string(n) + " values are not one q8 group of " +
                               std::to_string(group_));
      const int8_t* p = reinterpret_cast<const int8_t*>(values_.data()) + at;
      const kernels::F16* scale = scales_.data() + size_t(r0) * size_t(groups_per_row_) + size_t(head);
      for (int i = 0; i < rows; ++i) {
        const int8_t* row = p + size_t(i) * w;
        for (int b = 0; b < n; b += 64) __builtin_prefetch(row + b);
        t.q8[j0 + i] = row;
        t.scale[j0 + i] = kernels::f16_to_f32(scale[size_t(i) * size_t(groups_per_row_)]);
      }
      break;
    }
  }
}

double KvRows::bytes_per_row() const { return double(bytes()) / double(rows_); }

void KvCache::init(int kv_heads, int head, int64_t cap, bool is_ring, KvType type) {
  kv_dim = kv_heads * head;
  head_dim = head;
  capacity = cap;
  ring = is_ring;
  count = 0;
  k_.init(type, kv_dim, kv_group(head), cap);
  v_.init(type, kv_dim, kv_group(head), cap);
}

void KvCache::append(const float* k, const float* v) {
  if (!ring && count >= capacity)
    throw std::runtime_error("context full: the session holds " + std::to_string(capacity) + " tokens");
  const int64_t s = slot(count++);
  k_.write(s, k);
  v_.write(s, v);
}

}  // namespace wren
