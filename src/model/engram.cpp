#include "model/engram.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>

#include "kernels/types.h"

namespace wren {

void engram_lookup(const EngramHasher& hasher, const MatrixView& tables, std::span<const int32_t> context, float* g,
                   std::span<int64_t> rows) {
  hasher.rows(context, rows);
  for (size_t t = 0; t < rows.size(); ++t) kernels::decode_row(tables, rows[t], g + int64_t(t) * tables.cols);
}

namespace {

void will_need(const void* p, size_t bytes) {
  static const uintptr_t page = uintptr_t(sysconf(_SC_PAGESIZE));
  const uintptr_t first = reinterpret_cast<uintptr_t>(p) & ~(page - 1);
  const uintptr_t end = reinterpret_cast<uintptr_t>(p) + bytes;
  madvise(reinterpret_cast<void*>(first), size_t(end - first), MADV_WILLNEED);  // advice: errors change nothing
}

}  // namespace

double request_engram_rows(const MatrixView& tables, std::span<const int64_t> rows) {
  const size_t values = size_t(tables.row_bytes());
  const size_t scales = tables.scales ? size_t(tables.groups()) * sizeof(kernels::F16) : 0;
  double bytes = 0;
  for (const int64_t r : rows) {
    if (r < 0 || r >= tables.rows) continue;
    will_need(static_cast<const uint8_t*>(tables.data) + r * int64_t(values), values);
    if (scales) will_need(tables.row_scales(r), scales);
    bytes += double(values + scales);
  }
  return bytes;
}

}  // namespace wren
