// tests/gpu/test_cuda_host_helpers.cpp — CPU-only checks (label unit) of the host-visible pieces
// of the CUDA kernels' determinism argument: the MMQ streaming lane tree reproduces the dot
// contract's butterfly bit for bit, and the MoE counting sort mirror is a stable sort by expert
// with a correct tile list.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <numeric>
#include <random>
#include <vector>

#include "kernels/cuda/moe/moe_sort_host.h"
#include "kernels/cuda/mmq/lane_tree.h"
#include "kernels/cuda/mmq/mmq_layout.h"
#include "kernels/quant/dot_q8_1.h"

namespace ds4::cuda {
namespace {

uint32_t bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

/// The contract's row sum (dot_q8_1.h step 2) of chunk partials P.
float contract_sum(const std::vector<float>& P) {
  float lane[32] = {};
  for (size_t b = 0; b < P.size(); ++b) lane[b % 32] = lane[b % 32] + P[b];
  return quant::lane_reduce32(lane);
}

/// The MMQ walk: leaves t = 0..31, lane bitrev5(t)'s chunks ascending from 0.0f, folded.
float mmq_walk_sum(const std::vector<float>& P) {
  float stack[5] = {};
  float result = 0.0f;
  for (int t = 0; t < 32; ++t) {
    float cur = 0.0f;
    for (size_t b = size_t(lane_of_leaf(t)); b < P.size(); b += 32) cur = cur + P[b];
    result = lane_tree_fold(stack, cur, t);
  }
  return result;
}

TEST(LaneTree, LeafOrderIsBitReversal) {
  const int want[8] = {0, 16, 8, 24, 4, 20, 12, 28};
  for (int t = 0; t < 8; ++t) EXPECT_EQ(lane_of_leaf(t), want[t]);
  std::vector<int> all(32);
  for (int t = 0; t < 32; ++t) all[size_t(t)] = lane_of_leaf(t);
  std::sort(all.begin(), all.end());
  for (int t = 0; t < 32; ++t) EXPECT_EQ(all[size_t(t)], t);
}

TEST(LaneTree, StreamingFoldEqualsContractButterflyBitForBit) {
  std::mt19937 rng(11);
  // Wide magnitude range and cancellation so that any change of addition order shows up.
  std::uniform_real_distribution<float> mant(-1.0f, 1.0f);
  int64_t differing_orders = 0;
  for (int trial = 0; trial < 2000; ++trial) {
    const size_t n = 1 + rng() % 300;
    std::vector<float> P(n);
    for (auto& p : P) p = std::ldexp(mant(rng), int(rng() % 60) - 30);
    if (trial % 7 == 0) P[rng() % n] = -0.0f;
    const float want = contract_sum(P);
    ASSERT_EQ(bits(mmq_walk_sum(P)), bits(want)) << "trial " << trial << " n " << n;
    // Sanity: a plain sequential sum usually differs, so this test can tell orders apart.
    float seq = 0.0f;
    for (float p : P) seq = seq + p;
    differing_orders += bits(seq) != bits(want);
  }
  EXPECT_GT(differing_orders, 100);
}

/// The MMQ kernel's staged loop (mmq.cuh), single-threaded: peek ks chunks, replay the walk.
float mmq_staged_sum(const std::vector<float>& P, int ks) {
  const int64_t nchunks = int64_t(P.size());
  float stack[5] = {}, cur = 0.0f, result = 0.0f;
  LaneWalk walk;
  int rounds = 0;
  while (lane_walk_event(walk, nchunks) != WalkEvent::End) {
    int64_t gb[8];
    const int n = lane_walk_peek(walk, nchunks, gb, ks);
    int i = 0;
    for (;;) {
      const WalkEvent ev = lane_walk_event(walk, nchunks);
      if (ev == WalkEvent::End) break;
      if (ev == WalkEvent::LeafDone) {
        const float x = lane_tree_fold(stack, cur, walk.t);
        if (walk.t == 31) result = x;
        cur = 0.0f;
        lane_walk_advance(walk, nchunks);
        continue;
      }
      if (i == n) break;
      EXPECT_EQ(gb[i], walk.b);  // the staged chunk is the one the replay expects
      cur = cur + P[size_t(gb[i])];
      ++i;
      lane_walk_advance(walk, nchunks);
    }
    EXPECT_EQ(i, n);  // every staged chunk is consumed in the same round
    EXPECT_LT(++rounds, 10000);
    if (rounds >= 10000) break;
  }
  return result;
}

TEST(LaneTree, MmqStagedWalkEqualsContractForAllChunkCounts) {
  std::mt19937 rng(13);
  std::uniform_real_distribution<float> mant(-1.0f, 1.0f);
  for (size_t n = 1; n <= 300; ++n) {
    std::vector<float> P(n);
    for (auto& p : P) p = std::ldexp(mant(rng), int(rng() % 40) - 20);
    const float want = contract_sum(P);
    for (int ks : {1, 3, 4, 8}) ASSERT_EQ(bits(mmq_staged_sum(P, ks)), bits(want)) << "n " << n << " ks " << ks;
  }
}

TEST(LaneTree, AllZeroAndNegativeZeroLeaves) {
  EXPECT_EQ(bits(mmq_walk_sum({-0.0f})), bits(contract_sum({-0.0f})));  // 0.0f + -0.0f = +0
  EXPECT_EQ(bits(mmq_walk_sum({})), bits(0.0f));
}

TEST(MmqLayout, EveryTileOutputHasExactlyOneOwner) {
  std::vector<int> owners(size_t(kMmqRows) * 16, 0);
  for (int warp = 0; warp < kMmqThreads / 32; ++warp)
    for (int lane = 0; lane < 32; ++lane)
      for (int o = 0; o < kMmqOutPerThread; ++o) {
        const int r = mmq_out_row(warp, lane, o), c = mmq_out_col(lane, o);
        ASSERT_TRUE(r >= 0 && r < kMmqRows && c >= 0 && c < 16) << warp << " " << lane << " " << o;
        ++owners[size_t(r * 16 + c)];
        // The MMA accumulator fragment: lane l holds (row l/4, columns 2*(l%4), 2*(l%4)+1).
        EXPECT_EQ(r % 8, lane / 4);
        EXPECT_EQ(c % 8, 2 * (lane % 4) + o % 2);
      }
  for (int n : owners) EXPECT_EQ(n, 1);
}

TEST(MoeSortHost, StableByExpertWithTiles) {
  std::mt19937 rng(5);
  for (int trial = 0; trial < 50; ++trial) {
    const int E = 1 + int(rng() % 40);
    const int64_t n = int64_t(rng() % 700);
    std::vector<int32_t> ids(static_cast<size_t>(n));
    for (auto& v : ids) v = int32_t(rng() % uint32_t(E + 2)) - 1;  // includes -1 and E (invalid)
    const MoeSortHost r = moe_sort_host(ids.data(), n, E, 16);
    // Reference: std::stable_sort of the valid pair ids by expert.
    std::vector<int32_t> want;
    int32_t invalid = 0;
    for (int64_t p = 0; p < n; ++p) {
      if (ids[size_t(p)] >= 0 && ids[size_t(p)] < E) want.push_back(int32_t(p));
      else ++invalid;
    }
    std::stable_sort(want.begin(), want.end(), [&](int32_t a, int32_t b) { return ids[size_t(a)] < ids[size_t(b)]; });
    EXPECT_EQ(r.sorted, want);
    EXPECT_EQ(r.n_invalid, invalid);
    ASSERT_EQ(r.expert_bounds.size(), size_t(E + 1));
    EXPECT_EQ(r.expert_bounds[0], 0);
    for (int e = 0; e < E; ++e)
      for (int32_t i = r.expert_bounds[size_t(e)]; i < r.expert_bounds[size_t(e) + 1]; ++i)
        EXPECT_EQ(ids[size_t(r.sorted[size_t(i)])], e);
    // Tiles cover [0, valid) once, in order, never mixing experts, at most 16 columns.
    int32_t next = 0;
    for (size_t i = 0; i < r.tiles.size(); i += 3) {
      const int32_t e = r.tiles[i], b = r.tiles[i + 1], end = r.tiles[i + 2];
      EXPECT_EQ(b, next);
      EXPECT_GT(end, b);
      EXPECT_LE(end - b, 16);
      EXPECT_GE(b, r.expert_bounds[size_t(e)]);
      EXPECT_LE(end, r.expert_bounds[size_t(e) + 1]);
      next = end;
    }
    EXPECT_EQ(next, int32_t(want.size()));
  }
}

}  // namespace
}  // namespace ds4::cuda
