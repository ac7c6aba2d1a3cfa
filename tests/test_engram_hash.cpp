// Engram hashing: deterministic, in range, each order sees exactly its own n-gram.
#include <gtest/gtest.h>

#include <set>
#include <vector>

#include "config/engram_hash.h"

namespace wren {
namespace {

EngramSpec spec() {
  EngramSpec e;
  e.orders = {2, 3};
  e.heads_per_order = 4;
  e.rows = 1009;
  e.row_dim = 4;
  return e;
}

std::vector<int64_t> rows_of(const EngramHasher& h, std::vector<int32_t> ctx) {
  std::vector<int64_t> out(h.tables());
  h.rows(ctx, out);
  return out;
}

TEST(EngramHash, DeterministicAndInItsTable) {
  EngramHasher a(spec()), b(spec());
  for (int32_t x = 0; x < 50; ++x) {
    auto ra = rows_of(a, {x, x + 1, 3 * x}), rb = rows_of(b, {x, x + 1, 3 * x});
    ASSERT_EQ(ra, rb);
    for (int t = 0; t < a.tables(); ++t) {
      EXPECT_GE(ra[t], a.table_offset(t));
      EXPECT_LT(ra[t], a.table_offset(t) + a.table_rows(t));
    }
  }
  EXPECT_EQ(a.total_rows(), a.table_offset(a.tables() - 1) + a.table_rows(a.tables() - 1));
}

TEST(EngramHash, EachOrderSeesOnlyItsNgram) {
  EngramHasher h(spec());
  auto base = rows_of(h, {7, 8, 9});
  auto other_oldest = rows_of(h, {100, 8, 9});  // changes only the trigram
  auto other_middle = rows_of(h, {7, 100, 9});  // changes both
  for (int t = 0; t < 4; ++t) EXPECT_EQ(base[t], other_oldest[t]) << "bigram table " << t;
  int trigram_changed = 0, bigram_changed = 0;
  for (int t = 4; t < 8; ++t) trigram_changed += base[t] != other_oldest[t];
  for (int t = 0; t < 4; ++t) bigram_changed += base[t] != other_middle[t];
  EXPECT_GE(trigram_changed, 3);
  EXPECT_GE(bigram_changed, 3);
}

TEST(EngramHash, PadDiffersFromEveryTokenAndSaltSeparatesInstances) {
  EngramHasher h(spec()), salted(spec(), 14);
  auto padded = rows_of(h, {EngramHasher::kPad, EngramHasher::kPad, 5});
  std::set<int64_t> distinct;
  int same_as_token = 0;
  for (int32_t x = 0; x < 200; ++x) same_as_token += rows_of(h, {x, x, 5})[4] == padded[4];
  EXPECT_LE(same_as_token, 3);  // collisions happen at rate ~1/1009, not systematically
  EXPECT_NE(rows_of(salted, {1, 2, 3}), rows_of(h, {1, 2, 3}));
  // Heads of one order spread one n-gram over different rows.
  auto r = rows_of(h, {1, 2, 3});
  for (int t = 0; t < 4; ++t) distinct.insert(r[t] - h.table_offset(t));
  EXPECT_GE(distinct.size(), 3u);
  EXPECT_THROW(h.rows(std::vector<int32_t>{1, 2}, r), std::invalid_argument);
}

}  // namespace
}  // namespace wren
