// config/: SplitMix64 (Steele, Lea & Flood 2014), the one seeded generator behind the engram
// hash multipliers (engram_hash.cpp) and the initial weights (model/weights.cpp), so that every
// face of wren draws the same numbers from the same seed.
#pragma once

#include <cstdint>

namespace wren {

// Advances `state` by the golden-ratio increment and returns its finalised mix.
inline uint64_t splitmix64(uint64_t& state) {
  uint64_t z = (state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

}  // namespace wren
