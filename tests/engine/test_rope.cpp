// Unit tests of the YaRN frequency table and interleaved RoPE (engine/rope.h).
#include <gtest/gtest.h>

#include <cmath>

#include "engine/rope.h"
#include "kernels/cpu/ops.h"

namespace ds4 {
namespace {

TEST(Rope, YarnRangeForTheta160000Is15To25) {
  YarnParams y{16.0, 65536, 32, 1};
  int lo = 0, hi = 0;
  yarn_correction_range(64, 160000.0, y, &lo, &hi);
  EXPECT_EQ(lo, 15);
  EXPECT_EQ(hi, 25);
}

TEST(Rope, YarnKeepsHighFrequenciesAndDividesLowOnesByFactor) {
  YarnParams y{16.0, 65536, 32, 1};
  RopeTable t(64, 160000.0, y);
  auto base = [](int i) { return std::pow(160000.0, -2.0 * i / 64); };
  EXPECT_NEAR(t.freqs()[0], 1.0, 1e-7);
  EXPECT_NEAR(t.freqs()[15], base(15), base(15) * 1e-6);        // ramp 0: unchanged
  EXPECT_NEAR(t.freqs()[20], base(20) * (0.5 + 0.5 / 16), base(20) * 1e-5);  // ramp 0.5
  EXPECT_NEAR(t.freqs()[25], base(25) / 16, base(25) * 1e-6);   // ramp 1: / factor
  EXPECT_NEAR(t.freqs()[31], base(31) / 16, base(31) * 1e-6);
  RopeTable plain(64, 10000.0, YarnParams{});
  EXPECT_NEAR(plain.freqs()[31], std::pow(10000.0, -62.0 / 64), 1e-9);
}

TEST(Rope, InterleavedPairsOnLastDimsAndInverse) {
  RopeTable t(4, 10000.0, YarnParams{});  // freqs {1, 0.01}
  std::vector<float> x = {7, 8, 1, 0, 0, 1};  // dim 6: first 2 untouched, pairs (1,0), (0,1)
  cpu::rope_apply(x.data(), 6, t.freqs().data(), 2, 3, false);
  EXPECT_EQ(x[0], 7);
  EXPECT_EQ(x[1], 8);
  EXPECT_NEAR(x[2], std::cos(3.0), 1e-6);   // (1 + 0i) * e^{3i}
  EXPECT_NEAR(x[3], std::sin(3.0), 1e-6);
  EXPECT_NEAR(x[4], -std::sin(0.03), 1e-6); // (0 + 1i) * e^{0.03i}
  EXPECT_NEAR(x[5], std::cos(0.03), 1e-6);
  cpu::rope_apply(x.data(), 6, t.freqs().data(), 2, 3, true);
  EXPECT_NEAR(x[2], 1, 1e-6);
  EXPECT_NEAR(x[3], 0, 1e-6);
  EXPECT_NEAR(x[4], 0, 1e-6);
  EXPECT_NEAR(x[5], 1, 1e-6);
}

}  // namespace
}  // namespace ds4
