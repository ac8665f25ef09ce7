// ds4/splitmix64.h — SplitMix64, the project's small seeded generator (planner routing draws,
// make-tiny --random-blocks).
#pragma once

#include <cstdint>

namespace ds4 {

/// SplitMix64 (Steele, Lea, Flood, "Fast splittable pseudorandom number generators", OOPSLA 2014):
/// a fully specified 64-bit generator, so a seed gives the same stream on every platform.
/// `s` is the state (the seed); each next() advances it by the golden-ratio increment.
struct SplitMix64 {
  uint64_t s;
  /// The next 64 random bits.
  uint64_t next() {
    uint64_t z = (s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  /// A double uniform in [0, 1) from the top 53 bits of next().
  double uniform() { return double(next() >> 11) * (1.0 / 9007199254740992.0); }
};

}  // namespace ds4
