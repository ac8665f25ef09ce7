// tests/quant/test_scalar_formats.cpp — fp16/bf16/E8M0/E4M3/UE4M3/E2M1 conversions against
// formulas written independently here (ldexp of the IEEE / OCP MX definitions); encoders against
// brute-force nearest-even search over the decoded code tables.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "kernels/quant/scalar_formats.h"
#include "tests/quant/quant_test_util.h"

namespace ds4 {
namespace {

using namespace ds4::quant;

double fp16_formula(uint16_t h) {
  const int s = h >> 15, e = (h >> 10) & 31, m = h & 1023;
  const double mag = e == 0 ? std::ldexp(double(m), -24) : std::ldexp(1.0 + m / 1024.0, e - 15);
  return s ? -mag : mag;
}

TEST(ScalarFormats, Fp16DecodeAllPatterns) {
  for (int v = 0; v < 65536; ++v) {
    const uint16_t h = uint16_t(v);
    const float f = fp16_to_f32(h);
    const int e = (h >> 10) & 31;
    if (e == 31) {
      if (h & 1023) {
        EXPECT_TRUE(std::isnan(f)) << v;
      } else {
        EXPECT_EQ(f, (h & 0x8000) ? -INFINITY : INFINITY) << v;
      }
      continue;
    }
    EXPECT_EQ(double(f), fp16_formula(h)) << v;
    EXPECT_EQ(std::signbit(f), (h & 0x8000) != 0) << v;
    EXPECT_EQ(f32_to_fp16(f), h) << "round trip " << v;
  }
}

TEST(ScalarFormats, Fp16EncodeRoundsToNearestEven) {
  // Midpoints between adjacent finite halves (exact in fp32) round to the even neighbour;
  // a hair above/below rounds to the nearer one.
  for (int v = 0; v < 0x7BFF; ++v) {
    const double a = fp16_formula(uint16_t(v)), b = fp16_formula(uint16_t(v + 1));
    const float mid = float((a + b) / 2);
    ASSERT_EQ(double(mid), (a + b) / 2);
    const uint16_t even = (v & 1) ? uint16_t(v + 1) : uint16_t(v);
    EXPECT_EQ(f32_to_fp16(mid), even) << v;
    EXPECT_EQ(f32_to_fp16(-mid), uint16_t(even | 0x8000)) << v;
    EXPECT_EQ(f32_to_fp16(std::nextafter(mid, 0.0f)), uint16_t(v)) << v;
    EXPECT_EQ(f32_to_fp16(std::nextafter(mid, 1e9f)), uint16_t(v + 1)) << v;
  }
  EXPECT_EQ(f32_to_fp16(65519.0f), 0x7BFF);
  EXPECT_EQ(f32_to_fp16(65520.0f), 0x7C00);  // midpoint to "65536" rounds to inf
  EXPECT_EQ(f32_to_fp16(1e10f), 0x7C00);
  EXPECT_EQ(f32_to_fp16(-INFINITY), 0xFC00);
  EXPECT_EQ(f32_to_fp16(std::ldexp(1.0f, -25)), 0x0000);               // tie to even (0)
  EXPECT_EQ(f32_to_fp16(std::nextafter(std::ldexp(1.0f, -25), 1.0f)), 0x0001);
  EXPECT_EQ(f32_to_fp16(1e-30f), 0x0000);
  EXPECT_EQ(f32_to_fp16(-0.0f), 0x8000);
  const uint16_t nan = f32_to_fp16(NAN);
  EXPECT_EQ(nan & 0x7C00, 0x7C00);
  EXPECT_NE(nan & 0x3FF, 0);
}

#if defined(__FLT16_MAX__)
TEST(ScalarFormats, Fp16EncodeMatchesCompilerFloat16) {
  std::mt19937_64 rng(7);
  for (int i = 0; i < 2000000; ++i) {
    uint32_t u = uint32_t(rng());
    // Concentrate on the fp16 range: exponents 100..145 (subnormal to overflow).
    u = (u & 0x807FFFFFu) | (uint32_t(100 + (rng() % 46)) << 23);
    const float f = f32_from_bits(u);
    const _Float16 h = static_cast<_Float16>(f);
    uint16_t hb;
    std::memcpy(&hb, &h, 2);
    ASSERT_EQ(f32_to_fp16(f), hb) << std::hex << u;
  }
}
#endif

TEST(ScalarFormats, Bf16) {
  for (int v = 0; v < 65536; ++v) {
    const float f = bf16_to_f32(uint16_t(v));
    EXPECT_EQ(f32_bits(f), uint32_t(v) << 16);
    if (!std::isnan(f)) {
      EXPECT_EQ(f32_to_bf16(f), uint16_t(v));
    }
  }
  EXPECT_EQ(f32_to_bf16(f32_from_bits(0x3F808000u)), 0x3F80);  // tie, even stays
  EXPECT_EQ(f32_to_bf16(f32_from_bits(0x3F818000u)), 0x3F82);  // tie, odd rounds up
  EXPECT_EQ(f32_to_bf16(f32_from_bits(0x3F808001u)), 0x3F81);
  EXPECT_TRUE(std::isnan(bf16_to_f32(f32_to_bf16(f32_from_bits(0x7F800001u)))));  // stays NaN
}

TEST(ScalarFormats, E8M0) {
  for (int e = 0; e < 255; ++e) {
    EXPECT_EQ(double(e8m0_to_f32(uint8_t(e))), std::ldexp(1.0, e - 127)) << e;
    EXPECT_EQ(double(e8m0_to_f32_half(uint8_t(e))), std::ldexp(1.0, e - 128)) << e;
  }
  EXPECT_EQ(e8m0_to_f32(255), INFINITY);                       // ggml_e8m0_to_fp32
  EXPECT_EQ(double(e8m0_to_f32_half(255)), std::ldexp(1.0, 127));  // ggml _half variant
}

TEST(ScalarFormats, E4M3AndUE4M3) {
  for (int v = 0; v < 256; ++v) {
    const int s = v >> 7, e = (v >> 3) & 15, m = v & 7;
    const float f = e4m3_to_f32(uint8_t(v));
    if ((v & 0x7F) == 0x7F) {
      EXPECT_TRUE(std::isnan(f)) << v;
    } else {
      const double mag = e == 0 ? std::ldexp(double(m), -9) : std::ldexp(1.0 + m / 8.0, e - 7);
      EXPECT_EQ(double(f), s ? -mag : mag) << v;
      // Every E4M3 value is exact in fp16 (quant-formats.md §2).
      EXPECT_EQ(fp16_to_f32(f32_to_fp16(f)), f) << v;
    }
    const double umag = e == 0 ? std::ldexp(double(m), -9) : std::ldexp(1.0 + m / 8.0, e - 7);
    const double want = (v == 0 || v == 0x7F) ? 0.0 : 0.5 * umag;  // bit 7 ignored (ggml CPU)
    EXPECT_EQ(double(ue4m3_to_f32_half(uint8_t(v))), want) << v;
  }
  EXPECT_EQ(e4m3_to_f32(0x7E), 448.0f);
}

TEST(ScalarFormats, E2M1) {
  const float mag[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};
  for (int c = 0; c < 16; ++c) {
    const float f = e2m1_to_f32(uint8_t(c));
    EXPECT_EQ(f, c < 8 ? mag[c] : -mag[c - 8]) << c;
    EXPECT_EQ(std::signbit(f), c >= 8) << c;
  }
}

/// Brute-force round-to-nearest-even onto a sorted table of non-negative values (code = index),
/// saturating above the last entry; ties go to the even code.
int nearest_even(const std::vector<double>& vals, double a) {
  if (a >= vals.back()) return int(vals.size()) - 1;
  int best = 0;
  for (int c = 1; c < int(vals.size()); ++c) {
    const double db = std::fabs(vals[size_t(best)] - a), dc = std::fabs(vals[size_t(c)] - a);
    if (dc < db || (dc == db && (c & 1) == 0)) best = c;
  }
  return best;
}

std::vector<double> probe_points(const std::vector<double>& vals) {
  std::vector<double> p;
  for (size_t i = 0; i < vals.size(); ++i) {
    p.push_back(vals[i]);
    if (i + 1 < vals.size()) {
      const float mid = float((vals[i] + vals[i + 1]) / 2);
      p.push_back(mid);
      p.push_back(std::nextafter(mid, 0.0f));
      p.push_back(std::nextafter(mid, 1e30f));
    }
  }
  p.push_back(vals.back() * 1.01);
  p.push_back(1e30);
  std::mt19937_64 rng(9);
  std::uniform_real_distribution<double> u(-14, 9.5);
  for (int i = 0; i < 20000; ++i) p.push_back(double(float(std::exp2(u(rng)))));
  return p;
}

TEST(ScalarFormats, E4M3EncodeNearestEvenSaturating) {
  std::vector<double> vals;
  for (int c = 0; c <= 0x7E; ++c) vals.push_back(double(e4m3_to_f32(uint8_t(c))));
  for (double a : probe_points(vals)) {
    const int want = nearest_even(vals, a);
    EXPECT_EQ(int(f32_to_e4m3(float(a))), want) << a;
    EXPECT_EQ(int(f32_to_e4m3(-float(a))), want | 0x80) << a;
  }
  EXPECT_EQ(f32_to_e4m3(INFINITY), 0x7E);
  EXPECT_EQ(f32_to_e4m3(-INFINITY), 0xFE);
  EXPECT_EQ(f32_to_e4m3(NAN) & 0x7F, 0x7F);
  for (int c = 0; c < 256; ++c)
    if ((c & 0x7F) != 0x7F) {
      EXPECT_EQ(int(f32_to_e4m3(e4m3_to_f32(uint8_t(c)))), c);
    }
}

TEST(ScalarFormats, E2M1EncodeNearestEvenSaturating) {
  std::vector<double> vals;
  for (int c = 0; c < 8; ++c) vals.push_back(double(e2m1_to_f32(uint8_t(c))));
  for (double a : probe_points(vals)) {
    const int want = nearest_even(vals, a);
    EXPECT_EQ(int(f32_to_e2m1(float(a))), want) << a;
    EXPECT_EQ(int(f32_to_e2m1(-float(a))), want | 8) << a;
  }
  for (int c = 0; c < 16; ++c) EXPECT_EQ(int(f32_to_e2m1(e2m1_to_f32(uint8_t(c)))), c);
}

}  // namespace
}  // namespace ds4
