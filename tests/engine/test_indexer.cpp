// Unit tests of the lightning indexer's block scores and top-k (engine/indexer_score.h).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <random>
#include <vector>

#include "kernels/cpu/ops.h"

namespace ds4 {
namespace {
using namespace ds4::cpu;

/// Scores then top-k (the indexer's selection for one token).
std::vector<int32_t> indexer_select(const float* q, const float* w, int64_t H, int64_t D, const float* keys,
                                    int64_t nvis, int64_t k) {
  std::vector<float> score(static_cast<size_t>(nvis));
  indexer_scores(q, w, H, D, keys, nvis, score.data());
  return topk_desc(score.data(), nvis, k);
}

// H = 2 heads, D = 2. Head 0 looks along x, head 1 along y; keys are unit vectors.
TEST(Indexer, ScoresSumWeightedReluOverHeads) {
  const float q[4] = {1, 0, 0, 2};        // q_0 = (1,0), q_1 = (0,2)
  const float w[2] = {3, 0.5f};
  const float keys[8] = {1, 0,  0, 1,  -1, 0,  1, -1};
  float s[4];
  indexer_scores(q, w, 2, 2, keys, 4, s);
  EXPECT_FLOAT_EQ(s[0], 3 * 1 + 0.5f * 0);   // (1,0)
  EXPECT_FLOAT_EQ(s[1], 3 * 0 + 0.5f * 2);   // (0,1)
  EXPECT_FLOAT_EQ(s[2], 0.0f);               // (-1,0): relu removes head 0's -1
  EXPECT_FLOAT_EQ(s[3], 3 * 1 + 0.0f);       // (1,-1): head 1 gives -2 -> relu 0
}

// Bit for bit the order of ops.h: per key, s from +0 adding max(dot_f32(q_h, k), 0) * w[h] for h
// ascending; head counts with and without a tail of four, head dims past the vector widths.
TEST(Indexer, ScoresFollowTheWrittenOrder) {
  std::mt19937 rng(11);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  for (int64_t H : {1, 4, 6, 16}) {
    for (int64_t D : {8, 67, 128}) {
      const int64_t nvis = 9;
      std::vector<float> q(static_cast<size_t>(H * D)), w(static_cast<size_t>(H)), keys(static_cast<size_t>(nvis * D));
      for (std::vector<float>* v : {&q, &w, &keys})
        for (float& e : *v) e = nd(rng);
      std::vector<float> got(static_cast<size_t>(nvis)), want(static_cast<size_t>(nvis));
      indexer_scores(q.data(), w.data(), H, D, keys.data(), nvis, got.data());
      for (int64_t j = 0; j < nvis; ++j) {
        float s = 0;
        for (int64_t h = 0; h < H; ++h) s += std::max(dot_f32(q.data() + h * D, keys.data() + j * D, D), 0.0f) * w[h];
        want[j] = s;
      }
      EXPECT_EQ(0, std::memcmp(got.data(), want.data(), 4 * want.size())) << "H " << H << " D " << D;
    }
  }
}

TEST(Indexer, TopKTiesGoToLowerBlockAndCountIsClampedToVisible) {
  const float q[2] = {1, 0};
  const float w[1] = {1};
  // Blocks 0..4 with scores 1, 2, 2, 0, 2.
  const float keys[10] = {1, 0, 2, 0, 2, 0, 0, 5, 2, 0};
  EXPECT_EQ(indexer_select(q, w, 1, 2, keys, 5, 2), (std::vector<int32_t>{1, 2}));
  EXPECT_EQ(indexer_select(q, w, 1, 2, keys, 5, 4), (std::vector<int32_t>{1, 2, 4, 0}));
  // Only 3 blocks visible: block 4 cannot be chosen, k clamps to 3.
  EXPECT_EQ(indexer_select(q, w, 1, 2, keys, 3, 8), (std::vector<int32_t>{1, 2, 0}));
  EXPECT_TRUE(indexer_select(q, w, 1, 2, keys, 0, 8).empty());
}

}  // namespace
}  // namespace ds4
