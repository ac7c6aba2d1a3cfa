// config/: which engram rows an n-gram names. Part of the model description (the same
// token ids must reach the same rows in the engine, the trainer and any export), so it
// lives beside the config rather than in either consumer.
//
// DeepSeek's Engram hash (REFERENCES.md): for table (order n, head h) and the n-gram ending
// at position t, mix = XOR_{k<n} x_{t-k} * m_{n,h,k} with odd multipliers m, then
// row = mix mod p_{n,h}, p the table's prime row count. Positions before the start of the
// sequence or across a document boundary use the pad id.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "config/model_config.h"

namespace wren {

class EngramHasher {
 public:
  static constexpr int32_t kPad = -1;  // stands for "no token here" in a context window

  // `salt` separates the hashes of engram instances that have their own tables (Nenya has
  // one per engram layer; pass the layer index).
  explicit EngramHasher(const EngramSpec& spec, uint64_t salt = 0);

  int max_order() const { return max_order_; }
  int tables() const { return int(primes_.size()); }
  int64_t total_rows() const { return total_rows_; }
  int64_t table_offset(int table) const { return offsets_[table]; }
  int64_t table_rows(int table) const { return primes_[table]; }

  // `context` holds the last max_order() token ids, oldest first, the current token last;
  // kPad for positions that do not exist. Writes tables() row indices into the flat table
  // (table offset included), in table order (order-major, then head).
  void rows(std::span<const int32_t> context, std::span<int64_t> out) const;

 private:
  std::vector<int> orders_;
  int heads_ = 0, max_order_ = 0;
  std::vector<int64_t> primes_, offsets_;
  std::vector<uint64_t> multipliers_;  // [table][k], k < max_order
  int64_t total_rows_ = 0;
};

}  // namespace wren
