// tests/cpu_simd/test_rows_avx2.cpp — the x86 multi-row kernels of every family this CPU supports
// (dot_dispatch.h RowsDotFn, used by matvec_q8_1 per row chunk) against the scalar reference: for every expert type that has one,
// row counts that are and are not multiples of the kernel's row group (1..13), row strides equal
// to and larger than the row size, dot lengths with and without a partial 8-chunk tail (and one
// past the kernels' on-stack activation tables: 16640 for the 256-element types, 32960 for Q8_0 /
// MXFP4, whose multi_rows then decodes the activation scales per group), sane and
// fully random weight bytes — every output bit-identical to the scalar vec_dot_q8_1 of its row.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "bench/op_cases.h"
#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/dot_dispatch.h"
#include "kernels/cpu/iq_lookup.h"
#include "kernels/cpu/q8_passes.h"
#include "kernels/cpu/quant_ref.h"
#include "kernels/quant/blocks.h"

namespace ds4 {
namespace {

struct AutoModeGuard {
  ~AutoModeGuard() {
    cpu::set_simd_mode(cpu::SimdMode::Auto);
    cpu::set_q8_passes_mode(cpu::Q8Passes::Auto);
  }
};

/// Q8_1 activations of one row of `cols`: Gaussian blocks with magnitudes 2^-6..2^6, every fifth
/// block (b % 5 == 3) all zero (quantize_row_q8_1: codes in [-127, 127]).
std::vector<uint8_t> activations(int64_t cols, std::mt19937_64& rng) {
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::uniform_int_distribution<int> mag(-6, 6);
  std::vector<float> x(size_t(cols), 0.0f);
  for (int64_t b = 0; b < cols / 32; ++b) {
    const bool zero = b % 5 == 3;
    const float s = std::ldexp(1.0f, mag(rng));
    for (int j = 0; j < 32; ++j) x[size_t(32 * b + j)] = zero ? 0.0f : nd(rng) * s;
  }
  std::vector<uint8_t> a(size_t(cols / 32) * sizeof(quant::BlockQ8_1));
  cpu::quantize_row_q8_1(x.data(), a.data(), cols);
  return a;
}

uint32_t canonical_bits(float f) {
  if (std::isnan(f)) return 0x7FC00000u;  // F16C quiets signalling-NaN scales: compare NaN as NaN
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

void check_rows(GgmlType type, int64_t rows, int64_t cols, int64_t pad, bool sane, uint64_t seed) {
  AutoModeGuard guard;
  const std::string what = std::string(ggml_type_name(uint32_t(type))) + " rows " + std::to_string(rows) + " cols " +
                           std::to_string(cols) + " pad " + std::to_string(pad) + (sane ? " sane" : " random bytes");
  std::mt19937_64 rng(seed);
  const int64_t rb = cpu::row_bytes(type, cols), stride = rb + pad;
  const auto dense = bench::random_weights(type, rows, cols, rng, sane);
  std::vector<uint8_t> w(size_t(rows * stride));
  for (int64_t r = 0; r < rows; ++r) {
    std::memcpy(w.data() + r * stride, dense.data() + r * rb, size_t(rb));
    for (int64_t j = rb; j < stride; ++j) w[size_t(r * stride + j)] = uint8_t(rng());  // junk between rows
  }
  const auto a = activations(cols, rng);

  cpu::set_simd_mode(cpu::SimdMode::ForceScalar);
  std::vector<float> ref(static_cast<size_t>(rows));
  for (int64_t r = 0; r < rows; ++r) ref[size_t(r)] = cpu::vec_dot_q8_1(type, w.data() + r * stride, a.data(), cols);

  int nonzero = 0, families = 0;
  for (cpu::DotBackend b : {cpu::DotBackend::Avx2, cpu::DotBackend::AvxVnni, cpu::DotBackend::Avx512Vnni})
  for (cpu::IqLookup lookup : {cpu::IqLookup::Gather, cpu::IqLookup::Loads}) {  // both IQ variants (iq_lookup.h)
    if (!cpu::backend_usable(b)) continue;
    ++families;
    cpu::set_iq_lookup_mode(lookup);
    // Q8_0's row passes (q8_passes.h) follow the look-up pass: streams with gather, single with loads.
    cpu::set_q8_passes_mode(lookup == cpu::IqLookup::Gather ? cpu::Q8Passes::Streams : cpu::Q8Passes::Single);
    const cpu::RowsDotFn rows_fn = cpu::family_rows_dot(b, type);
    cpu::set_iq_lookup_mode(cpu::IqLookup::Auto);
    cpu::set_q8_passes_mode(cpu::Q8Passes::Auto);
    ASSERT_NE(rows_fn, nullptr) << what << " " << cpu::dot_backend_name(b);
    std::vector<float> out(size_t(rows) + 1, -777.0f);
    rows_fn(w.data(), stride, rows, a.data(), cols, out.data());
    for (int64_t r = 0; r < rows; ++r) {
      ASSERT_EQ(canonical_bits(out[size_t(r)]), canonical_bits(ref[size_t(r)]))
          << what << " " << cpu::dot_backend_name(b) << ": row " << r << " multi-row " << out[size_t(r)] << " scalar "
          << ref[size_t(r)];
      nonzero += ref[size_t(r)] != 0.0f;
    }
    EXPECT_EQ(out[size_t(rows)], -777.0f) << what << " " << cpu::dot_backend_name(b) << ": wrote past the last row";
  }
  EXPECT_GT(families, 0) << what;
  if (sane) {
    EXPECT_GT(nonzero, 0) << what << ": all-zero results test nothing";
  }
}

bool is_32_block(GgmlType t) { return t == GgmlType::Q8_0 || t == GgmlType::MXFP4; }

TEST(CpuSimdRows, BitIdenticalToScalarForEveryRowCountStrideAndLength) {
  if (!cpu::cpu_avx2_usable()) GTEST_SKIP() << "CPU lacks AVX2/FMA/F16C: AVX2 kernels cannot run here";
  uint64_t seed = 77;
  int tested_types = 0;
  for (GgmlType t : bench::expert_types()) {
    if (cpu::simd_rows_dot(t) == nullptr) continue;
    ++tested_types;
    const std::vector<int64_t> cols = is_32_block(t) ? std::vector<int64_t>{32, 96, 256, 288, 2048 + 160, 32768 + 192}
                                                     : std::vector<int64_t>{256, 768, 2048, 16384 + 256};
    for (int64_t c : cols)
      for (int64_t rows : {1, 2, 3, 4, 5, 7, 8, 9, 13})
        for (int64_t pad : {0, 40})
          for (bool sane : {true, false}) check_rows(t, rows, c, pad, sane, seed++);
  }
  EXPECT_GT(tested_types, 0);
}

TEST(CpuSimdRows, MultiRowKernelsExistWhereExpected) {
  if (!cpu::cpu_avx2_usable()) GTEST_SKIP() << "CPU lacks AVX2/FMA/F16C: AVX2 kernels cannot run here";
  for (GgmlType t : bench::expert_types())
    EXPECT_NE(cpu::simd_rows_dot(t), nullptr) << ggml_type_name(uint32_t(t));
  AutoModeGuard guard;
  cpu::set_simd_mode(cpu::SimdMode::ForceScalar);
  for (GgmlType t : bench::expert_types()) EXPECT_EQ(cpu::simd_rows_dot(t), nullptr) << ggml_type_name(uint32_t(t));
}

}  // namespace
}  // namespace ds4
