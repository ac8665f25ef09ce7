// NCCL rank group (label gpu): the same collective checks as the CPU group (collective_checks.h:
// rank-order bits on every rank, 1 element to ~12 MiB) on a one-rank group, and on R ranks for
// every R in {2, 4, 8} that the machine's GPUs allow. Exits 77 without a CUDA device.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstdio>

#include "collective_checks.h"

namespace ds4 {
namespace {

int device_count() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess ? n : 0;
}

test::RankMemoryOps cuda_memory_ops(std::vector<int> devs) {
  test::RankMemoryOps m;
  m.alloc = [devs](int r, int64_t n) {
    float* p = nullptr;
    EXPECT_EQ(cudaSetDevice(devs[r]), cudaSuccess);
    EXPECT_EQ(cudaMalloc(&p, static_cast<size_t>(n > 0 ? n : 1) * sizeof(float)), cudaSuccess);
    return p;
  };
  m.upload = [devs](int r, float* d, const float* h, int64_t n) {
    EXPECT_EQ(cudaSetDevice(devs[r]), cudaSuccess);
    EXPECT_EQ(cudaMemcpy(d, h, static_cast<size_t>(n) * sizeof(float), cudaMemcpyHostToDevice), cudaSuccess);
  };
  m.download = [devs](int r, float* h, const float* d, int64_t n) {
    EXPECT_EQ(cudaSetDevice(devs[r]), cudaSuccess);
    EXPECT_EQ(cudaMemcpy(h, d, static_cast<size_t>(n) * sizeof(float), cudaMemcpyDeviceToHost), cudaSuccess);
  };
  m.release = [devs](int r, float* d) {
    cudaSetDevice(devs[r]);
    cudaFree(d);
  };
  return m;
}

void check_group(int R) {
  std::vector<int> devs;
  for (int r = 0; r < R; ++r) devs.push_back(r);
  auto g = comm::make_nccl_group(devs);
  ASSERT_TRUE(g.ok()) << g.error().message;
  std::vector<comm::Comm*> raw;
  for (auto& c : *g) raw.push_back(c.get());
  uint32_t seed = 11;
  for (int64_t n : {int64_t{1}, int64_t{3}, int64_t{1000}, int64_t{65537}, int64_t{(3 << 20) + 5}})
    test::check_collectives(raw, cuda_memory_ops(devs), n, seed++);
}

TEST(NcclCollectives, OneRankGroup) { check_group(1); }

TEST(NcclCollectives, AllRankCountsTheGpusAllow) {
  const int n = device_count();
  int ran = 0;
  for (int R : {2, 4, 8})
    if (R <= n) {
      check_group(R);
      ++ran;
    }
  std::printf("NCCL groups of R > 1 checked: %d (%d GPUs)\n", ran, n);
}

TEST(NcclCollectives, MissingDeviceIsAnError) {
  const int devs[] = {device_count()};
  auto g = comm::make_nccl_group(devs);
  ASSERT_FALSE(g.ok());
  EXPECT_NE(g.error().message.find("does not exist"), std::string::npos) << g.error().message;
}

}  // namespace
}  // namespace ds4

int main(int argc, char** argv) {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) {
    std::printf("SKIPPED: no CUDA device\n");
    return 77;
  }
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
