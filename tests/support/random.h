// tests/support/random.h — seeded random test data shared by the device and engine tests.
#pragma once

#include <cstddef>
#include <cstdint>
#include <random>
#include <vector>

namespace ds4::test {

/// n values drawn from N(0, sd^2) by std::mt19937(seed) and std::normal_distribution<float>: the
/// same seed gives the same vector on every run (of the same standard library).
inline std::vector<float> randn(size_t n, uint32_t seed, float sd = 1.0f) {
  std::mt19937 g(seed);
  std::normal_distribution<float> d(0.0f, sd);
  std::vector<float> v(n);
  for (auto& x : v) x = d(g);
  return v;
}

}  // namespace ds4::test
