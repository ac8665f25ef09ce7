// tests/cpu_simd/simd_families.h — the x86 kernel families the cpu_simd tests compare with the
// scalar reference, each with the policy (cpu::SimdMode) that selects it, and the float bit
// pattern the comparisons use.
#pragma once

#include <cstdint>
#include <cstring>

#include "kernels/cpu/cpu_features.h"

namespace ds4::simd_test {

/// One SIMD family and the policy that selects it.
struct Family {
  cpu::DotBackend backend;
  cpu::SimdMode mode;
};
inline constexpr Family kFamilies[] = {{cpu::DotBackend::Avx2, cpu::SimdMode::Avx2},
                                       {cpu::DotBackend::AvxVnni, cpu::SimdMode::AvxVnni},
                                       {cpu::DotBackend::Avx512Vnni, cpu::SimdMode::Avx512Vnni}};

/// The IEEE-754 bits of f (results are compared bit for bit).
inline uint32_t bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

}  // namespace ds4::simd_test
