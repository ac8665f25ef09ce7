// Unit tests of mHC mixing (engine/mhc.h) on hand-checkable cases.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "kernels/cpu/ops.h"

namespace ds4 {
namespace {
using namespace ds4::cpu;

TEST(Mhc, UniformLogitsGiveHalfPreUnitPostAndQuarterComb) {
  const int hc = 4;
  std::vector<float> m(24, 0.0f), base(24, 0.0f), scale = {1, 1, 1};
  HcMix r = hc_split_sinkhorn(m.data(), scale.data(), base.data(), hc, 20, 1e-6f);
  for (int j = 0; j < hc; ++j) {
    EXPECT_NEAR(r.pre[j], 0.5f + 1e-6f, 1e-7);   // sigmoid(0) + eps
    EXPECT_NEAR(r.post[j], 1.0f, 1e-7);          // 2 * sigmoid(0)
  }
  for (float c : r.comb) EXPECT_NEAR(c, 0.25f, 1e-5);
}

// 2x2 Sinkhorn keeps the cross ratio c00*c11/(c01*c10); the doubly stochastic limit with row
// softmax [[3/4, 1/4], [1/2, 1/2]] (cross ratio 3) is [[a, 1-a], [1-a, a]], a = sqrt3/(1+sqrt3).
TEST(Mhc, SinkhornConvergesToDoublyStochasticWithSameCrossRatio) {
  const int hc = 2;
  std::vector<float> m(8, 0.0f), scale = {1, 1, 1};
  std::vector<float> base = {0, 0, 0, 0, std::log(3.0f), 0, 0, 0};  // comb logits row0 [ln3, 0]
  HcMix r = hc_split_sinkhorn(m.data(), scale.data(), base.data(), hc, 20, 1e-6f);
  const double a = std::sqrt(3.0) / (1 + std::sqrt(3.0));
  EXPECT_NEAR(r.comb[0], a, 1e-4);
  EXPECT_NEAR(r.comb[1], 1 - a, 1e-4);
  EXPECT_NEAR(r.comb[2], 1 - a, 1e-4);
  EXPECT_NEAR(r.comb[3], a, 1e-4);
  // The last step is a column normalization: columns sum to 1 (up to eps).
  EXPECT_NEAR(r.comb[0] + r.comb[2], 1.0, 2e-6);
  EXPECT_NEAR(r.comb[1] + r.comb[3], 1.0, 2e-6);
}

TEST(Mhc, ScaleMultipliesMixesBeforeBase) {
  const int hc = 1;  // mixes: pre, post, comb(1x1)
  std::vector<float> m = {2.0f, -1.0f, 5.0f}, scale = {0.5f, 3.0f, 1.0f}, base = {1.0f, 1.0f, 0.0f};
  HcMix r = hc_split_sinkhorn(m.data(), scale.data(), base.data(), hc, 3, 0.0f);
  EXPECT_NEAR(r.pre[0], 1 / (1 + std::exp(-2.0)), 1e-6);       // 2*0.5 + 1
  EXPECT_NEAR(r.post[0], 2 / (1 + std::exp(2.0)), 1e-6);       // 2*sigmoid(-1*3 + 1)
  EXPECT_NEAR(r.comb[0], 1.0f, 1e-6);
}

TEST(Mhc, PostMixesSourceIntoDestination) {
  // X' [k] = post[k] f + sum_j comb[j,k] X[j].
  HcMix mix;
  mix.pre = {0, 0};
  mix.post = {2.0f, 0.5f};
  mix.comb = {0.9f, 0.1f,   // source 0 -> dest 0, dest 1
              0.2f, 0.8f};  // source 1 -> dest 0, dest 1
  std::vector<float> X = {1, 10, 100, 1000};  // [2 copies, dim 2]
  std::vector<float> f = {3, 4};
  hc_post(f.data(), mix, 2, 2, X.data());
  EXPECT_FLOAT_EQ(X[0], 2 * 3 + 0.9f * 1 + 0.2f * 100);
  EXPECT_FLOAT_EQ(X[1], 2 * 4 + 0.9f * 10 + 0.2f * 1000);
  EXPECT_FLOAT_EQ(X[2], 0.5f * 3 + 0.1f * 1 + 0.8f * 100);
  EXPECT_FLOAT_EQ(X[3], 0.5f * 4 + 0.1f * 10 + 0.8f * 1000);
}

// hc_post_row and hc_post_cols (any column split) give, bit for bit, the order ops.h writes down:
// per output X'[k, d] = post[k]*f[d] + acc, acc from +0 adding comb[j*hc+k] * X[j, d] for j
// ascending. Odd dims and block edges included; the expected values are this test's own loops.
TEST(Mhc, PostRowAndColumnsFollowTheWrittenOrder) {
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> u(-3.0f, 3.0f);
  for (int hc : {1, 2, 4, 5}) {
    for (int64_t dim : {1, 7, 64, 65, 200}) {
      const int mr = (2 + hc) * hc;
      std::vector<float> f(static_cast<size_t>(dim)), mix(static_cast<size_t>(mr)), X(static_cast<size_t>(hc * dim));
      for (std::vector<float>* v : {&f, &mix, &X})
        for (float& e : *v) e = u(rng);
      X[0] = -0.0f;  // signed zeros keep their order-dependent sign
      std::vector<float> want(X.size());
      const float* post = mix.data() + hc;
      const float* comb = mix.data() + 2 * hc;
      for (int k = 0; k < hc; ++k)
        for (int64_t d = 0; d < dim; ++d) {
          float acc = 0;
          for (int j = 0; j < hc; ++j) acc += comb[j * hc + k] * X[size_t(j * dim + d)];
          want[size_t(k * dim + d)] = post[k] * f[size_t(d)] + acc;
        }
      std::vector<float> got = X, tmp(X.size());
      hc_post_row(f.data(), mix.data(), hc, dim, got.data(), tmp.data());
      EXPECT_EQ(0, std::memcmp(got.data(), want.data(), 4 * want.size())) << "row hc " << hc << " dim " << dim;
      std::vector<float> cols = X;
      for (int64_t d0 = 0; d0 < dim; d0 += 3) {
        const int64_t d1 = std::min(dim, d0 + 3);
        hc_post_cols(f.data(), mix.data(), hc, dim, cols.data(), tmp.data(), d0, d1);
      }
      EXPECT_EQ(0, std::memcmp(cols.data(), want.data(), 4 * want.size())) << "cols hc " << hc << " dim " << dim;
    }
  }
}

// hc_mixes (four rows per pass) and hc_weighted_sum (64 columns per pass) give the bits of the
// orders ops.h writes down: mixes[r] = dot_f32(fn_r, xf) * rs, y[d] = sum_j pre[j] * X[j, d] from +0
// with j ascending. Row counts with and without a tail of four; dims at and past block edges.
TEST(Mhc, MixesAndWeightedSumFollowTheWrittenOrder) {
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> u(-2.0f, 2.0f);
  for (int hc : {1, 3, 4}) {
    for (int64_t dim : {5, 64, 130}) {
      const int rows = (2 + hc) * hc;
      const int64_t n = hc * dim;
      std::vector<float> fn(static_cast<size_t>(rows * n)), xf(static_cast<size_t>(n)), pre(static_cast<size_t>(hc));
      for (std::vector<float>* v : {&fn, &xf, &pre})
        for (float& e : *v) e = u(rng);
      std::vector<float> m(static_cast<size_t>(rows)), want_m(static_cast<size_t>(rows));
      hc_mixes(fn.data(), rows, xf.data(), n, 1e-6f, m.data());
      const float rs = hc_norm_scale(xf.data(), n, 1e-6f);
      for (int r = 0; r < rows; ++r) want_m[r] = dot_f32(fn.data() + r * n, xf.data(), n) * rs;
      EXPECT_EQ(0, std::memcmp(m.data(), want_m.data(), 4 * m.size())) << "mixes hc " << hc << " dim " << dim;
      std::vector<float> y(static_cast<size_t>(dim)), want_y(static_cast<size_t>(dim));
      hc_weighted_sum(xf.data(), pre.data(), hc, dim, y.data());
      for (int64_t d = 0; d < dim; ++d) {
        float s = 0;
        for (int j = 0; j < hc; ++j) s += pre[j] * xf[j * dim + d];
        want_y[d] = s;
      }
      EXPECT_EQ(0, std::memcmp(y.data(), want_y.data(), 4 * y.size())) << "sum hc " << hc << " dim " << dim;
    }
  }
}

TEST(Mhc, MixesScaleByInverseRms) {
  // xf = [3, 4] -> mean square 12.5; fn rows [1,0] and [0,1].
  std::vector<float> fn = {1, 0, 0, 1}, xf = {3, 4};
  float m[2];
  hc_mixes(fn.data(), 2, xf.data(), 2, 0.0f, m);
  EXPECT_NEAR(m[0], 3 / std::sqrt(12.5), 1e-6);
  EXPECT_NEAR(m[1], 4 / std::sqrt(12.5), 1e-6);
  float y[2];
  float pre[2] = {0.25f, 2.0f};
  hc_weighted_sum(std::vector<float>{1, 2, 3, 4}.data(), pre, 2, 2, y);
  EXPECT_FLOAT_EQ(y[0], 0.25f * 1 + 2 * 3);
  EXPECT_FLOAT_EQ(y[1], 0.25f * 2 + 2 * 4);
}

}  // namespace
}  // namespace ds4
