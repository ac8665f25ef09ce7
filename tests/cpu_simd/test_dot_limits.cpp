// tests/cpu_simd/test_dot_limits.cpp — the x86 row-dot and multi-token kernels at their integer
// limits. The SIMD kernels keep partial sums in int16 where the value ranges allow (maddubs pairs,
// int16 hadd of Q2_K sub-block and IQ half sums; see kernels/cpu/dot_q8_1_x86.inc,
// dot_q8_1_loads.inc, mmq_x86.inc); random weights and Gaussian activations never come near those
// bounds. Here every weight element of a row sits at one extreme of its type (the uniform block
// with the largest or the smallest decoded sum, found by decoding every grid entry or fill byte),
// the sub-scales are at their maximum, and the Q8_1 codes are all +127 or all -127, so an int16
// sum one level too many would saturate or wrap and the result would differ from the scalar
// reference.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/dot_dispatch.h"
#include "kernels/cpu/iq_lookup.h"
#include "kernels/cpu/mmq.h"
#include "kernels/cpu/ops.h"
#include "kernels/cpu/q8_passes.h"
#include "kernels/cpu/quant_ref.h"
#include "kernels/quant/blocks.h"
#include "tests/cpu_simd/simd_families.h"

namespace ds4 {
namespace {

using cpu::SimdMode;
using simd_test::bits;
using simd_test::Family;
using simd_test::kFamilies;

void put16(uint8_t* p, uint32_t v) {
  p[0] = uint8_t(v);
  p[1] = uint8_t(v >> 8);
}

/// 256 elements of `type` (one super-block, or eight 32-element blocks) with every grid entry `k`
/// (IQ types: no sign flips, delta positive, every multiplier field at its maximum) or every code
/// byte `k` (the other types: Q2_K qs, Q6_K ql and qh, Q4_K / Q4_0 / MXFP4 / Q8_0 qs; sub-scales
/// and mins at their maximum, dmin 0). Super-scales 1.0 (fp16 0x3C00; MXFP4 E8M0 128).
std::vector<uint8_t> uniform_block(GgmlType type, uint32_t k) {
  std::vector<uint8_t> b(size_t(cpu::row_bytes(type, 256)), 0);
  uint8_t* p = b.data();
  switch (type) {
    case GgmlType::Q8_0:  // d, qs[32]
    case GgmlType::Q4_0:  // d, qs[16]
      for (size_t o = 0; o < b.size(); o += b.size() / 8) {
        put16(p + o, 0x3C00);
        std::memset(p + o + 2, int(k), b.size() / 8 - 2);
      }
      break;
    case GgmlType::MXFP4:  // e, qs[16]
      for (size_t o = 0; o < b.size(); o += 17) {
        p[o] = 128;
        std::memset(p + o + 1, int(k), 16);
      }
      break;
    case GgmlType::Q2_K:  // scales[16], qs[64], d, dmin
      std::memset(p, 0xFF, 16);
      std::memset(p + 16, int(k), 64);
      put16(p + 80, 0x3C00);
      break;
    case GgmlType::Q4_K:  // d, dmin, scales[12] (6-bit scales and mins), qs[128]
      put16(p, 0x3C00);
      std::memset(p + 4, 0xFF, 12);
      std::memset(p + 16, int(k), 128);
      break;
    case GgmlType::Q6_K:  // ql[128], qh[64], scales[16] (int8), d
      std::memset(p, int(k), 128 + 64);
      std::memset(p + 192, 127, 16);
      put16(p + 208, 0x3C00);
      break;
    case GgmlType::IQ2_XXS:  // d, then per chunk a0 (4 grid bytes), a1 (4 x 7 sign bits, scale in bits 28..31)
      put16(p, 0x3C00);
      for (int g = 0; g < 8; ++g) {
        for (int l = 0; l < 4; ++l) p[2 + 8 * g + l] = uint8_t(k);
        p[2 + 8 * g + 7] = 0xF0;
      }
      break;
    case GgmlType::IQ2_XS:  // d, qs[32] (9-bit grid index | 7-bit sign index), scales[8]
      put16(p, 0x3C00);
      for (int e = 0; e < 32; ++e) put16(p + 2 + 2 * e, k & 511);
      std::memset(p + 66, 0xFF, 8);
      break;
    case GgmlType::IQ1_S: {  // d, qs[32] (index low byte), qh[8] (3 x 4 index bits, scale bits 12..14, delta bit 15)
      put16(p, 0x3C00);
      for (int e = 0; e < 32; ++e) p[2 + e] = uint8_t(k);
      const uint32_t hi = (k >> 8) & 7;
      for (int g = 0; g < 8; ++g) put16(p + 34 + 2 * g, hi | hi << 3 | hi << 6 | hi << 9 | 7u << 12);
      break;
    }
    case GgmlType::IQ1_M: {  // qs[32], qh[16] (per entry: 3 index bits, delta bit 3), scales[8]
      for (int e = 0; e < 32; ++e) p[e] = uint8_t(k);
      const uint32_t hi = (k >> 8) & 7;
      for (int i = 0; i < 16; ++i) p[32 + i] = uint8_t(hi | hi << 4);
      // Four scale words: four 3-bit multiplier fields (all 7) and one nibble of the fp16 scale each.
      for (int w = 0; w < 4; ++w) put16(p + 48 + 2 * w, 0x0FFFu | ((0x3C00u >> (4 * w)) & 0xF) << 12);
      break;
    }
    default:
      ADD_FAILURE() << "no uniform block for type " << int(type);
  }
  return b;
}

/// Values of k that uniform_block takes for `type`: the grid size of the IQ types, 256 fill bytes
/// for the others.
uint32_t k_count(GgmlType type) {
  switch (type) {
    case GgmlType::IQ2_XS: return 512;
    case GgmlType::IQ1_S:
    case GgmlType::IQ1_M: return 2048;
    default: return 256;
  }
}

/// The two uniform blocks of `type` whose decoded values sum highest and lowest (the scalar
/// reference's decode): every element at one extreme of the type.
std::vector<std::vector<uint8_t>> extreme_blocks(GgmlType type) {
  std::vector<uint8_t> hi, lo;
  double hi_sum = -1e30, lo_sum = 1e30;
  std::vector<float> v(256);
  for (uint32_t k = 0; k < k_count(type); ++k) {
    auto b = uniform_block(type, k);
    cpu::dequantize_row(type, b.data(), v.data(), 256);
    double s = 0;
    for (float x : v) s += x;
    if (s > hi_sum) hi_sum = s, hi = b;
    if (s < lo_sum) lo_sum = s, lo = b;
  }
  return {hi, lo};
}



/// Guard: the policies back to Auto after the test.
struct Reset {
  ~Reset() {
    cpu::set_simd_mode(SimdMode::Auto);
    cpu::set_iq_lookup_mode(cpu::IqLookup::Auto);
    cpu::set_q8_passes_mode(cpu::Q8Passes::Auto);
  }
};

const GgmlType kTypes[] = {GgmlType::Q8_0, GgmlType::Q4_0, GgmlType::MXFP4,   GgmlType::Q2_K,  GgmlType::Q4_K,
                           GgmlType::Q6_K, GgmlType::IQ2_XXS, GgmlType::IQ2_XS, GgmlType::IQ1_S, GgmlType::IQ1_M};

/// `rows` copies of `blk` one after the other, `n` elements each.
std::vector<uint8_t> tile_rows(GgmlType type, const std::vector<uint8_t>& blk, int64_t rows, int64_t n) {
  std::vector<uint8_t> w(size_t(rows * cpu::row_bytes(type, n)));
  for (size_t o = 0; o < w.size(); o += blk.size()) std::memcpy(w.data() + o, blk.data(), blk.size());
  return w;
}

TEST(CpuSimdLimits, RowDotsAtTheExtremesEqualTheScalarReference) {
  if (!cpu::cpu_avx2_usable()) GTEST_SKIP() << "CPU lacks AVX2/FMA/F16C: AVX2 kernels cannot run here";
  Reset reset;
  int compared = 0;
  for (GgmlType type : kTypes)
    for (const auto& blk : extreme_blocks(type))
      // 2048 elements (the shared-activation path) and 256 * 65 (rows longer than 512 chunks take
      // the per-super-block path); 5 rows (the multi-row passes and a remainder row).
      for (int64_t n : {int64_t(2048), int64_t(256 * 65)}) {
        const int64_t rows = 5;
        const auto w = tile_rows(type, blk, rows, n);
        for (float sign : {1.0f, -1.0f}) {
          const std::vector<float> x(size_t(n), sign);  // every Q8_1 code +-127, scale 1/127
          std::vector<uint8_t> a(size_t(n / 32) * sizeof(quant::BlockQ8_1));
          cpu::quantize_row_q8_1(x.data(), a.data(), n);
          ASSERT_EQ(int8_t(a[4]), sign > 0 ? 127 : -127);
          cpu::set_simd_mode(SimdMode::ForceScalar);
          std::vector<float> ref(static_cast<size_t>(rows));
          cpu::matvec_q8_1(type, w.data(), rows, n, a.data(), ref.data(), 1);
          ASSERT_TRUE(std::isfinite(ref[0]));
          for (const Family& f : kFamilies)
            for (cpu::IqLookup lookup : {cpu::IqLookup::Gather, cpu::IqLookup::Loads}) {
              if (!cpu::backend_usable(f.backend)) continue;
              cpu::set_simd_mode(f.mode);
              cpu::set_iq_lookup_mode(lookup);  // and Q8_0's row passes: gather -> streams, loads -> single
              cpu::set_q8_passes_mode(lookup == cpu::IqLookup::Gather ? cpu::Q8Passes::Streams : cpu::Q8Passes::Single);
              const std::string what = std::string(ggml_type_name(uint32_t(type))) + " n " + std::to_string(n) +
                                       " codes " + (sign > 0 ? "+127 " : "-127 ") + cpu::dot_backend_name(f.backend) +
                                       (lookup == cpu::IqLookup::Gather ? " gather" : " loads");
              std::vector<float> out(static_cast<size_t>(rows), -1.0f);
              cpu::matvec_q8_1(type, w.data(), rows, n, a.data(), out.data(), 1);
              for (int64_t r = 0; r < rows; ++r)
                ASSERT_EQ(bits(out[size_t(r)]), bits(ref[size_t(r)]))
                    << what << " row " << r << ": " << out[size_t(r)] << " scalar " << ref[size_t(r)];
              EXPECT_EQ(bits(cpu::vec_dot_q8_1(type, w.data(), a.data(), n)), bits(ref[0])) << what << " vec_dot";
              ++compared;
            }
        }
      }
  EXPECT_GE(compared, 10 * 2 * 2 * 2 * 2) << "fewer family comparisons than the AVX2 family alone gives";
}

TEST(CpuSimdLimits, MultiTokenKernelsAtTheExtremesEqualTheScalarReference) {
  if (!cpu::cpu_avx2_usable()) GTEST_SKIP() << "CPU lacks AVX2/FMA/F16C: the multi-token kernels cannot run here";
  Reset reset;
  // Seven tokens of codes +127 or -127 (the AVX-512 family's four-token pass, then two, then one).
  const float signs[] = {1.0f, -1.0f, 1.0f, 1.0f, -1.0f, -1.0f, 1.0f};
  const int64_t nt = 7, n = 2048;
  std::vector<float> x(size_t(nt * n));
  for (int64_t t = 0; t < nt; ++t)
    for (int64_t j = 0; j < n; ++j) x[size_t(t * n + j)] = signs[t];
  cpu::MatmulScratch s;
  cpu::matmul_quantize_prepare(nt, n, true, s);
  cpu::matmul_quantize_rows(cpu::F32Rows{x.data(), n}, n, s, 0, nt);
  const cpu::MmqTokens tok = cpu::matmul_tokens(s, n);
  const int64_t qb = n / 32 * int64_t(sizeof(quant::BlockQ8_1));
  int compared = 0;
  for (GgmlType type : kTypes)
    for (const auto& blk : extreme_blocks(type)) {
      const auto w = tile_rows(type, blk, 1, n);
      cpu::set_simd_mode(SimdMode::ForceScalar);
      std::vector<float> ref(static_cast<size_t>(nt));
      for (int64_t t = 0; t < nt; ++t) ref[size_t(t)] = cpu::vec_dot_q8_1(type, w.data(), s.xq.data() + t * qb, n);
      for (const Family& f : kFamilies) {
        if (!cpu::backend_usable(f.backend)) continue;
        const cpu::MmqFn fn = cpu::family_mmq(f.backend, type);
        const cpu::MmqDecodeFn dec = cpu::family_mmq_decoder(f.backend, type);
        ASSERT_TRUE(fn != nullptr && dec != nullptr) << ggml_type_name(uint32_t(type));
        std::vector<cpu::MmqGroup> g(size_t(n / 256));
        std::vector<float> o(static_cast<size_t>(nt), -1.0f);
        dec(w.data(), n, g.data());
        fn(g.data(), n / 32, tok, 0, nt, o.data(), 1);
        for (int64_t t = 0; t < nt; ++t)
          ASSERT_EQ(bits(o[size_t(t)]), bits(ref[size_t(t)]))
              << ggml_type_name(uint32_t(type)) << " " << cpu::dot_backend_name(f.backend) << " token " << t << ": "
              << o[size_t(t)] << " scalar " << ref[size_t(t)];
        ++compared;
      }
    }
  EXPECT_GE(compared, 10 * 2) << "fewer family comparisons than the AVX2 family alone gives";
}

}  // namespace
}  // namespace ds4
