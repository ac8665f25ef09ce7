// NCCL rank group (label gpu): the same collective checks as the CPU group (collective_checks.h:
// rank-order bits on every rank, 1 element to ~12 MiB) on a one-rank group, and on R ranks for
// every R in {2, 4, 8} that the machine's GPUs allow; Comm::abort / rearm at R = 2 and 4 (as many
// as the GPUs allow). Exits 77 without a CUDA device.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <future>
#include <string>
#include <thread>

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

// Comm::abort on the NCCL group (issue 20): ranks 0..R-2 wait in an all-gather (enqueued, then
// cudaStreamSynchronize) that rank R-1 never joins; its abort (ncclCommAbort of every rank's
// communicator) ends the pending collective, so each waiting rank returns kAbortedMessage, twice
// (the pending call and a later one), instead of hanging (under the emulator: instead of its
// deadlock report, exit 134). rearm() makes new communicators: the group's bits are right again.
void check_abort(int R) {
  std::vector<int> devs;
  for (int r = 0; r < R; ++r) devs.push_back(r);
  auto g = comm::make_nccl_group(devs);
  ASSERT_TRUE(g.ok()) << g.error().message;
  std::vector<comm::Comm*> raw;
  for (auto& c : *g) raw.push_back(c.get());
  const test::RankMemoryOps mem = cuda_memory_ops(devs);
  constexpr int64_t n = 1000;
  std::vector<float*> send(static_cast<size_t>(R), nullptr), recv(static_cast<size_t>(R), nullptr);
  for (int r = 0; r < R; ++r) {
    send[size_t(r)] = mem.alloc(r, n);
    recv[size_t(r)] = mem.alloc(r, n * R);
    const std::vector<float> ones(size_t(n), float(r + 1));
    mem.upload(r, send[size_t(r)], ones.data(), n);
  }
  std::vector<std::future<std::string>> waiting;
  for (int r = 0; r + 1 < R; ++r)  // one all-reduce that works, then two all-gathers
    waiting.push_back(std::async(std::launch::async, [&, r] {
      if (auto x = raw[size_t(r)]->all_reduce_sum_f32(send[size_t(r)], n); !x) return "first: " + x.error().message;
      std::string out;
      for (int k = 0; k < 2; ++k) {
        auto y = raw[size_t(r)]->all_gather_f32(send[size_t(r)], n, recv[size_t(r)]);
        out += y ? "ok;" : y.error().message + ";";
      }
      return out;
    }));
  ASSERT_TRUE(raw[size_t(R - 1)]->all_reduce_sum_f32(send[size_t(R - 1)], n));
  std::vector<float> sum(static_cast<size_t>(n));
  mem.download(R - 1, sum.data(), send[size_t(R - 1)], n);
  EXPECT_EQ(sum[0], float(R * (R + 1) / 2));
  std::this_thread::sleep_for(std::chrono::milliseconds(20));  // the others wait in all_gather now
  raw[size_t(R - 1)]->abort();
  const std::string want = std::string(comm::kAbortedMessage) + ";" + comm::kAbortedMessage + ";";
  for (auto& f : waiting) {
    ASSERT_EQ(f.wait_for(std::chrono::seconds(30)), std::future_status::ready) << "a rank still waits";
    EXPECT_EQ(f.get(), want);
  }
  auto b = raw[size_t(R - 1)]->barrier();  // the aborting rank's own later calls fail too
  ASSERT_FALSE(b);
  EXPECT_EQ(b.error().message, comm::kAbortedMessage);
  raw[0]->rearm();
  for (int r = 0; r < R; ++r) {
    mem.release(r, send[size_t(r)]);
    mem.release(r, recv[size_t(r)]);
  }
  test::check_collectives(raw, mem, 1000, 23);
  raw[0]->rearm();  // not aborted: nothing to do
  test::check_collectives(raw, mem, 65537, 29);
}

TEST(NcclCollectives, AbortReleasesWaitingRanksAndRearmRestores) {
  {  // one rank (runs on any one GPU): ncclCommAbort, later calls refused, ncclCommInitAll again
    const std::vector<int> devs{0};
    auto g = comm::make_nccl_group(devs);
    ASSERT_TRUE(g.ok()) << g.error().message;
    comm::Comm& c = *(*g)[0];
    c.abort();
    c.abort();  // idempotent
    auto b = c.barrier();
    ASSERT_FALSE(b);
    EXPECT_EQ(b.error().message, comm::kAbortedMessage);
    c.rearm();
    test::check_collectives({&c}, cuda_memory_ops(devs), 1000, 31);
  }
  const int n = device_count();
  int ran = 0;
  for (int R : {2, 4})
    if (R <= n) {
      SCOPED_TRACE(::testing::Message() << "R " << R);
      check_abort(R);
      ++ran;
    }
  std::printf("NCCL groups aborted and re-armed: %d (%d GPUs)\n", ran, n);
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
