// tests/cpu_simd/test_dot_avx2.cpp — AVX2 row-dot kernels vs the scalar reference: bit-identical
// results for every type with an AVX2 kernel on random weights and Q8_1 activations, over the
// shapes of bench/op_cases.h and thread counts 1/2/3; run-time selection and the forced-scalar
// switch (API and DS4_CPU_SCALAR).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "bench/op_cases.h"
#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/dot_dispatch.h"
#include "kernels/cpu/quant_ref.h"
#include "kernels/quant/blocks.h"

namespace ds4 {
namespace {

using cpu::SimdMode;

// Policy at process start (read before any test changes it).
const SimdMode g_initial_mode = cpu::simd_mode();

/// Restores Auto after each test that changes the policy.
struct ModeGuard {
  ~ModeGuard() { cpu::set_simd_mode(SimdMode::Auto); }
};

/// Q8_1 activations of `batch` x `cols`: Gaussian rows with per-block magnitudes spread over
/// 2^-8..2^8, some all-zero blocks and some outliers (quantize_row_q8_1, codes in [-127, 127]).
std::vector<uint8_t> random_activations(int64_t cols, std::mt19937_64& rng) {
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::uniform_int_distribution<int> mag(-8, 8), pick(0, 15);
  std::vector<float> x(static_cast<size_t>(cols));
  for (int64_t b = 0; b < cols / 32; ++b) {
    const int kind = pick(rng);
    const float scale = std::ldexp(1.0f, mag(rng));
    for (int j = 0; j < 32; ++j) {
      float v = kind == 0 ? 0.0f : nd(rng) * scale;
      if (kind == 1 && j == 5) v = 1000.0f * scale;
      x[size_t(32 * b + j)] = v;
    }
  }
  std::vector<uint8_t> a(size_t(cols / 32 * int64_t(sizeof(quant::BlockQ8_1))));
  cpu::quantize_row_q8_1(x.data(), a.data(), cols);
  return a;
}

uint32_t bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
/// Bits with every NaN mapped to one pattern (the F16C decode quiets a signalling-NaN scale).
uint32_t nan_canonical(float f) { return std::isnan(f) ? 0x7FC00000u : bits(f); }

std::string case_name(const bench::OpCase& c) {
  return std::string(ggml_type_name(uint32_t(c.type))) + " " + std::to_string(c.rows) + "x" +
         std::to_string(c.cols) + " (" + c.tag + ")";
}

/// Compares AVX2 (threads 1, 2, 3 through matvec_q8_1, and vec_dot_q8_1 per row) with the scalar
/// reference on one case.
void check_case(const bench::OpCase& c, uint64_t seed, bool sane) {
  ModeGuard guard;
  std::mt19937_64 rng(seed);
  const auto w = bench::random_weights(c.type, c.rows, c.cols, rng, sane);
  const auto a = random_activations(c.cols, rng);
  const int64_t rb = cpu::row_bytes(c.type, c.cols);

  cpu::set_simd_mode(SimdMode::ForceScalar);
  ASSERT_EQ(cpu::dot_backend(c.type), cpu::DotBackend::Scalar);
  std::vector<float> ref(size_t(c.rows));
  cpu::matvec_q8_1(c.type, w.data(), c.rows, c.cols, a.data(), ref.data(), 1);

  cpu::set_simd_mode(SimdMode::Auto);
  ASSERT_EQ(cpu::dot_backend(c.type), cpu::DotBackend::Avx2);
  int nonzero = 0;
  for (int threads : {1, 2, 3}) {
    std::vector<float> out(size_t(c.rows), -12345.0f);
    cpu::matvec_q8_1(c.type, w.data(), c.rows, c.cols, a.data(), out.data(), threads);
    for (int64_t r = 0; r < c.rows; ++r) {
      const float v = out[size_t(r)], e = ref[size_t(r)];
      if (sane) {
        ASSERT_EQ(bits(v), bits(e)) << case_name(c) << " row " << r << " threads " << threads << ": avx2 " << v
                                    << " scalar " << e;
      } else {
        ASSERT_EQ(nan_canonical(v), nan_canonical(e)) << case_name(c) << " row " << r << " threads " << threads;
      }
      nonzero += e != 0.0f;
    }
  }
  for (int64_t r = 0; r < c.rows; ++r) {
    const float v = cpu::vec_dot_q8_1(c.type, w.data() + r * rb, a.data(), c.cols);
    ASSERT_EQ(nan_canonical(v), nan_canonical(ref[size_t(r)])) << case_name(c) << " vec_dot row " << r;
  }
  if (sane) {
    EXPECT_GT(nonzero, 0) << case_name(c) << ": all-zero results test nothing";
  }
}

void require_avx2() {
  if (!cpu::cpu_avx2_usable()) GTEST_SKIP() << "CPU lacks AVX2/FMA/F16C: AVX2 kernels cannot run here";
}

TEST(CpuSimdDot, BitIdenticalToScalarOnSaneScales) {
  require_avx2();
  uint64_t seed = 1;
  for (const auto& c : bench::test_op_cases()) check_case(c, seed++, true);
}

TEST(CpuSimdDot, BitIdenticalToScalarOnRandomBytes) {
  require_avx2();
  uint64_t seed = 1000;
  for (const auto& c : bench::test_op_cases()) check_case(c, seed++, false);
}

TEST(CpuSimdDot, EveryExpertTypeHasAnAvx2Kernel) {
  for (GgmlType t : bench::expert_types()) EXPECT_TRUE(cpu::avx2::has_row_dot(t)) << ggml_type_name(uint32_t(t));
  // Types without one stay on the scalar path whatever the policy.
  for (GgmlType t : {GgmlType::Q4_K, GgmlType::Q6_K, GgmlType::IQ2_S, GgmlType::NVFP4, GgmlType::Q4_0}) {
    EXPECT_FALSE(cpu::avx2::has_row_dot(t));
    EXPECT_EQ(cpu::dot_backend(t), cpu::DotBackend::Scalar);
  }
}

TEST(CpuSimdSelection, InitialModeFollowsEnvironment) {
  const char* e = std::getenv("DS4_CPU_SCALAR");
  const bool force = e != nullptr && e[0] != '\0' && std::string(e) != "0";
  EXPECT_EQ(g_initial_mode, force ? SimdMode::ForceScalar : SimdMode::Auto);
}

TEST(CpuSimdSelection, ForcedScalarAndAutoPickTheRightBackend) {
  ModeGuard guard;
  cpu::set_simd_mode(SimdMode::ForceScalar);
  for (GgmlType t : bench::expert_types()) {
    EXPECT_EQ(cpu::dot_backend(t), cpu::DotBackend::Scalar);
    EXPECT_EQ(cpu::simd_row_dot(t), nullptr);
  }
  cpu::set_simd_mode(SimdMode::Auto);
  const auto& f = cpu::cpu_features();
  EXPECT_EQ(cpu::cpu_avx2_usable(), f.avx2 && f.fma && f.f16c);
  for (GgmlType t : bench::expert_types())
    EXPECT_EQ(cpu::dot_backend(t), cpu::cpu_avx2_usable() ? cpu::DotBackend::Avx2 : cpu::DotBackend::Scalar);
  EXPECT_STREQ(cpu::dot_backend_name(cpu::DotBackend::Avx2), "avx2");
}

TEST(CpuSimdSelection, ForcedScalarPathComputesTheContract) {
  // With the scalar path forced, a Q8_0 row of all-ones weights (d = 1) against activations of
  // code 1 (d = 1/64 as fp16 bits 0x2400) gives exactly n/64 (every product 1 * 1/64).
  ModeGuard guard;
  cpu::set_simd_mode(SimdMode::ForceScalar);
  const int64_t n = 320;
  std::vector<quant::BlockQ8_0> w(size_t(n / 32));
  for (auto& b : w) {
    b.d = 0x3C00;  // 1.0
    for (auto& q : b.qs) q = 1;
  }
  std::vector<quant::BlockQ8_1> a(size_t(n / 32));
  for (auto& b : a) {
    b.d = 0x2400;  // 2^-6
    b.s = 0;
    for (auto& q : b.qs) q = 1;
  }
  EXPECT_EQ(cpu::vec_dot_q8_1(GgmlType::Q8_0, w.data(), a.data(), n), 5.0f);
  cpu::set_simd_mode(SimdMode::Auto);
  EXPECT_EQ(cpu::vec_dot_q8_1(GgmlType::Q8_0, w.data(), a.data(), n), 5.0f);
}

}  // namespace
}  // namespace ds4
