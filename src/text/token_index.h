// text/: token string -> id, for a vocabulary whose strings the caller holds by id (and
// passes to each call, so the index never points into a vector that may move or grow).
//
// Open addressing with linear probing: a slot is 8 bytes (the hash's top 32 bits and the id),
// the string compared is the owner's texts[id]. A node-based map of 200k std::string keys
// costs a bucket, a node and the string's heap bytes per lookup, scattered over memory;
// loading o200k looks up 600k strings (every merge's halves and their join), and those cache
// misses were most of its load time. Load stays at most 1/2, so probes are short.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "config/huge_pages.h"

namespace wren::text {

class TokenIndex {
 public:
  // Room for n tokens without growing.
  void reserve(size_t n, const std::vector<std::string>& texts) {
    if (2 * n > slots_.size()) rebuild(n, texts);
  }
  // text -> id; if text is present already, its id is kept and returned. texts[id] == text.
  int32_t insert(std::string_view text, int32_t id, const std::vector<std::string>& texts) {
    if (2 * (size_ + 1) > slots_.size()) rebuild(size_ + 1, texts);
    const uint64_t h = hash(text);
    for (size_t i = h & mask_;; i = (i + 1) & mask_) {
      Slot& s = slots_[i];
      if (s.id < 0) {
        s = {tag(h), id};
        ++size_;
        return id;
      }
      if (s.tag == tag(h) && texts[size_t(s.id)] == text) return s.id;
    }
  }
  // The id of text, or -1.
  int32_t find(std::string_view text, const std::vector<std::string>& texts) const {
    if (slots_.empty()) return -1;
    const uint64_t h = hash(text);
    for (size_t i = h & mask_;; i = (i + 1) & mask_) {
      const Slot& s = slots_[i];
      if (s.id < 0) return -1;
      if (s.tag == tag(h) && texts[size_t(s.id)] == text) return s.id;
    }
  }
  size_t size() const { return size_; }

 private:
  struct Slot {
    uint32_t tag = 0;
    int32_t id = -1;
  };
  static uint64_t hash(std::string_view s) { return std::hash<std::string_view>{}(s); }
  static uint32_t tag(uint64_t h) { return uint32_t(h >> 32); }

  void rebuild(size_t n, const std::vector<std::string>& texts) {
    size_t cap = 16;
    while (cap < 2 * n) cap *= 2;
    std::vector<Slot> old = std::move(slots_);
    slots_.reserve(cap);
    advise_huge_pages(slots_);
    slots_.assign(cap, Slot{});
    mask_ = cap - 1;
    size_ = 0;
    for (const Slot& s : old)
      if (s.id >= 0) {
        const uint64_t h = hash(texts[size_t(s.id)]);
        size_t i = h & mask_;
        while (slots_[i].id >= 0) i = (i + 1) & mask_;
        slots_[i] = {tag(h), s.id};
        ++size_;
      }
  }

  std::vector<Slot> slots_;
  size_t mask_ = 0, size_ = 0;
};

}  // namespace wren::text
