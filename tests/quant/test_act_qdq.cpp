// kernels/quant/act_qdq.h (the QAT simulation's QDQ) and the ds4-internal encodings
// F8_E4M3_R128 / NVFP4_S2: rounding fixed points and ties, scale rule, Hadamard properties, and
// the internal blocks decoding to the values they were built from.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "kernels/cpu/quant_ref.h"
#include "kernels/quant/act_qdq.h"
#include "kernels/quant/blocks.h"
#include "kernels/quant/scalar_formats.h"

namespace ds4::quant {
namespace {

TEST(ActQdq, E4m3RoundFixesEveryCodeAndRoundsTiesToEven) {
  for (int c = 0; c < 256; ++c) {
    if ((c & 0x7F) == 0x7F) continue;  // NaN
    const float v = e4m3_to_f32(uint8_t(c));
    EXPECT_EQ(e4m3_round(v), v) << c;
  }
  // Midpoints between neighbouring positive codes go to the even code.
  for (int c = 0; c < 0x7E; ++c) {
    const float a = e4m3_to_f32(uint8_t(c)), b = e4m3_to_f32(uint8_t(c + 1));
    const float mid = 0.5f * (a + b);
    EXPECT_EQ(e4m3_round(mid), (c & 1) ? b : a) << c;
    EXPECT_EQ(e4m3_round(std::nextafter(mid, 0.0f)), a) << c;
    EXPECT_EQ(e4m3_round(std::nextafter(mid, 1e9f)), b) << c;
  }
  EXPECT_EQ(e4m3_round(448.0f), 448.0f);
  EXPECT_EQ(e4m3_round(-0.3f), -e4m3_round(0.3f));
}

TEST(ActQdq, E2m1RoundGridAndTies) {
  const float grid[8] = {0, 0.5f, 1, 1.5f, 2, 3, 4, 6};
  for (float g : grid) EXPECT_EQ(e2m1_round(g), g);
  EXPECT_EQ(e2m1_round(0.25f), 0.0f);   // tie -> code 0 (even)
  EXPECT_EQ(e2m1_round(0.75f), 1.0f);   // tie -> code 2
  EXPECT_EQ(e2m1_round(1.25f), 1.0f);
  EXPECT_EQ(e2m1_round(1.75f), 2.0f);
  EXPECT_EQ(e2m1_round(2.5f), 2.0f);
  EXPECT_EQ(e2m1_round(3.5f), 4.0f);
  EXPECT_EQ(e2m1_round(5.0f), 4.0f);
  EXPECT_EQ(e2m1_round(5.01f), 6.0f);
  EXPECT_EQ(e2m1_round(-2.6f), -3.0f);
}

TEST(ActQdq, Pow2CeilIsExact) {
  EXPECT_EQ(pow2_ceil(1.0f), 1.0f);
  EXPECT_EQ(pow2_ceil(1.0000001f), 2.0f);
  EXPECT_EQ(pow2_ceil(0.75f), 1.0f);
  EXPECT_EQ(pow2_ceil(0.5f), 0.5f);
  EXPECT_EQ(pow2_ceil(3e-30f), std::ldexp(1.0f, -98));
}

TEST(ActQdq, BlockScalesFollowTheReferenceRule) {
  // Block 0: amax 448 * 2^-3 -> scale 2^-3 exactly, values already on the grid survive.
  std::vector<float> x(128);
  for (int i = 0; i < 127; ++i) x[size_t(i)] = e4m3_to_f32(uint8_t(i)) * 0.125f;  // 0x7F is NaN
  x[5] = 56.0f;  // 448 / 8
  std::vector<float> y = x;
  qdq_fp8_e4m3(y.data(), 128, 128);
  for (int i = 0; i < 128; ++i) EXPECT_EQ(y[size_t(i)], x[size_t(i)]) << i;
  // A value off the grid moves to the nearest grid point of its block's scale.
  std::vector<float> z = {100.0f, 1.0f};
  z.resize(64, 0.0f);
  qdq_fp8_e4m3(z.data(), 64, 64);  // s = 2^ceil(log2(100/448)) = 0.25: 100/s = 400, the tie of 384 and
                                   // 416 -> 384 (even), so 96; 1/s = 4 exactly
  EXPECT_EQ(z[0], 96.0f);
  EXPECT_EQ(z[1], 1.0f);
  std::vector<float> w = {5.0f, 0.9f, -0.2f};
  w.resize(32, 0.0f);
  qdq_fp4_e2m1(w.data(), 32, 32);  // s = 2^ceil(log2(5/6)) = 1: 5 -> 4 (tie to even), 0.9 -> 1, -0.2 -> -0
  EXPECT_EQ(w[0], 4.0f);
  EXPECT_EQ(w[1], 1.0f);
  EXPECT_EQ(w[2], 0.0f);
  // All-zero blocks stay zero (amax floor).
  std::vector<float> zero(128, 0.0f);
  qdq_fp8_e4m3(zero.data(), 128, 128);
  for (float v : zero) EXPECT_EQ(v, 0.0f);
}

TEST(ActQdq, HadamardIsOrthonormalAndInvolutive) {
  std::mt19937 rng(7);
  std::normal_distribution<float> nd;
  std::vector<float> x(128), y;
  for (auto& v : x) v = nd(rng);
  y = x;
  hadamard_normalized(y.data(), 128);
  double nx = 0, ny = 0;
  for (size_t i = 0; i < x.size(); ++i) { nx += double(x[i]) * x[i]; ny += double(y[i]) * y[i]; }
  EXPECT_NEAR(ny, nx, 1e-4 * nx);
  hadamard_normalized(y.data(), 128);
  for (size_t i = 0; i < x.size(); ++i) EXPECT_NEAR(y[i], x[i], 1e-5f);
  std::vector<float> e(8, 0.0f);
  e[0] = 1.0f;
  hadamard_normalized(e.data(), 8);  // first column of H_8 / sqrt(8): all equal
  for (float v : e) EXPECT_FLOAT_EQ(v, 1.0f / std::sqrt(8.0f));
}

TEST(InternalTypes, F8R128AndNvfp4S2Decode) {
  // F8_E4M3_R128: scale byte then 128 E4M3 bytes.
  BlockF8R128 b{};
  b.e = 120;  // 2^-7
  for (int j = 0; j < 128; ++j) b.qs[j] = uint8_t((j * 37) & 0xFF) == 0x7F ? 0 : uint8_t((j * 37) & 0xFF);
  for (int j = 0; j < 128; ++j) if ((b.qs[j] & 0x7F) == 0x7F) b.qs[j] = 0;
  std::vector<float> y(128);
  cpu::dequantize_row(GgmlType::F8_E4M3_R128, &b, y.data(), 128);
  for (int j = 0; j < 128; ++j) EXPECT_EQ(y[size_t(j)], e4m3_to_f32(b.qs[j]) * std::ldexp(1.0f, -7)) << j;
  // NVFP4_S2: ggml NVFP4 decode times the tensor scale.
  BlockNVFP4S2 n{};
  const float s2 = 0.375f;
  std::memcpy(n.s2, &s2, 4);
  for (int s = 0; s < 4; ++s) n.b.d[s] = uint8_t(0x38 + s);  // E4M3 1.0, 1.125, 1.25, 1.375
  for (int j = 0; j < 32; ++j) n.b.qs[j] = uint8_t(j * 7);
  std::vector<float> a(64), c(64);
  cpu::dequantize_row(GgmlType::NVFP4_S2, &n, a.data(), 64);
  cpu::dequantize_row(GgmlType::NVFP4, &n.b, c.data(), 64);
  for (int j = 0; j < 64; ++j) EXPECT_EQ(a[size_t(j)], c[size_t(j)] * s2) << j;
  // Its Q8_1 dot: the NVFP4 dot of the same blocks times s2 (exact here: s2 is a power of two).
  std::vector<BlockNVFP4S2> row(4);
  std::vector<BlockNVFP4> plain(4);
  for (int k = 0; k < 4; ++k) {
    row[size_t(k)] = n;
    const float s = 0.25f;
    std::memcpy(row[size_t(k)].s2, &s, 4);
    for (int j = 0; j < 32; ++j) row[size_t(k)].b.qs[j] = uint8_t(j * 13 + k * 5);
    plain[size_t(k)] = row[size_t(k)].b;
  }
  std::vector<float> act(256);
  for (int j = 0; j < 256; ++j) act[size_t(j)] = std::sin(0.37f * float(j)) * 3.0f;
  std::vector<uint8_t> q(256 / 32 * 36);
  cpu::quantize_row_q8_1(act.data(), q.data(), 256);
  ASSERT_TRUE(cpu::can_dot_q8_1(GgmlType::NVFP4_S2));
  EXPECT_EQ(cpu::vec_dot_q8_1(GgmlType::NVFP4_S2, row.data(), q.data(), 256),
            cpu::vec_dot_q8_1(GgmlType::NVFP4, plain.data(), q.data(), 256) * 0.25f);
  EXPECT_FALSE(cpu::can_dot_q8_1(GgmlType::F8_E4M3_R128));  // FP8 takes the F32 path
  EXPECT_TRUE(ggml_type_geometry(uint32_t(GgmlType::F8_E4M3_R128))->internal);
  EXPECT_FALSE(ggml_type_geometry(uint32_t(GgmlType::MXFP4))->internal);
}

}  // namespace
}  // namespace ds4::quant
