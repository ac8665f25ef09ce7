// tests/support/test_randn.h — seeded standard-normal test vectors shared by the device tests.
#pragma once

#include <cstddef>
#include <cstdint>
#include <random>
#include <vector>

namespace ds4::test {

/// `n` draws of N(0, 1) from std::mt19937(seed) (the same values for the same seed and library).
inline std::vector<float> randn(size_t n, uint32_t seed) {
  std::mt19937 g(seed);
  std::normal_distribution<float> d(0.0f, 1.0f);
  std::vector<float> v(n);
  for (auto& x : v) x = d(g);
  return v;
}

}  // namespace ds4::test
