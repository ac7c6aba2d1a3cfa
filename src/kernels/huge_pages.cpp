// kernels/: huge-page buffers (huge_pages.h): mmap a little more than asked, trim to a
// 2 MiB boundary, madvise(MADV_HUGEPAGE).
#include "kernels/huge_pages.h"

#include <cstring>
#include <new>

#if defined(__linux__)
#include <sys/mman.h>
#else
#include <cstdlib>
#endif

namespace wren::kernels {

namespace {
constexpr size_t kHuge = kHugePage;
constexpr size_t round_up(size_t n, size_t to) { return (n + to - 1) / to * to; }
}  // namespace

#if defined(__linux__)
HugeBuffer huge_alloc(size_t bytes) {
  const size_t size = round_up(bytes ? bytes : 1, kHuge);
  // One huge page more than needed, so that a 2 MiB aligned start lies inside; the ends
  // beyond it are unmapped again.
  void* raw = ::mmap(nullptr, size + kHuge, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (raw == MAP_FAILED) throw std::bad_alloc();
  const auto base = reinterpret_cast<uintptr_t>(raw);
  const uintptr_t start = round_up(base, kHuge);
  if (start > base) ::munmap(raw, start - base);
  if (const size_t tail = kHuge - (start - base)) ::munmap(reinterpret_cast<void*>(start + size), tail);
  ::madvise(reinterpret_cast<void*>(start), size, MADV_HUGEPAGE);  // a hint: failure is harmless
  return HugeBuffer(reinterpret_cast<uint8_t*>(start), HugeFree{size});
}

void HugeFree::operator()(uint8_t* p) const {
  if (p) ::munmap(p, bytes);
}

HugeBuffer huge_alloc_zeroed(size_t bytes) { return huge_alloc(bytes); }  // anonymous pages start as zeros
#else
HugeBuffer huge_alloc(size_t bytes) {
  const size_t size = round_up(bytes ? bytes : 1, kHuge);
  void* p = std::aligned_alloc(kHuge, size);
  if (!p) throw std::bad_alloc();
  return HugeBuffer(static_cast<uint8_t*>(p), HugeFree{size});
}

void HugeFree::operator()(uint8_t* p) const { std::free(p); }

HugeBuffer huge_alloc_zeroed(size_t bytes) {
  HugeBuffer b = huge_alloc(bytes);
  std::memset(b.get(), 0, b.get_deleter().bytes);
  return b;
}
#endif

uint8_t* HugeArena::allocate(size_t bytes) {
  bytes = round_up(bytes ? bytes : 1, 64);
  if (bytes > chunk_ / 2) {  // a large buffer: its own mapping, the current chunk stays open
    chunks_.push_back(huge_alloc(bytes));
    mapped_ += chunks_.back().get_deleter().bytes;
    return chunks_.back().get();
  }
  if (used_ + bytes > capacity_) {
    chunks_.push_back(huge_alloc(chunk_));
    mapped_ += chunk_;
    current_ = chunks_.back().get();
    used_ = 0, capacity_ = chunk_;
  }
  uint8_t* p = current_ + used_;
  used_ += bytes;
  return p;
}

}  // namespace wren::kernels
