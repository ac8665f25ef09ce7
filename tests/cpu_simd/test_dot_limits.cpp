// tests/cpu_simd/test_dot_limits.cpp — the x86 row-dot kernels at their integer limits. The SIMD
// kernels keep partial sums in int16 where the value ranges allow (maddubs pairs, int16 hadd of
// Q2_K sub-block and IQ half sums; see kernels/cpu/dot_q8_1_x86.inc and dot_q8_1_loads.inc); random
// weights and Gaussian activations never come near those bounds. Here every weight element sits
// at the largest grid entry of its type (found by decoding every entry), the sub-scales are at
// their maximum, and the Q8_1 codes are all +127 or all -127, so an int16 sum one level too many
// would saturate or wrap and the result would differ from the scalar reference.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/dot_dispatch.h"
#include "kernels/cpu/iq_lookup.h"
#include "kernels/cpu/quant_ref.h"
#include "kernels/quant/blocks.h"

namespace ds4 {
namespace {

using cpu::SimdMode;

void put16(uint8_t* p, uint32_t v) {
  p[0] = uint8_t(v);
  p[1] = uint8_t(v >> 8);
}

/// One 256-element block of `type` whose 32 grid entries are all `k`, with no sign flips, the
/// delta positive (IQ1), every sub-scale / multiplier field at its maximum and the super-scale
/// 1.0 (fp16 0x3C00). Q2_K ignores k: every code 3, every scale and min nibble 15, dmin 0.
std::vector<uint8_t> uniform_block(GgmlType type, uint32_t k) {
  std::vector<uint8_t> b(size_t(cpu::row_bytes(type, 256)), 0);
  switch (type) {
    case GgmlType::Q2_K:  // scales[16], qs[64], d, dmin
      std::memset(b.data(), 0xFF, 16 + 64);
      put16(b.data() + 80, 0x3C00);
      break;
    case GgmlType::IQ2_XXS:  // d, then per chunk a0 (4 grid bytes), a1 (4 x 7 sign bits, scale in bits 28..31)
      put16(b.data(), 0x3C00);
      for (int g = 0; g < 8; ++g) {
        for (int l = 0; l < 4; ++l) b[size_t(2 + 8 * g + l)] = uint8_t(k);
        b[size_t(2 + 8 * g + 7)] = 0xF0;
      }
      break;
    case GgmlType::IQ2_XS:  // d, qs[32] (9-bit grid index | 7-bit sign index), scales[8]
      put16(b.data(), 0x3C00);
      for (int e = 0; e < 32; ++e) put16(b.data() + 2 + 2 * e, k & 511);
      std::memset(b.data() + 66, 0xFF, 8);
      break;
    case GgmlType::IQ1_S:  // d, qs[32] (index low byte), qh[8] (3 x 4 index bits, scale bits 12..14, delta bit 15)
      put16(b.data(), 0x3C00);
      for (int e = 0; e < 32; ++e) b[size_t(2 + e)] = uint8_t(k);
      for (int g = 0; g < 8; ++g) {
        const uint32_t hi = (k >> 8) & 7;
        put16(b.data() + 34 + 2 * g, hi | hi << 3 | hi << 6 | hi << 9 | 7u << 12);
      }
      break;
    case GgmlType::IQ1_M: {  // qs[32], qh[16] (per entry: 3 index bits, delta bit 3), scales[8]
      for (int e = 0; e < 32; ++e) b[size_t(e)] = uint8_t(k);
      const uint32_t hi = (k >> 8) & 7;
      for (int i = 0; i < 16; ++i) b[size_t(32 + i)] = uint8_t(hi | hi << 4);
      // Four scale words: four 3-bit multiplier fields (all 7) and one nibble of the fp16 scale each.
      for (int w = 0; w < 4; ++w) put16(b.data() + 48 + 2 * w, 0x0FFFu | ((0x3C00u >> (4 * w)) & 0xF) << 12);
      break;
    }
    default:
      ADD_FAILURE() << "no uniform block for type " << int(type);
  }
  return b;
}

/// Grid size of the IQ types (1 for Q2_K: one block).
uint32_t grid_size(GgmlType type) {
  switch (type) {
    case GgmlType::IQ2_XXS: return 256;
    case GgmlType::IQ2_XS: return 512;
    case GgmlType::IQ1_S:
    case GgmlType::IQ1_M: return 2048;
    default: return 1;
  }
}

/// The uniform block of `type` whose decoded values sum highest: every element at the type's
/// largest grid entry (the decode is the scalar reference's).
std::vector<uint8_t> largest_block(GgmlType type) {
  std::vector<uint8_t> best;
  double best_sum = -1e30;
  std::vector<float> v(256);
  for (uint32_t k = 0; k < grid_size(type); ++k) {
    auto b = uniform_block(type, k);
    cpu::dequantize_row(type, b.data(), v.data(), 256);
    double s = 0;
    for (float x : v) s += x;
    if (s > best_sum) best_sum = s, best = b;
  }
  return best;
}

uint32_t bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

struct Family {
  cpu::DotBackend backend;
  SimdMode mode;
};
constexpr Family kFamilies[] = {{cpu::DotBackend::Avx2, SimdMode::Avx2},
                                {cpu::DotBackend::AvxVnni, SimdMode::AvxVnni},
                                {cpu::DotBackend::Avx512Vnni, SimdMode::Avx512Vnni}};

TEST(CpuSimdLimits, LargestWeightsTimesFullScaleCodesEqualTheScalarReference) {
  if (!cpu::cpu_avx2_usable()) GTEST_SKIP() << "CPU lacks AVX2/FMA/F16C: AVX2 kernels cannot run here";
  struct Reset {
    ~Reset() {
      cpu::set_simd_mode(SimdMode::Auto);
      cpu::set_iq_lookup_mode(cpu::IqLookup::Auto);
    }
  } reset;
  int compared = 0;
  for (GgmlType type : {GgmlType::Q2_K, GgmlType::IQ2_XXS, GgmlType::IQ2_XS, GgmlType::IQ1_S, GgmlType::IQ1_M}) {
    const auto blk = largest_block(type);
    // 2048 elements (the shared-activation path) and 256 * 65 (rows longer than 512 chunks take the
    // per-super-block path); 5 rows (the multi-row passes and a remainder row).
    for (int64_t n : {int64_t(2048), int64_t(256 * 65)}) {
      const int64_t rows = 5, rb = cpu::row_bytes(type, n);
      std::vector<uint8_t> w(size_t(rows * rb));
      for (size_t o = 0; o < w.size(); o += blk.size()) std::memcpy(w.data() + o, blk.data(), blk.size());
      for (float sign : {1.0f, -1.0f}) {
        const std::vector<float> x(size_t(n), sign);  // every Q8_1 code +-127, scale 1/127
        std::vector<uint8_t> a(size_t(n / 32) * sizeof(quant::BlockQ8_1));
        cpu::quantize_row_q8_1(x.data(), a.data(), n);
        ASSERT_EQ(int8_t(a[4]), sign > 0 ? 127 : -127);
        cpu::set_simd_mode(SimdMode::ForceScalar);
        std::vector<float> ref(static_cast<size_t>(rows));
        cpu::matvec_q8_1(type, w.data(), rows, n, a.data(), ref.data(), 1);
        ASSERT_TRUE(std::isfinite(ref[0]));
        ASSERT_NE(ref[0], 0.0f);
        for (const Family& f : kFamilies)
          for (cpu::IqLookup lookup : {cpu::IqLookup::Gather, cpu::IqLookup::Loads}) {
            if (!cpu::backend_usable(f.backend)) continue;
            cpu::set_simd_mode(f.mode);
            cpu::set_iq_lookup_mode(lookup);
            const std::string what = std::string(ggml_type_name(uint32_t(type))) + " n " + std::to_string(n) + " codes " +
                                     (sign > 0 ? "+127 " : "-127 ") + cpu::dot_backend_name(f.backend) +
                                     (lookup == cpu::IqLookup::Gather ? " gather" : " loads");
            std::vector<float> out(static_cast<size_t>(rows), -1.0f);
            cpu::matvec_q8_1(type, w.data(), rows, n, a.data(), out.data(), 1);
            for (int64_t r = 0; r < rows; ++r)
              ASSERT_EQ(bits(out[size_t(r)]), bits(ref[size_t(r)])) << what << " row " << r << ": " << out[size_t(r)]
                                                                    << " scalar " << ref[size_t(r)];
            EXPECT_EQ(bits(cpu::vec_dot_q8_1(type, w.data(), a.data(), n)), bits(ref[0])) << what << " vec_dot";
            ++compared;
          }
      }
    }
  }
  EXPECT_GE(compared, 5 * 2 * 2 * 2) << "fewer family comparisons than the AVX2 family alone gives";
}

}  // namespace
}  // namespace ds4
