// The cache storage: f32, bf16, f16 or q8 rows written and read through the kernels' row codecs
// (SIMD, dispatched at run time). The layout is in model/kv_cache.h.
#include "model/kv_cache.h"

#include <cstring>

namespace wren {

const char* to_string(KvType t) {
  switch (t) {
    case KvType::f32: return "f32";
    case KvType::bf16: return "bf16";
    case KvType::f16: return "f16";
    case KvType::q8: return "q8";
  }
  return "?";
}

KvType parse_kv_type(const std::string& text) {
  if (text == "f32") return KvType::f32;
  if (text == "bf16") return KvType::bf16;
  if (text == "f16") return KvType::f16;
  if (text == "q8") return KvType::q8;
  throw std::invalid_argument("KV cache type \"" + text + "\": expected f32, bf16, f16 or q8");
}

namespace {

size_t value_bytes(KvType t) { return t == KvType::f32 ? 4 : t == KvType::q8 ? 1 : 2; }

}  // namespace

void KvRows::init(KvType type, int width, int group, int64_t rows, int heads) {
  if (width <= 0 || group <= 0 || heads <= 0 || rows <= 0 || width % heads != 0 || (width / heads) % group != 0)
    throw std::invalid_argument("KV cache rows: width " + std::to_string(width) + ", heads " + std::to_string(heads) +
                                ", group " + std::to_string(group) + ", rows " + std::to_string(rows) +
                                ": expected positive sizes, the heads dividing the width and the group a head row");
  type_ = type;
  width_ = width, heads_ = heads, head_width_ = width / heads;
  rows_ = rows;
  group_ = type == KvType::q8 ? group : 0;
  values_.assign(size_t(rows) * size_t(width) * value_bytes(type));
  scales_.assign(type == KvType::q8 ? size_t(rows) * size_t(width / group) : 0);  // group divides a head row
}

void KvRows::write(int64_t r, const float* x) {
  const size_t bytes = value_bytes(type_);
  for (int h = 0; h < heads_; ++h) {
    const float* xh = x + size_t(h) * size_t(head_width_);
    const size_t i = at(r, h, 0);
    uint8_t* row = values_.data() + i * bytes;
    switch (type_) {
      case KvType::f32: std::memcpy(row, xh, size_t(head_width_) * sizeof(float)); break;
      case KvType::bf16: kernels::f32_to_bf16_row(xh, head_width_, reinterpret_cast<kernels::BF16*>(row)); break;
      case KvType::f16:
        try {
          kernels::f32_to_f16_row(xh, head_width_, reinterpret_cast<kernels::F16*>(row));
        } catch (const kernels::KernelError& e) {
          throw kernels::KernelError(std::string("KV cache: ") + e.what() + "; a bf16 or f32 cache (--kv) holds it");
        }
        break;
      case KvType::q8:
        kernels::quantize_q8_row(xh, head_width_, group_, reinterpret_cast<int8_t*>(row), scales_.data() + i / size_t(group_));
        break;
    }
  }
}

const float* KvRows::read(int64_t r, int offset, int n, float* buf) const {
  const int h = offset / head_width_, i = offset - h * head_width_;
  if (i + n > head_width_)
    throw std::logic_error("KV rows: values " + std::to_string(offset) + " .. " + std::to_string(offset + n) +
                           " cross a head row of " + std::to_string(head_width_));
  const size_t a = at(r, h, i);
  switch (type_) {
    case KvType::f32: return reinterpret_cast<const float*>(values_.data()) + a;
    case KvType::bf16: kernels::bf16_to_f32_row(reinterpret_cast<const kernels::BF16*>(values_.data()) + a, n, buf); break;
    case KvType::f16: kernels::f16_to_f32_row(reinterpret_cast<const kernels::F16*>(values_.data()) + a, n, buf); break;
    case KvType::q8:
      kernels::dequantize_q8_row(reinterpret_cast<const int8_t*>(values_.data()) + a, scales_.data() + a / size_t(group_),
                                 n, group_, buf);
      break;
  }
  return buf;
}

void KvRows::to_tile(int64_t r0, int rows, int head, int n, KvTile& t, int j0) const {
  if (n != head_width_)
    throw std::logic_error("KV tile: rows of " + std::to_string(n) + " values from head rows of " +
                           std::to_string(head_width_));
  // No division per row on this path: it runs for every row and step at every depth. A head's rows
  // are consecutive, so the tile is one run of n-value rows.
  const size_t a = at(r0, head, 0), w = size_t(n);
  t.type = type_;
  switch (type_) {
    case KvType::f32: {
      const float* p = reinterpret_cast<const float*>(values_.data()) + a;
      for (int i = 0; i < rows; ++i) t.f32[j0 + i] = p + size_t(i) * w;
      break;
    }
    case KvType::bf16: {
      const kernels::BF16* p = reinterpret_cast<const kernels::BF16*>(values_.data()) + a;
      for (int i = 0; i < rows; ++i) t.bf16[j0 + i] = p + size_t(i) * w;
      break;
    }
    case KvType::f16: {
      const kernels::F16* p = reinterpret_cast<const kernels::F16*>(values_.data()) + a;
      for (int i = 0; i < rows; ++i) t.f16[j0 + i] = p + size_t(i) * w;
      break;
    }
    case KvType::q8: {
      if (n != group_)
        throw std::logic_error("KV tile: head rows of " + std::to_string(n) + " values are not one q8 group of " +
                               std::to_string(group_));
      const int8_t* p = reinterpret_cast<const int8_t*>(values_.data()) + a;
      const kernels::F16* scale = scales_.data() + a / w;  // one scale a head row
      for (int i = 0; i < rows; ++i) {
        t.q8[j0 + i] = p + size_t(i) * w;
        t.scale[j0 + i] = kernels::f16_to_f32(scale[i]);
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
  k_.init(type, kv_dim, kv_group(head), cap, kv_heads);
  v_.init(type, kv_dim, kv_group(head), cap, kv_heads);
}

void KvCache::append(const float* k, const float* v) {
  if (!ring && count >= capacity)
    throw std::runtime_error("context full: the session holds " + std::to_string(capacity) + " tokens");
  const int64_t s = slot(count);
  k_.write(s, k);
  v_.write(s, v);
  ++count;  // after the writes: a row write refused (a value its type cannot hold) adds no position
}

}  // namespace wren
