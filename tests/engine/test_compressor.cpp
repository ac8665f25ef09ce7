// Unit tests of the compressor's block emission, pooling and visibility (engine/compressor.h).
#include <gtest/gtest.h>

#include <cmath>

#include <vector>

#include "kernels/cpu/ops.h"

namespace ds4 {
namespace {
using namespace ds4::cpu;

/// The compressor state as host arrays around cpu::compressor_push (the device op keeps the same
/// arrays in a sequence's state tensors).
class CompressorState {
 public:
  CompressorState(int ratio, int64_t d)
      : ratio_(ratio), d_(d), overlap_(ratio == 4), cur_(size_t(2 * ratio * (overlap_ ? 2 : 1) * d)),
        prev_(overlap_ ? size_t(2 * ratio * d) : 0) {}
  bool overlap() const { return overlap_; }
  bool push(int64_t pos, const float* a, const float* g, const float* ape, float* out) {
    const int64_t w = overlap_ ? 2 * d_ : d_;
    CompressorView v{ratio_, d_, cur_.data(), cur_.data() + ratio_ * w, overlap_ ? prev_.data() : nullptr,
                     overlap_ ? prev_.data() + ratio_ * d_ : nullptr};
    return compressor_push(v, pos, a, g, ape, out);
  }

 private:
  int ratio_;
  int64_t d_;
  bool overlap_;
  std::vector<float> cur_, prev_;
};

TEST(Compressor, VisibilityCountsOnlyCompleteBlocks) {
  EXPECT_EQ(compressed_visible(0, 4), 0);
  EXPECT_EQ(compressed_visible(2, 4), 0);
  EXPECT_EQ(compressed_visible(3, 4), 1);  // the block completed by this token is visible to it
  EXPECT_EQ(compressed_visible(6, 4), 1);
  EXPECT_EQ(compressed_visible(7, 4), 2);
  EXPECT_EQ(compressed_visible(126, 128), 0);
  EXPECT_EQ(compressed_visible(127, 128), 1);
  EXPECT_EQ(compressed_visible(511, 128), 4);
}

// Ratio 4 with d = 1: a/g are [2] = {overlap channel, own channel}. Equal gates -> plain means.
TEST(Compressor, Ratio4OverlapPoolsPreviousBlockFirstHalf) {
  CompressorState cs(4, 1);
  ASSERT_TRUE(cs.overlap());
  std::vector<float> ape(8, 0.0f);
  float out = -1;
  // Tokens 0..3: own-channel values 1,2,3,4; overlap-channel values 10,20,30,40.
  for (int t = 0; t < 4; ++t) {
    float a[2] = {10.0f * (t + 1), static_cast<float>(t + 1)}, g[2] = {0, 0};
    bool emitted = cs.push(t, a, g, ape.data(), &out);
    EXPECT_EQ(emitted, t == 3) << t;
  }
  EXPECT_NEAR(out, 2.5f, 1e-6);  // block 0: no previous block (-inf), mean of 1..4
  for (int t = 4; t < 8; ++t) {
    float a[2] = {0, 100.0f}, g[2] = {0, 0};
    bool emitted = cs.push(t, a, g, ape.data(), &out);
    EXPECT_EQ(emitted, t == 7) << t;
  }
  // Block 1: previous block's overlap channel (10,20,30,40) + own channel (100 x4), equal weights.
  EXPECT_NEAR(out, (10 + 20 + 30 + 40 + 400) / 8.0f, 1e-4);
}

TEST(Compressor, ApeIsAddedToGateByPositionInBlock) {
  CompressorState cs(4, 1);
  // ape rows [4, 2]: only slot 2's own channel gets +ln(5) -> weight 5 vs 1,1,1.
  std::vector<float> ape = {0, 0, 0, 0, 0, std::log(5.0f), 0, 0};
  float out = 0;
  for (int t = 0; t < 4; ++t) {
    float a[2] = {0, static_cast<float>(t)}, g[2] = {0, 0};
    cs.push(t, a, g, ape.data(), &out);
  }
  EXPECT_NEAR(out, (0 * 1 + 1 * 1 + 2 * 5 + 3 * 1) / 8.0f, 1e-5);
}

TEST(Compressor, Ratio128SoftmaxPerChannel) {
  CompressorState cs(128, 2);
  ASSERT_FALSE(cs.overlap());
  std::vector<float> ape(128 * 2, 0.0f);
  float out[2] = {0, 0};
  for (int t = 0; t < 128; ++t) {
    // channel 0: gate picks token 5 sharply; channel 1: equal gates, values t.
    float a[2] = {static_cast<float>(t), static_cast<float>(t)};
    float g[2] = {t == 5 ? 50.0f : 0.0f, 0.0f};
    bool emitted = cs.push(t, a, g, ape.data(), out);
    EXPECT_EQ(emitted, t == 127) << t;
  }
  EXPECT_NEAR(out[0], 5.0f, 1e-4);
  EXPECT_NEAR(out[1], 63.5f, 1e-3);
  // The next block starts fresh (no overlap for ratio 128).
  for (int t = 128; t < 256; ++t) {
    float a[2] = {1.0f, 2.0f}, g[2] = {0, 0};
    cs.push(t, a, g, ape.data(), out);
  }
  EXPECT_NEAR(out[0], 1.0f, 1e-5);
  EXPECT_NEAR(out[1], 2.0f, 1e-5);
}

}  // namespace
}  // namespace ds4
