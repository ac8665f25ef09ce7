// tests/tp/collective_checks.h — the collective checks shared by the CPU group test (unit) and the
// NCCL group test (gpu): random FP32 data per rank, every rank runs all_reduce_sum_f32,
// all_gather_f32 and broadcast_f32, and the results are compared bit-for-bit with sums the test
// computes itself on the host in rank order ((p0 + p1) + p2) + ... .
#pragma once

#include <gtest/gtest.h>

#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "kernels/comm.h"

namespace ds4::test {

/// Moves floats between the host and a rank's device memory (plain host memory for the CPU group).
struct RankMemoryOps {
  std::function<float*(int rank, int64_t count)> alloc;
  std::function<void(int rank, float* dev, const float* host, int64_t count)> upload;
  std::function<void(int rank, float* host, const float* dev, int64_t count)> download;
  std::function<void(int rank, float* dev)> release;
};

/// Host memory ops (CPU group).
inline RankMemoryOps host_memory_ops() {
  RankMemoryOps m;
  m.alloc = [](int, int64_t n) { return new float[static_cast<size_t>(n > 0 ? n : 1)]; };
  m.upload = [](int, float* d, const float* h, int64_t n) { std::memcpy(d, h, static_cast<size_t>(n) * 4); };
  m.download = [](int, float* h, const float* d, int64_t n) { std::memcpy(h, d, static_cast<size_t>(n) * 4); };
  m.release = [](int, float* d) { delete[] d; };
  return m;
}

/// Rank r's random data of `count` floats (normal, mixed magnitudes so the order matters).
inline std::vector<float> rank_data(int r, int64_t count, uint32_t seed) {
  std::mt19937 g(seed * 1000003u + static_cast<uint32_t>(r));
  std::normal_distribution<float> d(0.0f, 1.0f);
  std::vector<float> v(static_cast<size_t>(count));
  for (auto& x : v) x = d(g) * (1.0f + static_cast<float>(g() % 1000));
  return v;
}

inline bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * 4) == 0;
}

/// Runs fn(rank) on one thread per rank and waits.
inline void on_ranks(int R, const std::function<void(int)>& fn) {
  std::vector<std::thread> t;
  for (int r = 0; r < R; ++r) t.emplace_back(fn, r);
  for (auto& x : t) x.join();
}

/// All three collectives (and a barrier) on `group` for `count` floats.
inline void check_collectives(const std::vector<comm::Comm*>& group, const RankMemoryOps& mem, int64_t count,
                              uint32_t seed) {
  const int R = static_cast<int>(group.size());
  SCOPED_TRACE("R=" + std::to_string(R) + " count=" + std::to_string(count) + " transport=" + group[0]->name());
  std::vector<std::vector<float>> in(static_cast<size_t>(R));
  for (int r = 0; r < R; ++r) in[r] = rank_data(r, count, seed);
  // Expected rank-order sum, computed here.
  std::vector<float> sum(in[0]);
  for (int r = 1; r < R; ++r)
    for (int64_t i = 0; i < count; ++i) sum[i] += in[r][i];

  std::vector<std::vector<float>> reduced(static_cast<size_t>(R)), gathered(static_cast<size_t>(R));
  std::vector<std::vector<float>> bcast(static_cast<size_t>(R) * static_cast<size_t>(R));
  std::vector<int> errors(static_cast<size_t>(R), 0);
  on_ranks(R, [&](int r) {
    comm::Comm& c = *group[r];
    float* buf = mem.alloc(r, count);
    float* all = mem.alloc(r, R * count);
    mem.upload(r, buf, in[r].data(), count);
    errors[r] += !c.all_reduce_sum_f32(buf, count).ok();
    reduced[r].resize(static_cast<size_t>(count));
    mem.download(r, reduced[r].data(), buf, count);
    mem.upload(r, buf, in[r].data(), count);
    errors[r] += !c.all_gather_f32(buf, count, all).ok();
    gathered[r].resize(static_cast<size_t>(R * count));
    mem.download(r, gathered[r].data(), all, R * count);
    for (int root = 0; root < R; ++root) {
      mem.upload(r, buf, in[r].data(), count);
      errors[r] += !c.broadcast_f32(buf, count, root).ok();
      bcast[r * R + root].resize(static_cast<size_t>(count));
      mem.download(r, bcast[r * R + root].data(), buf, count);
    }
    errors[r] += !c.barrier().ok();
    mem.release(r, buf);
    mem.release(r, all);
  });
  std::vector<float> concat;
  for (int r = 0; r < R; ++r) concat.insert(concat.end(), in[r].begin(), in[r].end());
  for (int r = 0; r < R; ++r) {
    EXPECT_EQ(errors[r], 0) << "rank " << r;
    EXPECT_TRUE(same_bits(reduced[r], sum)) << "all_reduce on rank " << r << " is not the rank-order sum";
    EXPECT_TRUE(same_bits(gathered[r], concat)) << "all_gather on rank " << r;
    for (int root = 0; root < R; ++root)
      EXPECT_TRUE(same_bits(bcast[r * R + root], in[root])) << "broadcast root " << root << " on rank " << r;
  }
}

}  // namespace ds4::test
