// text/token_index.h, the tokenizer's string -> id table, against std::unordered_map on random
// vocabularies: every present string found with its id, absent ones (including prefixes and
// extensions of present ones, and strings that differ only after a shared hash-sized prefix)
// not found, repeats keeping the first id, across the table's growth from empty.
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <unordered_map>
#include <vector>

#include "text/merge_table.h"
#include "text/token_index.h"

namespace wren::text {
namespace {

std::string random_text(std::mt19937& rng) {
  const size_t n = 1 + rng() % 40;  // short (in-place) and long (heap) strings
  std::string s(n, '\0');
  for (char& c : s) c = char('a' + rng() % 4);  // a small alphabet: many near-collisions
  return s;
}

TEST(TextTokenIndex, AgreesWithAnUnorderedMap) {
  for (uint32_t seed : {1u, 2u, 3u}) {
    std::mt19937 rng(seed);
    std::vector<std::string> texts;
    std::unordered_map<std::string, int32_t> oracle;
    TokenIndex index;
    if (seed == 2) index.reserve(5000, texts);  // reserved up front, or grown from nothing
    for (int i = 0; i < 5000; ++i) {
      std::string s = random_text(rng);
      const int32_t id = int32_t(texts.size());
      texts.push_back(s);
      const int32_t got = index.insert(texts.back(), id, texts);
      auto [it, fresh] = oracle.emplace(s, id);
      ASSERT_EQ(got, it->second) << s;  // a repeat keeps the first id
      (void)fresh;
    }
    EXPECT_EQ(index.size(), oracle.size());
    for (auto& [s, id] : oracle) ASSERT_EQ(index.find(s, texts), id) << s;
    for (int i = 0; i < 20000; ++i) {
      std::string s = random_text(rng);
      if (i % 3 == 0) s += 'e';  // outside the alphabet: surely absent
      auto it = oracle.find(s);
      ASSERT_EQ(index.find(s, texts), it == oracle.end() ? -1 : it->second) << s;
    }
    for (auto& [s, id] : oracle) {
      ASSERT_EQ(index.find(s.substr(0, s.size() - 1), texts),
                oracle.count(s.substr(0, s.size() - 1)) ? oracle.at(s.substr(0, s.size() - 1)) : -1);
      ASSERT_EQ(index.find(s + "e", texts), -1);
    }
  }
  TokenIndex empty;
  EXPECT_EQ(empty.find("a", {}), -1);
}

// text/merge_table.h, the tokenizer's (left, right) -> merge table, against std::unordered_map:
// pairs of a few hundred ids (so that many repeat, and the new merge must win), every pair
// found with its last merge, every other pair of the same ids not found, reserved or grown.
TEST(TextMergeTable, AgreesWithAnUnorderedMap) {
  for (uint32_t seed : {1u, 2u}) {
    std::mt19937 rng(seed);
    std::unordered_map<uint64_t, MergeTable::Merge> oracle;
    MergeTable table;
    if (seed == 2) table.reserve(20000);
    EXPECT_EQ(table.find(0, 0), nullptr);
    auto key = [](int32_t a, int32_t b) { return (uint64_t(a) << 32) | uint64_t(b); };
    for (int32_t rank = 0; rank < 20000; ++rank) {
      const int32_t a = int32_t(rng() % 300), b = int32_t(rng() % 300), id = int32_t(rng() % 200000);
      table.set(a, b, {rank, id});
      oracle[key(a, b)] = {rank, id};
    }
    EXPECT_EQ(table.size(), oracle.size());
    for (int32_t a = 0; a < 300; ++a)
      for (int32_t b = 0; b < 300; ++b) {
        const MergeTable::Merge* got = table.find(a, b);
        auto it = oracle.find(key(a, b));
        ASSERT_EQ(got == nullptr, it == oracle.end()) << a << " " << b;
        if (got) {
          ASSERT_TRUE(got->rank == it->second.rank && got->id == it->second.id) << a << " " << b;
        }
      }
  }
}

}  // namespace
}  // namespace wren::text
