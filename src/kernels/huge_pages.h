// kernels/: memory for the bytes decode streams, in 2 MiB pages where the kernel gives them.
//
// Decode reads every weight once per token. With 4 KiB pages a gigabyte of weights is a
// quarter of a million pages, each a TLB miss and a page walk in the middle of a stream;
// transparent huge pages cover it with 512 entries. Linux hands anonymous memory huge pages
// only when it is 2 MiB aligned and (with THP in `madvise` mode, Debian's default) asked
// for them with madvise(MADV_HUGEPAGE), so these buffers are mapped by hand. Elsewhere (or
// when the kernel says no) they are ordinary pages: the hint changes speed, never results.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

namespace wren::kernels {

constexpr size_t kHugePage = size_t(2) << 20;

// `bytes` of uninitialised memory, 2 MiB aligned, asked for in huge pages. Throws
// std::bad_alloc when it cannot be had. The deleter unmaps it.
struct HugeFree {
  size_t bytes = 0;
  void operator()(uint8_t* p) const;
};
using HugeBuffer = std::unique_ptr<uint8_t[], HugeFree>;
HugeBuffer huge_alloc(size_t bytes);

// Many buffers carved from few huge-page mappings: each allocation is 64-byte aligned and
// lives as long as the arena. Allocations larger than a chunk get a mapping of their own.
class HugeArena {
 public:
  explicit HugeArena(size_t chunk_bytes = size_t(64) << 20) : chunk_(chunk_bytes) {}
  uint8_t* allocate(size_t bytes);
  size_t mapped() const { return mapped_; }  // bytes of all mappings

 private:
  size_t chunk_, used_ = 0, capacity_ = 0, mapped_ = 0;
  uint8_t* current_ = nullptr;  // the open chunk
  std::vector<HugeBuffer> chunks_;
};

}  // namespace wren::kernels
