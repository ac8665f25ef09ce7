// Unit tests of the contract's transcendental functions (kernels/quant/math.h): each result is
// within 1 ulp of the FP32 rounding of the double-precision libm value (almost always equal), on
// random arguments over the ranges the ops use and on the special values; results are the same
// on every call (no state).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>

#include "kernels/quant/math.h"

namespace ds4 {
namespace {

/// Distance in units in the last place between two finite floats of the same sign (0 if equal).
int64_t ulps(float a, float b) {
  if (a == b) return 0;
  int32_t ia, ib;
  std::memcpy(&ia, &a, 4);
  std::memcpy(&ib, &b, 4);
  if (ia < 0) ia = INT32_MIN - ia;
  if (ib < 0) ib = INT32_MIN - ib;
  return std::llabs(int64_t(ia) - int64_t(ib));
}

template <typename F, typename R>
void check(F ours, R ref, float lo, float hi, int count, uint32_t seed, int64_t* exact_pct) {
  std::mt19937 g(seed);
  std::uniform_real_distribution<float> d(lo, hi);
  int64_t exact = 0;
  for (int i = 0; i < count; ++i) {
    const float x = d(g);
    const float want = static_cast<float>(ref(static_cast<double>(x)));
    const float got = ours(x);
    ASSERT_LE(ulps(got, want), 1) << "x = " << x << " got " << got << " want " << want;
    exact += got == want;
  }
  *exact_pct = exact * 100 / count;
}

TEST(Math, ExpWithinOneUlp) {
  int64_t pct = 0;
  check(quant::exp_f32, [](double x) { return std::exp(x); }, -87.0f, 88.0f, 200000, 1, &pct);
  EXPECT_GE(pct, 99);
  check(quant::exp_f32, [](double x) { return std::exp(x); }, -1.0f, 1.0f, 100000, 2, &pct);
  EXPECT_GE(pct, 99);
  // Subnormal results, limits, specials.
  check(quant::exp_f32, [](double x) { return std::exp(x); }, -103.0f, -88.0f, 20000, 3, &pct);
  EXPECT_EQ(quant::exp_f32(0.0f), 1.0f);
  EXPECT_EQ(quant::exp_f32(-200.0f), 0.0f);
  EXPECT_TRUE(std::isinf(quant::exp_f32(100.0f)));
  EXPECT_EQ(quant::exp_f32(-INFINITY), 0.0f);
  EXPECT_TRUE(std::isnan(quant::exp_f32(NAN)));
}

TEST(Math, LogAndLog1pWithinOneUlp) {
  int64_t pct = 0;
  check(quant::log_f32, [](double x) { return std::log(x); }, 1e-30f, 1e30f, 100000, 4, &pct);
  EXPECT_GE(pct, 99);
  check(quant::log_f32, [](double x) { return std::log(x); }, 0.5f, 2.0f, 100000, 5, &pct);
  EXPECT_GE(pct, 99);
  check(quant::log1p_f32, [](double x) { return std::log1p(x); }, -0.999f, 1e9f, 100000, 6, &pct);
  EXPECT_GE(pct, 99);
  check(quant::log1p_f32, [](double x) { return std::log1p(x); }, -1e-3f, 1e-3f, 100000, 7, &pct);
  EXPECT_GE(pct, 99);
  EXPECT_EQ(quant::log1p_f32(1e-30f), 1e-30f);
  EXPECT_EQ(quant::log_f32(1.0f), 0.0f);
  EXPECT_TRUE(std::isinf(quant::log_f32(0.0f)) && quant::log_f32(0.0f) < 0);
  EXPECT_TRUE(std::isnan(quant::log_f32(-1.0f)));
  EXPECT_TRUE(std::isnan(quant::log1p_f32(-2.0f)));
  EXPECT_TRUE(std::isinf(quant::log1p_f32(-1.0f)));
}

TEST(Math, SinCosWithinOneUlpOverRopeAngles) {
  for (auto [lo, hi, seed] : {std::tuple{-4.0f, 4.0f, 8u}, std::tuple{0.0f, 1e3f, 9u}, std::tuple{0.0f, 1.5e6f, 10u}}) {
    int64_t ps = 0, pc = 0;
    check([](float a) { float s, c; quant::sincos_f32(a, &s, &c); return s; }, [](double x) { return std::sin(x); }, lo,
          hi, 100000, seed, &ps);
    check([](float a) { float s, c; quant::sincos_f32(a, &s, &c); return c; }, [](double x) { return std::cos(x); }, lo,
          hi, 100000, seed + 100, &pc);
    EXPECT_GE(ps, 99);
    EXPECT_GE(pc, 99);
  }
  float s, c;
  quant::sincos_f32(0.0f, &s, &c);
  EXPECT_EQ(s, 0.0f);
  EXPECT_EQ(c, 1.0f);
}

TEST(Math, SqrtIsCorrectlyRoundedAndSigmoidSiluFollowTheirFormula) {
  for (float x : {0.0f, 1e-40f, 2.0f, 3.0f, 1e30f}) EXPECT_EQ(quant::sqrt_f32(x), std::sqrt(x));
  for (float x : {-30.0f, -1.0f, 0.0f, 0.5f, 7.0f}) {
    EXPECT_EQ(quant::sigmoid_f32(x), 1.0f / (1.0f + quant::exp_f32(-x)));
    EXPECT_EQ(quant::silu_f32(x), x / (1.0f + quant::exp_f32(-x)));
  }
}

}  // namespace
}  // namespace ds4
