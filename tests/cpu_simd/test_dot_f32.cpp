// tests/cpu_simd/test_dot_f32.cpp — cpu::dot_f32 / dot_f32_x4 / dot_f32_rows4 in every SIMD family
// this CPU runs (AVX-512F, AVX2+FMA, scalar) vs the scalar reference quant::dot_f32_ref
// (kernels/quant/dot_f32.h) bit for bit, on random inputs with odd lengths, magnitudes spread over
// 2^-20..2^20 (so the order matters), and unaligned starts; plus a hand-computed case of the order.
// The fused decode + dot kernels (dot_row_f32 and its x4 / rows4 forms, matmul_rows) of every
// weight type they read in place are checked against dequantize_row + the reference the same way.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/ops.h"
#include "kernels/cpu/quant_ref.h"
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

/// A random row of `type` (F32 / F16 / BF16) of n elements: random finite bit patterns (normals,
/// subnormals, zeros of both signs) so every conversion case is exercised.
std::vector<uint8_t> random_row(GgmlType type, int64_t n, std::mt19937_64& rng) {
  const int size = type == GgmlType::F32 ? 4 : 2;
  std::vector<uint8_t> row(size_t(n * size) + 8);
  std::uniform_int_distribution<uint32_t> u;
  for (int64_t i = 0; i < n; ++i) {
    if (type == GgmlType::F32) {
      float f = std::ldexp(std::normal_distribution<float>(0, 1)(rng), int(u(rng) % 41) - 20);
      std::memcpy(&row[size_t(i * 4)], &f, 4);
    } else {
      uint16_t h = uint16_t(u(rng));
      const uint16_t exp_mask = type == GgmlType::F16 ? 0x7C00 : 0x7F80;
      if ((h & exp_mask) == exp_mask) h = uint16_t(h & ~0x4000);  // no Inf/NaN
      if (type == GgmlType::BF16 && ((h >> 7) & 0xFF) > 0x90) h = uint16_t(h & ~0x2000);  // keep sums finite-ish
      std::memcpy(&row[size_t(i * 2)], &h, 2);
    }
  }
  return row;
}

TEST(DotF32, FusedF32F16Bf16RowsEqualDecodeThenReference) {
  ModeGuard g;
  std::mt19937_64 rng(1919);
  for (SimdMode m : {SimdMode::ForceScalar, SimdMode::Avx2, SimdMode::Avx512Vnni}) {
    cpu::set_simd_mode(m);
    if (m != SimdMode::ForceScalar && cpu::selected_backend() == cpu::DotBackend::Scalar) continue;
    for (GgmlType type : {GgmlType::F32, GgmlType::F16, GgmlType::BF16}) {
      ASSERT_TRUE(cpu::can_dot_row_f32(type));
      if (m != SimdMode::ForceScalar) { EXPECT_TRUE(cpu::has_fused_dot_f32(type)); }
      for (int64_t n : kLengths) {
        std::vector<std::vector<uint8_t>> w;
        std::vector<std::vector<float>> wd, x;
        for (int k = 0; k < 4; ++k) {
          w.push_back(random_row(type, n, rng));
          wd.emplace_back(size_t(n) + 1);
          cpu::dequantize_row(type, w[size_t(k)].data(), wd[size_t(k)].data(), n);
          x.push_back(spread(n, rng));
        }
        const void* wp[4] = {w[0].data(), w[1].data(), w[2].data(), w[3].data()};
        const float* xp[4] = {x[0].data(), x[1].data(), x[2].data(), x[3].data()};
        SCOPED_TRACE(::testing::Message() << "mode " << int(m) << " type " << int(type) << " n " << n);
        EXPECT_EQ(bits(cpu::dot_row_f32(type, wp[0], xp[0], n)), bits(quant::dot_f32_ref(wd[0].data(), xp[0], n)));
        float x4[4], r4[4];
        cpu::dot_row_f32_x4(type, wp[1], xp, n, x4);
        cpu::dot_rows4_f32(type, wp, xp[2], n, r4);
        float x8[8];
        cpu::dot_rows2_f32_x4(type, wp + 2, xp, n, x8);  // rows 2, 3 against all four tokens
        for (int k = 0; k < 4; ++k) {
          EXPECT_EQ(bits(x4[k]), bits(quant::dot_f32_ref(wd[1].data(), xp[k], n))) << k;
          EXPECT_EQ(bits(r4[k]), bits(quant::dot_f32_ref(wd[size_t(k)].data(), xp[2], n))) << k;
          EXPECT_EQ(bits(x8[k]), bits(quant::dot_f32_ref(wd[2].data(), xp[k], n))) << "rows2 row 0 token " << k;
          EXPECT_EQ(bits(x8[4 + k]), bits(quant::dot_f32_ref(wd[3].data(), xp[k], n))) << "rows2 row 1 token " << k;
        }
      }
    }
  }
}

/// Random blocks of a block type (Q8_0: finite fp16 scale, any codes; MXFP4: scale 2^-28..2^22, any
/// codes; F8_E4M3_R128: scale 2^-27..2^23, any E4M3 code but the NaN ones; NVFP4: any bytes (every
/// UE4M3 scale byte decodes finite, 0x00 / 0x7F to 0); NVFP4_S2: that plus a tensor scale s2 =
/// normal x 2^-20..2^20).
std::vector<uint8_t> random_blocks(GgmlType type, int64_t n, std::mt19937_64& rng) {
  std::vector<uint8_t> row(size_t(cpu::row_bytes(type, n)));
  std::uniform_int_distribution<int> byte(0, 255), e(100, 150);
  for (auto& b : row) b = uint8_t(byte(rng));
  if (type == GgmlType::Q8_0) {
    for (size_t o = 0; o < row.size(); o += 34) row[o + 1] = uint8_t(row[o + 1] & 0x3F);  // |d| < 2
  } else if (type == GgmlType::MXFP4) {
    for (size_t o = 0; o < row.size(); o += 17) row[o] = uint8_t(e(rng));
  } else if (type == GgmlType::NVFP4) {
  } else if (type == GgmlType::NVFP4_S2) {
    std::uniform_int_distribution<int> mag(-20, 20);
    for (size_t o = 0; o < row.size(); o += 40) {
      const float s2 = std::ldexp(std::normal_distribution<float>(0, 1)(rng), mag(rng));
      std::memcpy(&row[o], &s2, 4);
    }
  } else {
    for (size_t o = 0; o < row.size(); o += 129) {
      row[o] = uint8_t(e(rng));
      for (size_t j = 1; j <= 128; ++j)
        if ((row[o + j] & 0x7F) == 0x7F) row[o + j] = uint8_t(row[o + j] - 1);
    }
  }
  return row;
}

TEST(DotF32, FusedBlockRowsEqualDecodeThenReference) {
  ModeGuard g;
  std::mt19937_64 rng(2019);
  for (SimdMode m : {SimdMode::ForceScalar, SimdMode::Avx2, SimdMode::Avx512Vnni}) {
    cpu::set_simd_mode(m);
    if (m != SimdMode::ForceScalar && cpu::selected_backend() == cpu::DotBackend::Scalar) continue;
    for (GgmlType type : {GgmlType::Q8_0, GgmlType::MXFP4, GgmlType::F8_E4M3_R128, GgmlType::NVFP4, GgmlType::NVFP4_S2}) {
      ASSERT_TRUE(cpu::can_dot_row_f32(type));
      // Q8_0, MXFP4, NVFP4(_S2) decode in registers in every SIMD family, F8_E4M3_R128 in the AVX-512 one only.
      const bool simd = cpu::selected_backend() != cpu::DotBackend::Scalar;
      EXPECT_EQ(cpu::has_fused_dot_f32(type), type == GgmlType::F8_E4M3_R128
                                                  ? cpu::selected_backend() == cpu::DotBackend::Avx512Vnni
                                                  : simd);
      const int64_t unit = ds4::ggml_type_geometry(uint32_t(type))->block_elems;
      for (int64_t blocks : {1, 3, 5, 8, 33}) {
        const int64_t n = blocks * unit;
        std::vector<std::vector<uint8_t>> w;
        std::vector<std::vector<float>> wd, x;
        for (int k = 0; k < 4; ++k) {
          w.push_back(random_blocks(type, n, rng));
          wd.emplace_back(size_t(n));
          cpu::dequantize_row(type, w[size_t(k)].data(), wd[size_t(k)].data(), n);
          x.push_back(spread(n, rng));
        }
        const void* wp[4] = {w[0].data(), w[1].data(), w[2].data(), w[3].data()};
        const float* xp[4] = {x[0].data(), x[1].data(), x[2].data(), x[3].data()};
        SCOPED_TRACE(::testing::Message() << "mode " << int(m) << " type " << int(type) << " n " << n);
        const float r0 = quant::dot_f32_ref(wd[0].data(), xp[0], n);
        EXPECT_TRUE(std::isfinite(r0));
        EXPECT_EQ(bits(cpu::dot_row_f32(type, wp[0], xp[0], n)), bits(r0));
        float x4[4], r4[4];
        cpu::dot_row_f32_x4(type, wp[1], xp, n, x4);
        cpu::dot_rows4_f32(type, wp, xp[2], n, r4);
        float x8[8];
        cpu::dot_rows2_f32_x4(type, wp + 2, xp, n, x8);  // rows 2, 3 against all four tokens
        for (int k = 0; k < 4; ++k) {
          EXPECT_EQ(bits(x4[k]), bits(quant::dot_f32_ref(wd[1].data(), xp[k], n))) << k;
          EXPECT_EQ(bits(r4[k]), bits(quant::dot_f32_ref(wd[size_t(k)].data(), xp[2], n))) << k;
          EXPECT_EQ(bits(x8[k]), bits(quant::dot_f32_ref(wd[2].data(), xp[k], n))) << "rows2 row 0 token " << k;
          EXPECT_EQ(bits(x8[4 + k]), bits(quant::dot_f32_ref(wd[3].data(), xp[k], n))) << "rows2 row 1 token " << k;
        }
      }
    }
  }
}

/// A random finite fp16 bit pattern: normal (exponent 2^-9..2^5), sometimes subnormal or zero,
/// either sign.
uint16_t random_fp16(std::mt19937_64& rng) {
  const uint32_t r = uint32_t(rng());
  const uint16_t sign = uint16_t(r & 0x8000u), man = uint16_t((r >> 1) & 0x3FFu);
  switch ((r >> 16) % 16) {
    case 0: return uint16_t(sign | man);  // subnormal (or zero when man == 0)
    case 1: return sign;                  // +-0
    default: return uint16_t(sign | (6 + (r >> 20) % 15) << 10 | man);
  }
}

/// `nb` random 256-element blocks of a super-block type (Q2_K, IQ2_XXS, IQ2_XS, IQ1_S, IQ1_M;
/// layouts in kernels/quant/blocks.h) at byte 1 of the returned buffer (an odd start): random
/// bytes (every code, sign and sub-scale field is full-width, so all bits are valid), fp16
/// super-scales from random_fp16, and the grid and sign indices swept in order from `first`
/// (grid index k of the row = (first + k) mod the grid size: nb >= grid size / 32 covers every
/// entry; sign index k = (first + k) mod 128).
std::vector<uint8_t> random_superblocks(GgmlType type, int64_t nb, int first, std::mt19937_64& rng) {
  const size_t bs = size_t(cpu::row_bytes(type, 256));
  std::vector<uint8_t> buf(1 + bs * size_t(nb));
  for (auto& b : buf) b = uint8_t(rng());
  auto put16 = [&](uint8_t* p, uint32_t v) { p[0] = uint8_t(v), p[1] = uint8_t(v >> 8); };
  auto get16 = [](const uint8_t* p) { return uint32_t(p[0] | p[1] << 8); };
  uint32_t k = uint32_t(first);
  for (int64_t blk = 0; blk < nb; ++blk) {
    uint8_t* b = buf.data() + 1 + size_t(blk) * bs;
    for (int g = 0; g < 8; ++g) {
      for (int l = 0; l < 4; ++l, ++k) {
        switch (type) {
          case GgmlType::IQ2_XXS: {  // a0 byte l = grid index, a1 bits 7l.. = sign index
            b[2 + 8 * g + l] = uint8_t(k);
            uint8_t* a1 = b + 6 + 8 * g;
            uint32_t w = get16(a1) | get16(a1 + 2) << 16;
            w = (w & ~(127u << (7 * l))) | (k & 127) << (7 * l);
            put16(a1, w), put16(a1 + 2, w >> 16);
            break;
          }
          case GgmlType::IQ2_XS: put16(b + 2 + 2 * (4 * g + l), (k & 511) | (k & 127) << 9); break;
          case GgmlType::IQ1_S: {
            b[2 + 4 * g + l] = uint8_t(k);
            uint8_t* qh = b + 34 + 2 * g;
            put16(qh, (get16(qh) & ~(7u << (3 * l))) | ((k >> 8) & 7) << (3 * l));
            break;
          }
          case GgmlType::IQ1_M: {
            b[4 * g + l] = uint8_t(k);
            uint8_t& qh = b[32 + 2 * g + l / 2];
            const int sh = (l & 1) ? 4 : 0;
            qh = uint8_t((qh & ~(7 << sh)) | ((k >> 8) & 7) << sh);
            break;
          }
          default: break;  // Q2_K: every byte pattern is a valid code / scale
        }
      }
    }
    if (type == GgmlType::Q2_K) {
      put16(b + 80, random_fp16(rng)), put16(b + 82, random_fp16(rng));
    } else if (type == GgmlType::IQ1_M) {  // fp16 bits in the top nibbles of the four scale words
      const uint32_t d = random_fp16(rng);
      for (int w = 0; w < 4; ++w) put16(b + 48 + 2 * w, (get16(b + 48 + 2 * w) & 0x0FFF) | ((d >> (4 * w)) & 0xF) << 12);
    } else {
      put16(b, random_fp16(rng));
    }
  }
  return buf;
}

TEST(DotF32, FusedSuperBlockRowsEqualDecodeThenReference) {
  ModeGuard g;
  std::mt19937_64 rng(2026);
  int fused_families = 0;
  for (SimdMode m : {SimdMode::ForceScalar, SimdMode::Avx2, SimdMode::Avx512Vnni}) {
    cpu::set_simd_mode(m);
    if (m != SimdMode::ForceScalar && cpu::selected_backend() == cpu::DotBackend::Scalar) continue;
    const bool simd = cpu::selected_backend() != cpu::DotBackend::Scalar;
    fused_families += simd ? 1 : 0;
    for (GgmlType type : {GgmlType::Q2_K, GgmlType::IQ2_XXS, GgmlType::IQ2_XS, GgmlType::IQ1_S, GgmlType::IQ1_M}) {
      ASSERT_TRUE(cpu::can_dot_row_f32(type));
      EXPECT_EQ(cpu::has_fused_dot_f32(type), simd);
      // 64 blocks = 2048 grid indices (the largest grid, iq1s) in one row; odd and small counts.
      for (int64_t nb : {1, 2, 3, 5, 9, 64}) {
        const int64_t n = nb * 256;
        std::vector<std::vector<uint8_t>> w;
        std::vector<std::vector<float>> wd, x;
        for (int k = 0; k < 4; ++k) {
          w.push_back(random_superblocks(type, nb, int(rng() % 2048), rng));
          wd.emplace_back(size_t(n));
          cpu::dequantize_row(type, w[size_t(k)].data() + 1, wd[size_t(k)].data(), n);
          x.push_back(spread(n, rng));
        }
        const void* wp[4] = {w[0].data() + 1, w[1].data() + 1, w[2].data() + 1, w[3].data() + 1};
        const float* xp[4] = {x[0].data(), x[1].data() + 1, x[2].data(), x[3].data() + 1};
        SCOPED_TRACE(::testing::Message() << "mode " << int(m) << " type " << ds4::ggml_type_name(uint32_t(type)) << " n " << n);
        const float r0 = quant::dot_f32_ref(wd[0].data(), xp[0], n);
        EXPECT_TRUE(std::isfinite(r0));
        EXPECT_EQ(bits(cpu::dot_row_f32(type, wp[0], xp[0], n)), bits(r0));
        float x4[4], r4[4];
        cpu::dot_row_f32_x4(type, wp[1], xp, n, x4);
        cpu::dot_rows4_f32(type, wp, xp[2], n, r4);
        float x8[8];
        cpu::dot_rows2_f32_x4(type, wp + 2, xp, n, x8);  // rows 2, 3 against all four tokens
        for (int k = 0; k < 4; ++k) {
          EXPECT_EQ(bits(x4[k]), bits(quant::dot_f32_ref(wd[1].data(), xp[k], n))) << k;
          EXPECT_EQ(bits(r4[k]), bits(quant::dot_f32_ref(wd[size_t(k)].data(), xp[2], n))) << k;
          EXPECT_EQ(bits(x8[k]), bits(quant::dot_f32_ref(wd[2].data(), xp[k], n))) << "rows2 row 0 token " << k;
          EXPECT_EQ(bits(x8[4 + k]), bits(quant::dot_f32_ref(wd[3].data(), xp[k], n))) << "rows2 row 1 token " << k;
        }
      }
    }
  }
  if (cpu::cpu_avx2_usable()) { EXPECT_GE(fused_families, 1); }
}

// Each fused value, not only the sums: a row whose x is the unit vector e_i gives dot = the
// decoded element i exactly (fma(w, 1, 0) = w; every other lane adds +-0), so the fused kernels
// must reproduce dequantize_row's value of every element of every block (signed zeros aside:
// +0 + -0 = +0 in the butterfly, so the sign of a zero element is not checked).
TEST(DotF32, FusedBlockElementsEqualDecode) {
  ModeGuard g;
  std::mt19937_64 rng(7);
  for (SimdMode m : {SimdMode::Avx2, SimdMode::Avx512Vnni}) {
    cpu::set_simd_mode(m);
    if (cpu::selected_backend() == cpu::DotBackend::Scalar) GTEST_SKIP() << "no SIMD family on this CPU";
    for (GgmlType type : {GgmlType::Q2_K, GgmlType::IQ2_XXS, GgmlType::IQ2_XS, GgmlType::IQ1_S, GgmlType::IQ1_M,
                          GgmlType::NVFP4, GgmlType::NVFP4_S2}) {
      const bool super = ds4::ggml_type_geometry(uint32_t(type))->block_elems == 256;
      const int64_t n = 512;
      auto w = super ? random_superblocks(type, 2, int(rng() % 2048), rng) : random_blocks(type, n, rng);
      const uint8_t* wp = super ? w.data() + 1 : w.data();
      std::vector<float> wd(static_cast<size_t>(n)), x(static_cast<size_t>(n), 0.0f);
      cpu::dequantize_row(type, wp, wd.data(), n);
      for (int64_t i = 0; i < n; ++i) {
        x[size_t(i)] = 1.0f;
        const float got = cpu::dot_row_f32(type, wp, x.data(), n);
        x[size_t(i)] = 0.0f;
        if (wd[size_t(i)] == 0.0f) {
          ASSERT_EQ(got, 0.0f) << "mode " << int(m) << " type " << int(type) << " i " << i;
        } else {
          ASSERT_EQ(bits(got), bits(wd[size_t(i)])) << "mode " << int(m) << " type " << int(type) << " i " << i;
        }
      }
    }
  }
}

// The F32 matmul (matmul_rows: 16-row blocks, 4 tokens per weight read, rows4 for the rest) gives
// y[t, r] = dot_f32(decode(W[r]), x[t]) = quant::dot_f32_ref of the decoded row whatever the number
// of tokens n (1..9: every split of x4 passes and leftover tokens) and the row range (odd r0, r1).
TEST(DotF32, MatmulRowsDoNotDependOnTokenCount) {
  ModeGuard g;
  std::mt19937_64 rng(77);
  for (SimdMode m : {SimdMode::ForceScalar, SimdMode::Avx2, SimdMode::Avx512Vnni}) {
    cpu::set_simd_mode(m);
    if (m != SimdMode::ForceScalar && cpu::selected_backend() == cpu::DotBackend::Scalar) continue;
    for (GgmlType type : {GgmlType::F32, GgmlType::F16, GgmlType::BF16, GgmlType::Q8_0, GgmlType::MXFP4,
                          GgmlType::F8_E4M3_R128, GgmlType::Q2_K, GgmlType::IQ2_XXS, GgmlType::IQ2_XS, GgmlType::IQ1_S,
                          GgmlType::IQ1_M, GgmlType::NVFP4, GgmlType::NVFP4_S2}) {
      const int64_t in = 256, out = 37;
      const int64_t rb = cpu::row_bytes(type, in);
      std::vector<uint8_t> w;
      for (int64_t r = 0; r < out; ++r) {
        const bool super = ds4::ggml_type_geometry(uint32_t(type))->block_elems == 256;
        auto row = type == GgmlType::F32 || type == GgmlType::F16 || type == GgmlType::BF16 ? random_row(type, in, rng)
                   : type == GgmlType::Q2_K ? std::vector<uint8_t>(size_t(rb))
                   : super                  ? random_superblocks(type, 1, int(rng() % 2048), rng)
                                            : random_blocks(type, in, rng);
        if (type == GgmlType::Q2_K) {
          auto f = spread(in, rng);
          cpu::quantize_row(type, f.data(), row.data(), in);
        } else if (super) {
          row.erase(row.begin());  // random_superblocks' data starts at byte 1
        }
        w.insert(w.end(), row.begin(), row.begin() + rb);
      }
      std::vector<float> wd(size_t(out * in));
      for (int64_t r = 0; r < out; ++r) cpu::dequantize_row(type, w.data() + r * rb, wd.data() + r * in, in);
      const cpu::WRows wr{type, w.data(), in, out, uint64_t(rb)};
      for (int64_t n = 1; n <= 9; ++n) {
        std::vector<float> x(size_t(n * in));
        for (int64_t t = 0; t < n; ++t) {
          auto v = spread(in, rng);
          std::copy_n(v.begin(), in, x.begin() + t * in);
        }
        std::vector<float> y(size_t(n * out), -1.0f);
        cpu::matmul_rows(wr, cpu::F32Rows{x.data(), in}, nullptr, n, false, cpu::F32Rows{y.data(), out}, 3, out);
        for (int64_t t = 0; t < n; ++t) {
          for (int64_t r = 0; r < 3; ++r) ASSERT_EQ(y[size_t(t * out + r)], -1.0f);  // outside [r0, r1)
          for (int64_t r = 3; r < out; ++r)
            ASSERT_EQ(bits(y[size_t(t * out + r)]), bits(quant::dot_f32_ref(wd.data() + r * in, x.data() + t * in, in)))
                << "mode " << int(m) << " type " << int(type) << " n " << n << " t " << t << " r " << r;
        }
      }
    }
  }
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
