// config/: asking Linux for 2 MiB pages under a large buffer that malloc has just given, before
// anything writes it.
//
// A first write to a fresh 4 KiB page faults, and on this project's VMs a fault costs about
// 18 us (touching 64 MB of fresh memory, one write per page; 0.4 us per 4 KiB under 2 MiB
// pages). Loading a 200k-token tokenizer.json writes some 80 MB of fresh memory: 20k faults,
// half of its load time. Linux, with transparent huge pages in `madvise` mode (Debian's
// default), backs with 2 MiB pages only the 2 MiB-aligned stretches that madvise(MADV_HUGEPAGE)
// names. The big buffers of that load (the file's bytes, the vocabulary's object, the
// tokenizer's tables) are named here as they are reserved; kernels/huge_pages.h maps the
// weights' buffers by hand instead. A hint: where it is refused, speed changes, never results.
#pragma once

#include <cstddef>
#include <cstdint>

#if defined(__linux__)
#include <sys/mman.h>
#endif

namespace wren {

inline void advise_huge_pages([[maybe_unused]] const void* data, [[maybe_unused]] size_t bytes) {
#if defined(__linux__) && defined(MADV_HUGEPAGE)
  constexpr uintptr_t kHuge = uintptr_t(2) << 20;
  const uintptr_t start = (reinterpret_cast<uintptr_t>(data) + kHuge - 1) & ~(kHuge - 1);
  const uintptr_t end = (reinterpret_cast<uintptr_t>(data) + bytes) & ~(kHuge - 1);
  if (end > start) ::madvise(reinterpret_cast<void*>(start), end - start, MADV_HUGEPAGE);
#endif
}

// The same for the room a vector (or string) has reserved.
template <typename Vector>
void advise_huge_pages(const Vector& v) {
  advise_huge_pages(v.data(), v.capacity() * sizeof(*v.data()));
}

}  // namespace wren
