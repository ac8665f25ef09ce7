// Unit tests of attention with a learned sink (engine/sparse_attention.h).
#include <gtest/gtest.h>

#include <cmath>

#include "kernels/cpu/ops.h"

namespace ds4 {
namespace {
using namespace ds4::cpu;

TEST(AttentionSink, SinkOnlyEntersTheDenominator) {
  const float q[2] = {1, 0}, k1[2] = {1, 0}, k2[2] = {0, 1};
  const float* kv[2] = {k1, k2};
  float o[2], scratch[2];
  attend_with_sink(q, kv, 2, 2, 1.0f, 0.0f, o, scratch);
  const double e = std::exp(1.0);
  EXPECT_NEAR(o[0], e / (e + 1 + 1), 1e-6);
  EXPECT_NEAR(o[1], 1 / (e + 1 + 1), 1e-6);
  // Very negative sink: plain softmax.
  attend_with_sink(q, kv, 2, 2, 1.0f, -1e30f, o, scratch);
  EXPECT_NEAR(o[0], e / (e + 1), 1e-6);
  // Large sink: output goes to zero; scale multiplies the scores.
  attend_with_sink(q, kv, 2, 2, 1.0f, 50.0f, o, scratch);
  EXPECT_LT(std::fabs(o[0]), 1e-20);
  attend_with_sink(q, kv, 2, 2, 0.5f, -1e30f, o, scratch);
  EXPECT_NEAR(o[0], std::exp(0.5) / (std::exp(0.5) + 1), 1e-6);
}

}  // namespace
}  // namespace ds4
