// tests/cpu_simd/test_dot_f32.cpp — cpu::dot_f32 / dot_f32_x4 / dot_f32_rows4 in every SIMD family
// this CPU runs (AVX-512F, AVX2+FMA, scalar) vs the scalar reference quant::dot_f32_ref
// (kernels/quant/dot_f32.h) bit for bit, on random inputs with odd lengths, magnitudes spread over
// 2^-20..2^20 (so the order matters), and unaligned starts; plus a hand-computed case of the order.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/ops.h"
#include "kernels/quant/dot_f32.h"

namespace ds4 {
namespace {

using cpu::SimdMode;

struct ModeGuard {
  ~ModeGuard() { cpu::set_simd_mode(SimdMode::Auto); }
};

uint32_t bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

std::vector<float> spread(int64_t n, std::mt19937_64& rng) {
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::uniform_int_distribution<int> mag(-20, 20);
  std::vector<float> v(size_t(n) + 1);  // one spare so v.data() + 1 is an unaligned start
  for (auto& x : v) x = std::ldexp(nd(rng), mag(rng));
  return v;
}

constexpr int64_t kLengths[] = {0, 1, 3, 7, 8, 15, 16, 17, 31, 32, 33, 47, 63, 64, 65, 100, 129, 511, 512, 1001, 4097};

TEST(DotF32, HandComputedOrder) {
  // n = 33. Lane 0: fma(1, -1, 0) = -1, then fma(1 + 2^-12, 1 + 2^-12, -1) = 2^-11 + 2^-24 exactly
  // (one rounding; a rounded product 1 + 2^-11 would lose the 2^-24). Lane 16: 2^-30. The
  // butterfly adds lane 16 to lane 0 first: 2^-11 + 2^-24 + 2^-30 (exact). An ascending sum
  // without FMA would give 2^-11 (-1 + 2^-30 rounds to -1).
  std::vector<float> a(33, 0.0f), b(33, 0.0f);
  a[0] = 1.0f, b[0] = -1.0f;
  a[32] = b[32] = 1.0f + std::ldexp(1.0f, -12);
  a[16] = std::ldexp(1.0f, -30), b[16] = 1.0f;
  const float expect = std::ldexp(1.0f, -11) + std::ldexp(1.0f, -24) + std::ldexp(1.0f, -30);
  ASSERT_EQ(double(expect), std::ldexp(1.0, -11) + std::ldexp(1.0, -24) + std::ldexp(1.0, -30));
  ModeGuard g;
  EXPECT_EQ(bits(quant::dot_f32_ref(a.data(), b.data(), 33)), bits(expect));
  for (SimdMode m : {SimdMode::ForceScalar, SimdMode::Avx2, SimdMode::Avx512Vnni}) {
    cpu::set_simd_mode(m);
    EXPECT_EQ(bits(cpu::dot_f32(a.data(), b.data(), 33)), bits(expect)) << int(m);
  }
}

TEST(DotF32, EveryFamilyEqualsTheScalarReference) {
  ModeGuard g;
  std::mt19937_64 rng(19);
  int families = 0;
  for (SimdMode m : {SimdMode::ForceScalar, SimdMode::Avx2, SimdMode::Avx512Vnni}) {
    cpu::set_simd_mode(m);
    if (m != SimdMode::ForceScalar && cpu::selected_backend() == cpu::DotBackend::Scalar) continue;
    ++families;
    for (int64_t n : kLengths) {
      for (int off : {0, 1}) {
        auto a = spread(n, rng), b = spread(n, rng);
        const float* pa = a.data() + off;
        const float* pb = b.data() + off;
        EXPECT_EQ(bits(cpu::dot_f32(pa, pb, n)), bits(quant::dot_f32_ref(pa, pb, n))) << int(m) << " n=" << n;
        std::vector<std::vector<float>> o;
        for (int k = 0; k < 4; ++k) o.push_back(spread(n, rng));
        const float* op[4] = {o[0].data() + off, o[1].data(), o[2].data() + off, o[3].data()};
        float x4[4], r4[4];
        cpu::dot_f32_x4(pa, op, n, x4);
        cpu::dot_f32_rows4(op, pb, n, r4);
        for (int k = 0; k < 4; ++k) {
          EXPECT_EQ(bits(x4[k]), bits(quant::dot_f32_ref(pa, op[k], n))) << int(m) << " n=" << n << " k=" << k;
          EXPECT_EQ(bits(r4[k]), bits(quant::dot_f32_ref(op[k], pb, n))) << int(m) << " n=" << n << " k=" << k;
        }
      }
    }
  }
  EXPECT_GE(families, 1);
}

TEST(DotF32, InfAndNanPropagate) {
  ModeGuard g;
  for (SimdMode m : {SimdMode::ForceScalar, SimdMode::Avx2, SimdMode::Avx512Vnni}) {
    cpu::set_simd_mode(m);
    std::vector<float> a(45, 1.0f), b(45, 1.0f);
    a[44] = INFINITY;
    EXPECT_EQ(cpu::dot_f32(a.data(), b.data(), 45), INFINITY);
    a[3] = -INFINITY;
    EXPECT_TRUE(std::isnan(cpu::dot_f32(a.data(), b.data(), 45)));
  }
}

}  // namespace
}  // namespace ds4
