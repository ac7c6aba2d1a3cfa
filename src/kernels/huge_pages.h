// kernels/: memory for the bytes decode streams, in 2 MiB pages where the kernel gives them.
//
// Decode reads every weight once per token. With 4 KiB pages a gigabyte of weights is a
// quarter of a million pages, each a TLB miss and a page walk in the middle of a stream;
// transparent huge pages cover it with 512 entries. Linux hands anonymous memory huge pages
// only when it is 2 MiB aligned and (with THP in `madvise` mode, Debian's default) asked
// for them with madvise(MADV_HUGEPAGE), so these buffers are mapped by hand. Elsewhere (or
// when the kernel says no) they are ordinary pages: the hint changes speed, never results.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <type_traits>
#include <utility>
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
// The same, filled with zeros: on Linux by the kernel as each page is first touched (an
// anonymous mapping), so the pages never written cost no memory.
HugeBuffer huge_alloc_zeroed(size_t bytes);

// n zero-filled values of a trivially copyable T that a hot loop reads in its own order (a
// KV cache: the rows of every position of a long context, read once per token): from
// kHugePage bytes on in huge pages (huge_alloc_zeroed: a 16K-token full layer's rows are a
// few TLB entries, not a thousand 4 KiB pages, and the context not yet reached is not
// resident), smaller ones on the heap, where a 2 MiB page would waste most of itself. Copies
// are deep.
template <class T>
class LargeArray {
  static_assert(std::is_trivially_copyable_v<T>);

 public:
  LargeArray() = default;
  LargeArray(const LargeArray& o) { *this = o; }
  LargeArray& operator=(const LargeArray& o) {
    if (this != &o) assign(o.n_), std::copy_n(o.data(), o.n_, data());
    return *this;
  }
  LargeArray(LargeArray&& o) noexcept { *this = std::move(o); }
  LargeArray& operator=(LargeArray&& o) noexcept {
    huge_ = std::move(o.huge_), small_ = std::move(o.small_);
    n_ = std::exchange(o.n_, 0), p_ = std::exchange(o.p_, nullptr);
    return *this;
  }
  // n zeros, in new memory.
  void assign(size_t n) {
    huge_.reset(), small_ = {};
    n_ = n;
    if (n * sizeof(T) >= kHugePage) {
      huge_ = huge_alloc_zeroed(n * sizeof(T));
      p_ = reinterpret_cast<T*>(huge_.get());
    } else {
      small_.assign(n, T{});
      p_ = small_.data();
    }
  }
  T* data() { return p_; }
  const T* data() const { return p_; }
  size_t size() const { return n_; }
  T& operator[](size_t i) { return p_[i]; }
  const T& operator[](size_t i) const { return p_[i]; }

 private:
  HugeBuffer huge_;
  std::vector<T> small_;
  size_t n_ = 0;
  T* p_ = nullptr;
};

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
