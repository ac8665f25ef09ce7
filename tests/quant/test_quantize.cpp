// tests/quant/test_quantize.cpp — quantizers: error bounds on Gaussian data, round-trip stability,
// the Q8_1 / Q8_K activation contracts, DeepSeek FP8/FP4 decoding and the FP4 -> MXFP4 repack.
#include <gtest/gtest.h>

#include <cmath>

#include "kernels/cpu/quant_ref.h"
#include "kernels/quant/blocks.h"
#include "kernels/quant/decode.h"
#include "kernels/quant/grids.h"
#include "tests/quant/quant_test_util.h"

namespace ds4 {
namespace {

using namespace ds4::quant;

double rel_rms(const std::vector<float>& x, const std::vector<float>& y) {
  double num = 0, den = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    num += (double(x[i]) - y[i]) * (double(x[i]) - y[i]);
    den += double(x[i]) * x[i];
  }
  return std::sqrt(num / den);
}

std::vector<float> round_trip(GgmlType t, const std::vector<float>& x) {
  const int64_t n = int64_t(x.size());
  std::vector<uint8_t> q(size_t(cpu::row_bytes(t, n)));
  cpu::quantize_row(t, x.data(), q.data(), n);
  std::vector<float> y(x.size());
  cpu::dequantize_row(t, q.data(), y.data(), n);
  return y;
}

// Relative RMS error bounds for Gaussian data, quantize -> dequantize (fixed seeds; printed).
// Derivation: a uniform quantizer with step D has RMS error D/sqrt(12). Q8_0: step amax/127 with
// amax of 32 Gaussians ~2.1 sigma gives ~0.0048 (measured 0.0053, the fp16 scale and rounding of
// amax itself add a little): bound 0.0065. MXFP4: E2M1 levels {0,.5,1,1.5,2,3,4,6}*2^k with the
// power-of-two scale putting amax in [4,8)*2^k; measured 0.115 (same algorithm as ggml): bound
// 0.13. 2-bit formats: the Lloyd-Max optimum of a 4-level scalar quantizer for a Gaussian has
// relative RMS 0.343 (MSE 0.1175); per-16/32 scales beat it on Gaussian blocks: measured Q2_K
// 0.27, IQ2_XS 0.29, IQ2_XXS 0.33 (one scale per 32, 256-entry grid): bounds 0.33 / 0.35 / 0.40.
// Ternary formats: Lloyd-Max 3-level optimum 0.436 (MSE 0.190); measured IQ1_S 0.45-0.46 (one
// delta per 32, 3-bit scales), IQ1_M 0.41: bounds 0.55 / 0.50. A broken encoder (wrong packing,
// wrong scale) lands far above these (>= 0.7), so the bounds discriminate.
struct QuantBound {
  GgmlType type;
  double bound;
  int64_t n;  ///< elements tested (search quantizers are slow under sanitizers)
};

class QuantizerError : public ::testing::TestWithParam<QuantBound> {};

TEST_P(QuantizerError, RelativeRmsBelowBound) {
  const auto c = GetParam();
  std::mt19937_64 rng(11 + uint64_t(c.type));
  for (float sigma : {1.0f, 0.02f}) {
    const auto x = test::gaussian(rng, size_t(c.n), sigma);
    const auto y = round_trip(c.type, x);
    const double e = rel_rms(x, y);
    std::printf("  %s sigma=%g: relative RMS error %.4f (bound %.4f)\n",
                std::string(ggml_type_name(uint32_t(c.type))).c_str(), double(sigma), e, c.bound);
    EXPECT_LT(e, c.bound);
    EXPECT_GT(e, 0.0);
  }
}

INSTANTIATE_TEST_SUITE_P(
    Types, QuantizerError,
    ::testing::Values(QuantBound{GgmlType::Q8_0, 0.0065, 32 * 1024}, QuantBound{GgmlType::MXFP4, 0.13, 32 * 1024},
                      QuantBound{GgmlType::Q2_K, 0.33, 256 * 64}, QuantBound{GgmlType::IQ2_XXS, 0.40, 256 * 32},
                      QuantBound{GgmlType::IQ2_XS, 0.35, 256 * 32}, QuantBound{GgmlType::IQ1_S, 0.55, 256 * 8},
                      QuantBound{GgmlType::IQ1_M, 0.50, 256 * 8}),
    [](const auto& info) { return std::string(ggml_type_name(uint32_t(info.param.type))); });


template <class Block>
std::vector<uint8_t> random_bytes(std::mt19937_64& rng, int nblocks) {
  std::vector<uint8_t> v(sizeof(Block) * size_t(nblocks));
  for (auto& b : v) b = uint8_t(rng());
  return v;
}

template <class Block>
Block* block_at(std::vector<uint8_t>& v, int i) {
  return reinterpret_cast<Block*>(v.data() + sizeof(Block) * size_t(i));
}

/// decode(quantize(decode(B))) == decode(B), element by element (canonical bits).
void expect_value_round_trip(GgmlType t, const std::vector<uint8_t>& blocks, int64_t n) {
  std::vector<float> y(static_cast<size_t>(n)), y2(static_cast<size_t>(n));
  cpu::dequantize_row(t, blocks.data(), y.data(), n);
  std::vector<uint8_t> q(blocks.size());
  cpu::quantize_row(t, y.data(), q.data(), n);
  cpu::dequantize_row(t, q.data(), y2.data(), n);
  int64_t bad = 0;
  for (int64_t i = 0; i < n; ++i)
    if (test::canonical_bits(y[size_t(i)]) != test::canonical_bits(y2[size_t(i)]) && ++bad <= 3)
      ADD_FAILURE() << ggml_type_name(uint32_t(t)) << " element " << i << ": " << y[size_t(i)] << " -> "
                    << y2[size_t(i)];
  EXPECT_EQ(bad, 0) << ggml_type_name(uint32_t(t));
}

/// First grid entry (of `count`) having byte value `v` at some position.
int grid_entry_with(uint64_t (*grid)(int), int count, int v, bool is_signed) {
  for (int i = 0; i < count; ++i)
    for (int j = 0; j < 8; ++j)
      if ((is_signed ? grid_i8(grid(i), j) : grid_u8(grid(i), j)) == v) return i;
  return -1;
}

TEST(QuantizeRoundTrip, Q8_0BytesStable) {
  // Blocks containing a +-127 code re-quantize to the same bytes (d = amax/127 is reproduced).
  std::mt19937_64 rng(21);
  const int nb = 2000;
  auto v = random_bytes<BlockQ8_0>(rng, nb);
  for (int i = 0; i < nb; ++i) {
    auto* b = block_at<BlockQ8_0>(v, i);
    b->d = test::random_scale_fp16(rng, -14, 10);
    for (auto& q : b->qs)
      if (q == -128) q = -127;
    b->qs[rng() % 32] = (rng() & 1) ? 127 : -127;
  }
  std::vector<float> y(32 * size_t(nb));
  cpu::dequantize_row(GgmlType::Q8_0, v.data(), y.data(), 32 * nb);
  std::vector<uint8_t> q(v.size());
  cpu::quantize_row(GgmlType::Q8_0, y.data(), q.data(), 32 * nb);
  EXPECT_EQ(q, v);
}

TEST(QuantizeRoundTrip, MXFP4BytesStable) {
  // Blocks whose largest code has |value| >= 8 (codes 6, 7, 14, 15) and no -0 code (8, which
  // canonicalises to 0) re-quantize to the same bytes.
  std::mt19937_64 rng(22);
  const int nb = 2000;
  auto v = random_bytes<BlockMXFP4>(rng, nb);
  for (int i = 0; i < nb; ++i) {
    auto* b = block_at<BlockMXFP4>(v, i);
    b->e = uint8_t(10 + rng() % 230);
    for (auto& q : b->qs) {
      if ((q & 0xF) == 8) q = uint8_t(q & 0xF0);
      if ((q >> 4) == 8) q = uint8_t(q & 0x0F);
    }
    const uint8_t big[4] = {6, 7, 14, 15};
    b->qs[rng() % 16] = uint8_t((b->qs[0] & 0xF0) | big[rng() % 4]);
  }
  std::vector<float> y(32 * size_t(nb));
  cpu::dequantize_row(GgmlType::MXFP4, v.data(), y.data(), 32 * nb);
  std::vector<uint8_t> q(v.size());
  cpu::quantize_row(GgmlType::MXFP4, y.data(), q.data(), 32 * nb);
  EXPECT_EQ(q, v);
}

// The search quantizers fix the super-scale from the block maximum, so decoded blocks whose
// maximum is the largest representable multiple of d are reproduced value-for-value.
TEST(QuantizeRoundTrip, Q2_KValuesStable) {
  std::mt19937_64 rng(23);
  const int nb = 64;
  auto v = random_bytes<BlockQ2_K>(rng, nb);
  for (int i = 0; i < nb; ++i) {
    auto* b = block_at<BlockQ2_K>(v, i);
    b->d = test::random_scale_fp16(rng);
    b->dmin = test::random_scale_fp16(rng);
    for (int k = 0; k < 16; ++k) {  // element 16k has code 0 (its sub-block minimum is -dmin*m)
      const int e = 16 * k, h = e / 128, j = (e % 128) / 32, l = e % 32;
      b->qs[32 * h + l] = uint8_t(b->qs[32 * h + l] & ~(3 << (2 * j)));
    }
    b->scales[0] = 0xFF;                      // sub-block 0: scale 15, min 15
    b->qs[1] = uint8_t(b->qs[1] | 3);         // element 1 (sub-block 0) has code 3
  }
  expect_value_round_trip(GgmlType::Q2_K, v, 256 * nb);
}

TEST(QuantizeRoundTrip, IQ2_XXSValuesStable) {
  std::mt19937_64 rng(24);
  const int nb = 16;
  const int i43 = grid_entry_with(iq2xxs_grid, 256, 43, false);
  ASSERT_GE(i43, 0);
  auto v = random_bytes<BlockIQ2_XXS>(rng, nb);
  for (int i = 0; i < nb; ++i) {
    auto* b = block_at<BlockIQ2_XXS>(v, i);
    b->d = test::random_scale_fp16(rng);
    b->qs[0] = uint16_t((b->qs[0] & 0xFF00) | i43);  // group 0 entry 0 has a 43
    b->qs[3] = uint16_t(b->qs[3] | 0xF000);         // group 0 scale s = 15
  }
  expect_value_round_trip(GgmlType::IQ2_XXS, v, 256 * nb);
}

TEST(QuantizeRoundTrip, IQ2_XSValuesStable) {
  std::mt19937_64 rng(25);
  const int nb = 8;
  const int i43 = grid_entry_with(iq2xs_grid, 512, 43, false);
  ASSERT_GE(i43, 0);
  auto v = random_bytes<BlockIQ2_XS>(rng, nb);
  for (int i = 0; i < nb; ++i) {
    auto* b = block_at<BlockIQ2_XS>(v, i);
    b->d = test::random_scale_fp16(rng);
    b->qs[0] = uint16_t((b->qs[0] & 0xFE00) | i43);
    b->scales[0] = uint8_t(b->scales[0] | 0x0F);
  }
  expect_value_round_trip(GgmlType::IQ2_XS, v, 256 * nb);
}

TEST(QuantizeRoundTrip, IQ1_SValuesStable) {
  std::mt19937_64 rng(26);
  const int nb = 4;
  const int ip = grid_entry_with(iq1s_grid, 2048, 1, true);
  ASSERT_GE(ip, 0);
  auto v = random_bytes<BlockIQ1_S>(rng, nb);
  for (int i = 0; i < nb; ++i) {
    auto* b = block_at<BlockIQ1_S>(v, i);
    b->d = test::random_scale_fp16(rng);
    b->qs[0] = uint8_t(ip & 0xFF);
    b->qh[0] = uint16_t((b->qh[0] & 0x0FF8) | ((ip >> 8) & 7) | 0x7000);  // s = 7, delta +, entry 0
  }
  expect_value_round_trip(GgmlType::IQ1_S, v, 256 * nb);
}

TEST(QuantizeRoundTrip, IQ1_MValuesStable) {
  std::mt19937_64 rng(27);
  const int nb = 4;
  const int ip = grid_entry_with(iq1s_grid, 2048, 1, true);
  ASSERT_GE(ip, 0);
  auto v = random_bytes<BlockIQ1_M>(rng, nb);
  for (int i = 0; i < nb; ++i) {
    auto* b = block_at<BlockIQ1_M>(v, i);
    const uint16_t d = test::random_scale_fp16(rng);
    for (int k = 0; k < 4; ++k) b->scales[2 * k + 1] = uint8_t((b->scales[2 * k + 1] & 0x0F) | (((d >> (4 * k)) & 0xF) << 4));
    b->scales[0] = uint8_t(b->scales[0] | 0x07);                          // group 0, half 0: s = 7
    b->qs[0] = uint8_t(ip & 0xFF);
    b->qh[0] = uint8_t((b->qh[0] & 0xF0) | ((ip >> 8) & 7));              // delta +, entry 0
  }
  expect_value_round_trip(GgmlType::IQ1_M, v, 256 * nb);
}

TEST(ActivationQuant, Q8_1Contract) {
  std::mt19937_64 rng(31);
  auto x = test::gaussian(rng, 32 * 4000, 1.0f);
  // Edge blocks: all zero; tiny (fp16 scale underflows to 0); huge (scale clamps to 65504);
  // exact ties x = (k + 0.5) * d.
  for (int j = 0; j < 32; ++j) {
    x[size_t(j)] = 0.0f;
    x[32 + size_t(j)] = 1e-30f * float(j - 16);
    x[64 + size_t(j)] = 1e8f * float(j - 16);
  }
  for (int b = 3; b < 40; ++b) {
    const float d = 0.25f;  // amax = 127*0.25 -> d32 = 0.25 exactly, fp16 exact
    for (int j = 0; j < 32; ++j) x[32 * size_t(b) + size_t(j)] = d * (float(j * 4 % 127) + 0.5f) * ((j & 1) ? -1.0f : 1.0f);
    x[32 * size_t(b)] = 127.0f * d;
  }
  const int64_t n = int64_t(x.size());
  std::vector<BlockQ8_1> q(size_t(n / 32));
  cpu::quantize_row_q8_1(x.data(), q.data(), n);
  for (size_t b = 0; b < q.size(); ++b) {
    const float* xb = x.data() + 32 * b;
    float amax = 0.0f;
    for (int j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(xb[j]));
    const float d32 = amax / 127.0f;
    uint16_t want_d = f32_to_fp16(d32);
    if (want_d == 0x7C00) want_d = 0x7BFF;
    ASSERT_EQ(q[b].d, want_d) << b;
    const float df = fp16_to_f32(q[b].d);
    int sum = 0;
    for (int j = 0; j < 32; ++j) {
      const int qi = q[b].qs[j];
      ASSERT_GE(qi, -127);
      sum += qi;
      if (df == 0.0f) {
        ASSERT_EQ(qi, 0);
        continue;
      }
      const double r = double(xb[j]) / df;
      if (std::fabs(r) <= 127.0) {
        // round half away from zero of the exact quotient (x/df is exact or rounds to nearest,
        // and roundf never crosses a tie that the exact value does not)
        const double want = std::fabs(r) - std::floor(std::fabs(r)) == 0.5 ? std::copysign(std::floor(std::fabs(r)) + 1, r)
                                                                          : std::nearbyint(r);
        ASSERT_EQ(qi, int(want)) << b << " " << j;
      } else {
        ASSERT_EQ(qi, r > 0 ? 127 : -127) << b << " " << j;  // clamp
      }
    }
    ASSERT_EQ(q[b].s, f32_to_fp16(df * float(sum))) << b;
  }
  EXPECT_EQ(q[0].d, 0);
  EXPECT_EQ(q[1].d, 0);  // 16e-30/127 underflows fp16
  EXPECT_EQ(q[2].d, 0x7BFF);
  EXPECT_EQ(q[3].qs[1], -(4 + 1));  // -0.25*(4.5) / 0.25 = -4.5 -> -5 (away from zero)
}

TEST(ActivationQuant, Q8_KContract) {
  std::mt19937_64 rng(32);
  const auto x = test::gaussian(rng, 256 * 200, 3.0f);
  std::vector<BlockQ8_K> q(200);
  cpu::quantize_row_q8_k(x.data(), q.data(), int64_t(x.size()));
  std::vector<float> y(x.size());
  cpu::dequantize_row(GgmlType::Q8_K, q.data(), y.data(), int64_t(x.size()));
  for (size_t b = 0; b < q.size(); ++b) {
    float amax = 0.0f;
    for (int j = 0; j < 256; ++j) amax = std::max(amax, std::fabs(x[256 * b + size_t(j)]));
    ASSERT_EQ(q[b].d, amax / 127.0f);
    for (int k = 0; k < 16; ++k) {
      int s = 0;
      for (int j = 0; j < 16; ++j) s += q[b].qs[16 * k + j];
      ASSERT_EQ(q[b].bsums[k], s);
    }
    for (int j = 0; j < 256; ++j) {
      ASSERT_EQ(y[256 * b + size_t(j)], float(q[b].qs[j]) * q[b].d);
      ASSERT_LE(std::fabs(y[256 * b + size_t(j)] - x[256 * b + size_t(j)]), 0.5f * q[b].d * (1 + 1e-6f));
    }
  }
}

TEST(DeepSeek, Fp8RowMatchesDefinition) {
  std::mt19937_64 rng(41);
  std::vector<uint8_t> w(1000), sc(8);
  for (auto& b : w) b = uint8_t(rng());
  for (auto& b : sc) b = uint8_t(100 + rng() % 50);
  sc[0] = 0;
  std::vector<float> y(w.size());
  cpu::dequantize_row_ds_fp8(w.data(), sc.data(), y.data(), int64_t(w.size()));
  for (size_t k = 0; k < w.size(); ++k) {
    const int s = w[k] >> 7, e = (w[k] >> 3) & 15, m = w[k] & 7;
    if ((w[k] & 0x7F) == 0x7F) {
      EXPECT_TRUE(std::isnan(y[k]));
      continue;
    }
    const double mag = e == 0 ? std::ldexp(double(m), -9) : std::ldexp(1.0 + m / 8.0, e - 7);
    const double want = (s ? -mag : mag) * std::ldexp(1.0, int(sc[k / 128]) - 127);
    EXPECT_EQ(double(y[k]), double(float(want))) << k;  // one rounding at most (subnormal range)
  }
}

TEST(DeepSeek, Fp4RepackToMxfp4IsLossless) {
  std::mt19937_64 rng(42);
  const int64_t n = 32 * 500;
  std::vector<uint8_t> w(size_t(n / 2)), sc(size_t(n / 32));
  for (auto& b : w) b = uint8_t(rng());
  for (size_t i = 0; i < sc.size(); ++i) sc[i] = i < 4 ? uint8_t(i) : uint8_t(rng() % 255);
  std::vector<float> a(static_cast<size_t>(n)), b(static_cast<size_t>(n));
  cpu::dequantize_row_ds_fp4(w.data(), sc.data(), a.data(), n);
  std::vector<uint8_t> mx(size_t(cpu::row_bytes(GgmlType::MXFP4, n)));
  cpu::repack_ds_fp4_to_mxfp4(w.data(), sc.data(), mx.data(), n);
  cpu::dequantize_row(GgmlType::MXFP4, mx.data(), b.data(), n);
  for (int64_t k = 0; k < n; ++k) {
    // Definition: e2m1(nibble k) * 2^(e-127), low nibble = even element.
    const int code = (w[size_t(k / 2)] >> (4 * (k & 1))) & 0xF;
    const float mag[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};
    const double want = (code & 8 ? -1.0 : 1.0) * mag[code & 7] * std::ldexp(1.0, int(sc[size_t(k / 32)]) - 127);
    ASSERT_EQ(a[size_t(k)], float(want)) << k;
    ASSERT_EQ(test::canonical_bits(a[size_t(k)]), test::canonical_bits(b[size_t(k)])) << k;
  }
}

}  // namespace
}  // namespace ds4
