// Huge-page buffers (kernels/huge_pages.h): 2 MiB aligned, every byte writable and kept;
// the arena's allocations 64-byte aligned, disjoint, and alive together.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <utility>
#include <vector>

#include "kernels/huge_pages.h"

namespace wren {
namespace {

TEST(HugePages, BuffersAreAlignedAndHoldWhatIsWritten) {
  for (size_t bytes : {size_t(1), size_t(4096), (size_t(2) << 20) + 3, size_t(5) << 20}) {
    kernels::HugeBuffer b = kernels::huge_alloc(bytes);
    ASSERT_TRUE(b);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(b.get()) % (size_t(2) << 20), 0u) << bytes;
    EXPECT_GE(b.get_deleter().bytes, bytes);
    for (size_t i = 0; i < bytes; ++i) b[i] = uint8_t(i * 7 + 1);
    size_t wrong = 0;
    for (size_t i = 0; i < bytes; ++i) wrong += b[i] != uint8_t(i * 7 + 1);
    EXPECT_EQ(wrong, 0u) << bytes;
  }
}

TEST(HugePages, ArenaAllocationsAreAlignedAndDisjoint) {
  kernels::HugeArena arena(size_t(1) << 20);  // small chunks: several of them, and large buffers of their own
  std::vector<std::pair<uint8_t*, size_t>> blocks;
  for (size_t k = 0; k < 200; ++k) {
    const size_t bytes = k % 50 == 7 ? (size_t(3) << 20) + k : 1 + k * 97 % 20000;
    uint8_t* p = arena.allocate(bytes);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % 64, 0u);
    std::fill(p, p + bytes, uint8_t(k));
    blocks.emplace_back(p, bytes);
  }
  // Every block still holds its own value: none overlaps another or was freed.
  for (size_t k = 0; k < blocks.size(); ++k) {
    const auto [p, bytes] = blocks[k];
    EXPECT_EQ(std::count(p, p + bytes, uint8_t(k)), std::ptrdiff_t(bytes)) << k;
  }
  EXPECT_GE(arena.mapped(), size_t(12) << 20);
}

}  // namespace
}  // namespace wren
