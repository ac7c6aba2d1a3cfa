#include "config/engram_hash.h"

#include <algorithm>
#include <stdexcept>

#include "config/splitmix.h"

namespace wren {

namespace {

// Token ids are mapped to 32 bits (the pad to 2^32 - 1, which no token has); an odd
// multiplier below 2^31 keeps every product below 2^63.
uint64_t token_code(int32_t id) { return id == EngramHasher::kPad ? 0xFFFFFFFFull : uint64_t(uint32_t(id)); }

}  // namespace

EngramHasher::EngramHasher(const EngramSpec& spec, uint64_t salt)
    : orders_(spec.orders), heads_(spec.heads_per_order) {
  max_order_ = *std::max_element(orders_.begin(), orders_.end());
  primes_ = engram_table_rows(spec);
  for (int64_t p : primes_) {
    offsets_.push_back(total_rows_);
    total_rows_ += p;
  }
  uint64_t state = spec.seed * 0x100000001B3ull + salt * 10007 + 1;
  multipliers_.resize(primes_.size() * size_t(max_order_));
  for (uint64_t& m : multipliers_) m = ((splitmix64(state) >> 34) << 1) | 1;  // odd, < 2^31
}

void EngramHasher::rows(std::span<const int32_t> context, std::span<int64_t> out) const {
  if (int(context.size()) != max_order_ || out.size() != primes_.size())
    throw std::invalid_argument("EngramHasher::rows: expected a context of " + std::to_string(max_order_) +
                                " ids and room for " + std::to_string(primes_.size()) + " rows");
  size_t table = 0;
  for (int n : orders_) {
    for (int h = 0; h < heads_; ++h, ++table) {
      const uint64_t* m = &multipliers_[table * size_t(max_order_)];
      uint64_t mix = 0;
      for (int k = 0; k < n; ++k) mix ^= token_code(context[max_order_ - 1 - k]) * m[k];
      out[table] = offsets_[table] + int64_t(mix % uint64_t(primes_[table]));
    }
  }
}

}  // namespace wren
