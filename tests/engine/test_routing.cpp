// Unit tests of MoE routing, top-k ties and the clamped SwiGLU (engine/moe_routing.h, topk.h).
#include <gtest/gtest.h>

#include <cmath>

#include <random>
#include <vector>

#include "kernels/cpu/ops.h"
#include "kernels/quant/math.h"

namespace ds4 {
namespace {
using namespace ds4::cpu;

TEST(TopK, TiesBreakByLowerIndex) {
  std::vector<float> s = {1, 3, 3, 2, 3};
  EXPECT_EQ(topk_desc(s.data(), 5, 2), (std::vector<int32_t>{1, 2}));
  EXPECT_EQ(topk_desc(s.data(), 5, 4), (std::vector<int32_t>{1, 2, 4, 3}));
  EXPECT_EQ(topk_desc(s.data(), 5, 9).size(), 5u);
  std::vector<float> z(6, 0.0f);
  EXPECT_EQ(topk_desc(z.data(), 6, 3), (std::vector<int32_t>{0, 1, 2}));
  std::vector<float> nan = {NAN, 1, 0};
  EXPECT_EQ(topk_desc(nan.data(), 3, 1), (std::vector<int32_t>{1}));
}

TEST(Routing, SqrtSoftplus) {
  EXPECT_NEAR(sqrt_softplus(0), std::sqrt(std::log(2.0)), 1e-7);
  EXPECT_NEAR(sqrt_softplus(30), std::sqrt(30.0), 1e-6);
  EXPECT_NEAR(sqrt_softplus(-5), std::sqrt(std::log1p(std::exp(-5.0))), 1e-7);
}

TEST(Routing, HashRoutingTakesTableOrderAndUnbiasedWeights) {
  std::vector<float> logits = {0, 1, 2, 3, 4, 5};
  const int32_t ids[2] = {4, 1};
  Routing r = route_token(logits.data(), 6, 2, nullptr, ids, true, 1.5f);
  EXPECT_EQ(r.experts, (std::vector<int32_t>{4, 1}));
  const double s4 = std::sqrt(std::log1p(std::exp(4.0))), s1 = std::sqrt(std::log1p(std::exp(1.0)));
  EXPECT_NEAR(r.weights[0], s4 / (s4 + s1) * 1.5, 1e-6);
  EXPECT_NEAR(r.weights[1], s1 / (s4 + s1) * 1.5, 1e-6);
}

TEST(Routing, BiasSelectsButWeightsComeFromUnbiasedScores) {
  std::vector<float> logits = {2, 1, 0, -1};
  std::vector<float> bias = {0, 0, 0, 10};  // pushes expert 3 in, expert 1 out
  Routing r = route_token(logits.data(), 4, 2, bias.data(), nullptr, true, 1.0f);
  EXPECT_EQ(r.experts, (std::vector<int32_t>{3, 0}));
  const double s0 = std::sqrt(std::log1p(std::exp(2.0))), s3 = std::sqrt(std::log1p(std::exp(-1.0)));
  EXPECT_NEAR(r.weights[0], s3 / (s0 + s3), 1e-6);
  EXPECT_NEAR(r.weights[1], s0 / (s0 + s3), 1e-6);
}

TEST(SwiGlu, GateClampedFromAboveBeforeSiluUpClampedBothWays) {
  std::vector<float> g = {20, -20, 3, 20}, u = {20, 2, -30, 1};
  swiglu_clamped(g.data(), u.data(), 4, 10.0f);
  auto silu = [](double x) { return x / (1 + std::exp(-x)); };
  EXPECT_NEAR(g[0], silu(10) * 10, 1e-4);   // both clamped to 10
  EXPECT_NEAR(g[1], silu(-20) * 2, 1e-9);   // gate NOT clamped from below
  EXPECT_NEAR(g[2], silu(3) * -10, 1e-5);   // up clamped to -10
  EXPECT_NEAR(g[3], silu(10) * 1, 1e-5);
  std::vector<float> g2 = {20}, u2 = {20};
  swiglu_clamped(g2.data(), u2.data(), 1, 0.0f);  // limit 0: no clamp
  EXPECT_NEAR(g2[0], silu(20) * 20, 1e-3);
}

// The vectorized loops (swiglu, attention's softmax) give each element the bits of the scalar
// formula of kernels/quant/math.h, evaluated here one element at a time.
TEST(SwiGlu, VectorLoopHasTheScalarBits) {
  std::mt19937 gen(3);
  std::normal_distribution<float> d(0.0f, 6.0f);
  const int n = 1003;  // odd: vector body and scalar tail
  std::vector<float> g(n), u(n);
  for (int i = 0; i < n; ++i) {
    g[i] = d(gen);
    u[i] = d(gen);
  }
  g[5] = NAN;
  g[6] = 200.0f;
  g[7] = -200.0f;
  for (float limit : {0.0f, 7.0f}) {
    std::vector<float> out = g;
    swiglu_clamped(out.data(), u.data(), n, limit);
    for (int i = 0; i < n; ++i) {
      volatile float gi = g[i], ui = u[i];  // keeps this loop scalar
      float a = gi, b = ui;
      if (limit > 0) {
        a = a < limit ? a : limit;
        b = b < -limit ? -limit : (b > limit ? limit : b);
      }
      const float want = quant::silu_f32(a) * b;
      if (std::isnan(want)) {
        EXPECT_TRUE(std::isnan(out[i])) << i;
      } else {
        EXPECT_EQ(out[i], want) << i << " g " << g[i] << " u " << u[i];
      }
    }
  }
  // Attention's softmax: o for one query over candidates equals the scalar evaluation; head
  // dims below, at and past the vector widths, candidate counts with and without a tail of four.
  for (int64_t D : {8, 64, 67, 512}) {
    for (int64_t m : {3, 37, 40}) {
      std::vector<float> q(D), kv(m * D), o(D), sc(m);
      for (auto& v : q) v = d(gen) * 0.1f;
      for (auto& v : kv) v = d(gen);
      std::vector<const float*> c;
      for (int64_t i = 0; i < m; ++i) c.push_back(kv.data() + i * D);
      attend_with_sink(q.data(), c.data(), m, D, 0.5f, 0.3f, o.data(), sc.data());
      float mx = 0.3f;
      std::vector<float> s(m);
      for (int64_t i = 0; i < m; ++i) {
        s[i] = dot_f32(q.data(), c[i], D) * 0.5f;
        mx = std::fmax(mx, s[i]);
      }
      float den = quant::exp_f32(0.3f - mx);
      for (int64_t i = 0; i < m; ++i) {
        volatile float e = quant::exp_f32(s[i] - mx);
        s[i] = e;
        den += s[i];
      }
      for (int64_t dd = 0; dd < D; ++dd) {
        float acc = 0;
        for (int64_t i = 0; i < m; ++i) {
          volatile float t = (s[i] / den) * c[i][dd];  // keeps this loop scalar
          acc += t;
        }
        EXPECT_EQ(o[dd], acc) << "D " << D << " m " << m << " d " << dd;
      }
    }
  }
}

}  // namespace
}  // namespace ds4
