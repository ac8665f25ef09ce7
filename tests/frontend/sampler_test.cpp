// tests/frontend/sampler_test.cpp — greedy ties, truncation on hand-made distributions, penalty,
// determinism for a seed.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "engine/sampler.h"

namespace ds4 {
namespace {

SamplerParams plain(float temp) {
  SamplerParams p;
  p.temperature = temp;
  p.top_k = 0;
  p.top_p = 1.0f;
  p.min_p = 0.0f;
  p.repeat_penalty = 1.0f;
  return p;
}

std::vector<float> logs(std::vector<double> probs) {
  std::vector<float> l;
  for (double p : probs) l.push_back(float(std::log(p)));
  return l;
}

TEST(Sampler, GreedyIsArgmaxWithTiesToLowerId) {
  Sampler s(plain(0.0f));
  std::vector<float> l = {1.0f, 3.0f, 3.0f, 2.0f};
  EXPECT_EQ(s.sample(l, {}), 1);
  EXPECT_EQ(argmax_lowest(std::vector<float>{-1.0f, -1.0f}), 0);
  EXPECT_EQ(argmax_lowest(std::vector<float>{-5.0f, 0.0f, -0.0f}), 1);
}

TEST(Sampler, TopK) {
  auto p = plain(1.0f);
  p.top_k = 2;
  Sampler s(p);
  std::vector<float> l = {0, 1, 2, 3, 4};
  EXPECT_EQ(s.candidates(l, {}), (std::vector<int32_t>{4, 3}));
  std::vector<float> tied = {1, 2, 2, 2};
  EXPECT_EQ(s.candidates(tied, {}), (std::vector<int32_t>{1, 2}));  // ties keep lower ids
}

TEST(Sampler, TopP) {
  auto l = logs({0.15, 0.5, 0.05, 0.3});  // sorted: 1 (.5), 3 (.3), 0 (.15), 2 (.05)
  auto p = plain(1.0f);
  p.top_p = 0.75f;
  EXPECT_EQ(Sampler(p).candidates(l, {}), (std::vector<int32_t>{1, 3}));
  p.top_p = 0.85f;
  EXPECT_EQ(Sampler(p).candidates(l, {}), (std::vector<int32_t>{1, 3, 0}));
  p.top_p = 0.4f;
  EXPECT_EQ(Sampler(p).candidates(l, {}), (std::vector<int32_t>{1}));
}

TEST(Sampler, MinP) {
  auto l = logs({0.15, 0.5, 0.05, 0.3});
  auto p = plain(1.0f);
  p.min_p = 0.2f;  // threshold 0.1
  EXPECT_EQ(Sampler(p).candidates(l, {}), (std::vector<int32_t>{1, 3, 0}));
  p.min_p = 0.5f;  // threshold 0.25
  EXPECT_EQ(Sampler(p).candidates(l, {}), (std::vector<int32_t>{1, 3}));
  p.min_p = 1.0f;
  EXPECT_EQ(Sampler(p).candidates(l, {}), (std::vector<int32_t>{1}));
}

TEST(Sampler, RepetitionPenalty) {
  auto p = plain(0.0f);
  p.repeat_penalty = 2.0f;
  p.repeat_last_n = 2;
  Sampler s(p);
  // 2.0 -> 1.0 (positive: divided), so id 1 (1.5) wins.
  EXPECT_EQ(s.sample(std::vector<float>{2.0f, 1.5f, -1.0f}, std::vector<int32_t>{0}), 1);
  // negative logits are multiplied: -1 -> -2, so id 1 (-1.5) wins.
  EXPECT_EQ(s.sample(std::vector<float>{-1.0f, -1.5f}, std::vector<int32_t>{0}), 1);
  // outside the window (last 2 tokens are 1, 1): id 0 is not penalised.
  EXPECT_EQ(s.sample(std::vector<float>{2.0f, 1.5f}, std::vector<int32_t>{0, 1, 1}), 0);
}

TEST(Sampler, DeterministicForASeed) {
  auto p = plain(1.0f);
  p.seed = 1234;
  std::vector<float> l = {0.1f, 0.5f, 0.2f, 0.9f, 0.0f, 0.3f};
  Sampler a(p), b(p);
  std::vector<int32_t> sa, sb;
  for (int i = 0; i < 200; ++i) {
    sa.push_back(a.sample(l, {}));
    sb.push_back(b.sample(l, {}));
  }
  EXPECT_EQ(sa, sb);
  p.seed = 1235;
  Sampler c(p);
  std::vector<int32_t> sc;
  for (int i = 0; i < 200; ++i) sc.push_back(c.sample(l, {}));
  EXPECT_NE(sa, sc);
}

TEST(Sampler, DrawFollowsTheDistribution) {
  // p = (0.7, 0.3); 20000 draws with a fixed seed; the frequency of id 0 lies within 4 sigma.
  auto p = plain(1.0f);
  p.seed = 7;
  Sampler s(p);
  auto l = logs({0.7, 0.3});
  int n0 = 0;
  const int n = 20000;
  for (int i = 0; i < n; ++i) n0 += s.sample(l, {}) == 0;
  EXPECT_NEAR(double(n0) / n, 0.7, 4 * std::sqrt(0.7 * 0.3 / n));
  // temperature 0.5 sharpens to 0.49/(0.49+0.09) = 0.845
  p.temperature = 0.5f;
  Sampler t(p);
  n0 = 0;
  for (int i = 0; i < n; ++i) n0 += t.sample(l, {}) == 0;
  EXPECT_NEAR(double(n0) / n, 0.49 / 0.58, 4 * std::sqrt(0.845 * 0.155 / n));
}

TEST(Sampler, MaskedLogits) {
  const float inf = std::numeric_limits<float>::infinity();
  Sampler s(plain(1.0f));
  for (int i = 0; i < 50; ++i) EXPECT_EQ(s.sample(std::vector<float>{-inf, 0.0f, -inf}, {}), 1);
  EXPECT_EQ(s.sample(std::vector<float>{-inf, -inf}, {}), 0);  // nothing finite: lowest id, no crash
}

TEST(Sampler, Uniform01InRange) {
  std::mt19937_64 rng(99);
  for (int i = 0; i < 1000; ++i) {
    double u = uniform01(rng);
    EXPECT_GE(u, 0.0);
    EXPECT_LT(u, 1.0);
  }
}

TEST(Sampler, ValidateNamesTheParameter) {
  SamplerParams p;
  p.top_p = 0.0f;
  auto r = validate(p);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message.find("--top-p"), std::string::npos);
  p = SamplerParams{};
  p.temperature = -1;
  EXPECT_FALSE(validate(p).ok());
  p = SamplerParams{};
  p.repeat_penalty = 0;
  EXPECT_FALSE(validate(p).ok());
  EXPECT_TRUE(validate(SamplerParams{}).ok());
}

}  // namespace
}  // namespace ds4
