// text/: a BPE's merges, (left id, right id) -> (rank, merged id), as open addressing with
// linear probing over 16-byte slots (the pair's key and its merge) at most half full.
// std::unordered_map spent a node allocation per merge (200k for o200k: a seventh of its
// load in perf) and a pointer chase per lookup in encode.
#pragma once

#include <cstdint>
#include <vector>

#include "config/huge_pages.h"

namespace wren::text {

class MergeTable {
 public:
  struct Merge {
    int32_t rank, id;
  };

  // Room for n merges without growing.
  void reserve(size_t n) {
    if (2 * n > slots_.size()) rebuild(n);
  }
  // The merge of (left, right), replacing one given before (as Hugging Face: a repeat wins).
  // Ids are never negative.
  void set(int32_t left, int32_t right, Merge merge) {
    if (2 * (size_ + 1) > slots_.size()) rebuild(size_ + 1);
    Slot& s = slots_[slot_of(key(left, right))];
    if (s.key == kEmpty) ++size_;
    s = {key(left, right), merge};
  }
  // The merge of (left, right), or nullptr when the pair does not merge.
  const Merge* find(int32_t left, int32_t right) const {
    if (slots_.empty()) return nullptr;
    const Slot& s = slots_[slot_of(key(left, right))];
    return s.key == kEmpty ? nullptr : &s.merge;
  }
  size_t size() const { return size_; }

 private:
  struct Slot {
    uint64_t key;
    Merge merge;
  };
  static constexpr uint64_t kEmpty = ~uint64_t(0);  // the pair (-1, -1), which no merge has
  static uint64_t key(int32_t left, int32_t right) { return (uint64_t(uint32_t(left)) << 32) | uint32_t(right); }

  // The slot holding k, or the empty one where it would go. The multiply (Fibonacci hashing)
  // spreads the pairs of consecutive ids that a vocabulary's merges are made of.
  size_t slot_of(uint64_t k) const {
    size_t i = size_t((k * 0x9E3779B97F4A7C15ull) >> 32) & mask_;
    while (slots_[i].key != kEmpty && slots_[i].key != k) i = (i + 1) & mask_;
    return i;
  }

  void rebuild(size_t n) {
    size_t cap = 16;
    while (cap < 2 * n) cap *= 2;
    std::vector<Slot> old = std::move(slots_);
    slots_.reserve(cap);
    advise_huge_pages(slots_);
    slots_.assign(cap, Slot{kEmpty, {}});
    mask_ = cap - 1;
    for (const Slot& s : old)
      if (s.key != kEmpty) slots_[slot_of(s.key)] = s;
  }

  std::vector<Slot> slots_;
  size_t mask_ = 0, size_ = 0;
};

}  // namespace wren::text
