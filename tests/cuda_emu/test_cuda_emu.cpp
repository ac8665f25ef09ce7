// tests/cuda_emu/test_cuda_emu.cpp — cuda_emu_test (labels emu, unit): each feature of the CUDA
// emulator against values computed here by plain loops: kernels and built-ins, barriers, warp
// collectives, atomics, shared memory, copies / memsets of every kind, streams, events, host
// functions, and the adversarial parts: a host dereference of device memory faults, a missing
// cudaStreamWaitEvent gives a wrong result under some seed (and never with the wait), and so does
// a legacy-stream cudaMemset / cudaMemcpy read by a non-blocking stream without a wait, pinned vs
// pageable copy timing, uninitialised cudaMalloc memory, sm_75 launch limits, VRAM budget.
#include <gtest/gtest.h>
#include <nccl.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <numeric>
#include <thread>
#include <vector>

#include "kernels/cuda/common/mma.cuh"
#include "kernels/cuda/launch.h"
#include "tests/cuda_emu/test_cuda_emu_kernels.h"

namespace ds4::emutest {
namespace {

#define CK(x) ASSERT_EQ((x), cudaSuccess)

class CudaEmu : public ::testing::Test {
 protected:
  void SetUp() override { ds4::emu::reset(); }
};

template <class T>
T* dev_alloc(size_t n) {
  void* p = nullptr;
  EXPECT_EQ(cudaMalloc(&p, n * sizeof(T)), cudaSuccess);
  return static_cast<T*>(p);
}

TEST_F(CudaEmu, AxpyOverManyBlocks) {
  const int n = 100000;
  std::vector<float> x(n), y(n), want(n);
  for (int i = 0; i < n; ++i) x[size_t(i)] = 0.5f * float(i % 97), y[size_t(i)] = float(i % 13) - 6.0f;
  for (int i = 0; i < n; ++i) want[size_t(i)] = std::fmaf(3.0f, x[size_t(i)], y[size_t(i)]);
  float* dx = dev_alloc<float>(n);
  float* dy = dev_alloc<float>(n);
  CK(cudaMemcpy(dx, x.data(), n * 4, cudaMemcpyHostToDevice));
  CK(cudaMemcpy(dy, y.data(), n * 4, cudaMemcpyHostToDevice));
  CK(launch_axpy(nullptr, dx, dy, 3.0f, n));
  std::vector<float> got(n);
  CK(cudaMemcpy(got.data(), dy, n * 4, cudaMemcpyDeviceToHost));
  EXPECT_EQ(std::memcmp(got.data(), want.data(), n * 4), 0);
  EXPECT_EQ(ds4::emu::stats().blocks, uint64_t((n + 127) / 128));
  CK(cudaFree(dx));
  CK(cudaFree(dy));
}

TEST_F(CudaEmu, StaticSharedTreeSumNeedsBarriers) {
  const int nb = 3000;  // thousands of 256-thread blocks with 9 barriers each
  std::vector<int> x(size_t(nb) * 256);
  for (size_t i = 0; i < x.size(); ++i) x[i] = int(i * 7 % 1001) - 500;
  int* dx = dev_alloc<int>(x.size());
  int* dout = dev_alloc<int>(nb);
  CK(cudaMemcpy(dx, x.data(), x.size() * 4, cudaMemcpyHostToDevice));
  CK(launch_block_sum(nullptr, dx, nb, dout));
  std::vector<int> got(nb);
  CK(cudaMemcpy(got.data(), dout, nb * 4, cudaMemcpyDeviceToHost));
  for (int b = 0; b < nb; ++b)
    ASSERT_EQ(got[size_t(b)], std::accumulate(x.begin() + b * 256, x.begin() + (b + 1) * 256, 0)) << b;
}

TEST_F(CudaEmu, DynamicSharedReverse) {
  const int nb = 7, bs = 320;
  std::vector<float> x(nb * bs);
  for (size_t i = 0; i < x.size(); ++i) x[i] = float(i);
  float* dx = dev_alloc<float>(x.size());
  float* dy = dev_alloc<float>(x.size());
  CK(cudaMemcpy(dx, x.data(), x.size() * 4, cudaMemcpyHostToDevice));
  CK(launch_reverse(nullptr, dx, dy, nb, bs));
  std::vector<float> got(x.size());
  CK(cudaMemcpy(got.data(), dy, x.size() * 4, cudaMemcpyDeviceToHost));
  for (int b = 0; b < nb; ++b)
    for (int t = 0; t < bs; ++t) ASSERT_EQ(got[size_t(b * bs + t)], x[size_t(b * bs + bs - 1 - t)]);
}

// ---- built-ins, warp collectives, atomics (kernels defined here: this file is emulated C++ too) ----
__global__ void geometry_kernel(unsigned* out) {
  const unsigned b = (blockIdx.z * gridDim.y + blockIdx.y) * gridDim.x + blockIdx.x;
  const unsigned t = (threadIdx.z * blockDim.y + threadIdx.y) * blockDim.x + threadIdx.x;
  const unsigned nt = blockDim.x * blockDim.y * blockDim.z;
  out[b * nt + t] = (blockIdx.x << 24) | (blockIdx.y << 20) | (blockIdx.z << 16) | (threadIdx.x << 8) |
                    (threadIdx.y << 4) | threadIdx.z;
}

TEST_F(CudaEmu, ThreeDimensionalGeometry) {
  const dim3 g(3, 2, 2), b(5, 3, 2);
  const size_t n = 12 * 30;
  unsigned* d = dev_alloc<unsigned>(n);
  DS4_LAUNCH(geometry_kernel, g, b, 0, nullptr, d);
  CK(cudaGetLastError());
  std::vector<unsigned> got(n);
  CK(cudaMemcpy(got.data(), d, n * 4, cudaMemcpyDeviceToHost));
  size_t i = 0;
  for (unsigned bz = 0; bz < 2; ++bz)
    for (unsigned by = 0; by < 2; ++by)
      for (unsigned bx = 0; bx < 3; ++bx)
        for (unsigned tz = 0; tz < 2; ++tz)
          for (unsigned ty = 0; ty < 3; ++ty)
            for (unsigned tx = 0; tx < 5; ++tx, ++i)
              ASSERT_EQ(got[i], (bx << 24) | (by << 20) | (bz << 16) | (tx << 8) | (ty << 4) | tz) << i;
}

struct WarpOut {
  float xor_sum[64];
  int shfl[64];
  unsigned down[64], up[64], xor8[64];
  unsigned ballot[64];
  int any[64], all[64];
};

__global__ void warp_kernel(const float* v, WarpOut* o) {
  const unsigned t = threadIdx.x, lane = t % 32;
  float acc = v[t];
  for (int off = 16; off > 0; off >>= 1) acc += __shfl_xor_sync(0xFFFFFFFFu, acc, off);
  o->xor_sum[t] = acc;
  o->shfl[t] = __shfl_sync(0xFFFFFFFFu, int(t * 3), int(lane + 5));  // lane + 5 mod 32
  o->down[t] = __shfl_down_sync(0xFFFFFFFFu, t, 3u);
  o->up[t] = __shfl_up_sync(0xFFFFFFFFu, t, 2u, 8);
  o->xor8[t] = __shfl_xor_sync(0xFFFFFFFFu, t, 9, 8);  // width 8: source in a later group -> own
  o->ballot[t] = __ballot_sync(0xFFFFFFFFu, (t % 3) == 0);
  o->any[t] = __any_sync(0xFFFFFFFFu, t == 40);
  o->all[t] = __all_sync(0xFFFFFFFFu, t < 60);
}

TEST_F(CudaEmu, WarpShufflesAndVotes) {
  std::vector<float> v(64);
  for (int i = 0; i < 64; ++i) v[size_t(i)] = float(i) * 0.25f - 3.0f;
  float* dv = dev_alloc<float>(64);
  WarpOut* d = dev_alloc<WarpOut>(1);
  CK(cudaMemcpy(dv, v.data(), 256, cudaMemcpyHostToDevice));
  DS4_LAUNCH(warp_kernel, 1, 64, 0, nullptr, dv, d);
  CK(cudaGetLastError());
  WarpOut o;
  CK(cudaMemcpy(&o, d, sizeof o, cudaMemcpyDeviceToHost));
  for (unsigned t = 0; t < 64; ++t) {
    const unsigned w = t / 32 * 32, lane = t % 32;
    // The butterfly's own order: level by level, acc_l + acc_{l^off}.
    float lv[32];
    for (unsigned l = 0; l < 32; ++l) lv[l] = v[w + l];
    for (unsigned off = 16; off > 0; off >>= 1) {
      float nx[32];
      for (unsigned l = 0; l < 32; ++l) nx[l] = lv[l] + lv[l ^ off];
      std::memcpy(lv, nx, sizeof lv);
    }
    EXPECT_EQ(o.xor_sum[t], lv[lane]) << t;
    EXPECT_EQ(o.shfl[t], int((w + (lane + 5) % 32) * 3)) << t;
    EXPECT_EQ(o.down[t], lane + 3 < 32 ? t + 3 : t) << t;
    EXPECT_EQ(o.up[t], lane % 8 < 2 ? t : t - 2) << t;
    const unsigned src = lane ^ 9u;
    EXPECT_EQ(o.xor8[t], src >= (lane & ~7u) + 8 ? t : w + src) << t;
    unsigned want_ballot = 0;
    for (unsigned l = 0; l < 32; ++l)
      if ((w + l) % 3 == 0) want_ballot |= 1u << l;
    EXPECT_EQ(o.ballot[t], want_ballot) << t;
    EXPECT_EQ(o.any[t], t >= 32 ? 1 : 0) << t;
    EXPECT_EQ(o.all[t], t < 32 ? 1 : 0) << t;
  }
}

__global__ void atomics_kernel(int* counters, unsigned* umax) {
  atomicAdd(&counters[0], 1);
  atomicAdd(&counters[1], int(threadIdx.x));
  atomicMax(&counters[2], int(blockIdx.x * 1000 + threadIdx.x));
  atomicMin(&counters[3], -int(threadIdx.x));
  atomicCAS(&counters[4], 0, int(blockIdx.x) + 1);  // only the first thread to run wins
  atomicMax(umax, blockIdx.x);
  atomicSub(&counters[5], 2);
}

TEST_F(CudaEmu, IntegerAtomics) {
  int* c = dev_alloc<int>(6);
  unsigned* u = dev_alloc<unsigned>(1);
  CK(cudaMemset(c, 0, 24));
  CK(cudaMemset(u, 0, 4));
  DS4_LAUNCH(atomics_kernel, 50, 96, 0, nullptr, c, u);
  CK(cudaGetLastError());
  int got[6];
  unsigned gu;
  CK(cudaMemcpy(got, c, 24, cudaMemcpyDeviceToHost));
  CK(cudaMemcpy(&gu, u, 4, cudaMemcpyDeviceToHost));
  EXPECT_EQ(got[0], 50 * 96);
  EXPECT_EQ(got[1], 50 * (95 * 96 / 2));
  EXPECT_EQ(got[2], 49 * 1000 + 95);
  EXPECT_EQ(got[3], -95);
  EXPECT_GE(got[4], 1);
  EXPECT_LE(got[4], 50);
  EXPECT_EQ(got[5], -2 * 50 * 96);
  EXPECT_EQ(gu, 49u);
}

// ---- mma.sync m8n8k16 s8 (kernels/cuda/common/mma.cuh, emulated from the PTX fragment layout) -------
/// A: 8x16 row-major int8, B: 16x8 int8 stored column-major (B[k][n] at bt[n*16+k]), C/D: 8x8 row-major.
__global__ void mma_kernel(const int8_t* A, const int8_t* bt, const int* C, int* D) {
  const int lane = int(threadIdx.x), g = lane / 4, q = lane % 4;
  int a = 0, b = 0;
  for (int i = 0; i < 4; ++i) {
    a |= int(uint32_t(uint8_t(A[g * 16 + 4 * q + i])) << (8 * i));
    b |= int(uint32_t(uint8_t(bt[g * 16 + 4 * q + i])) << (8 * i));
  }
  int d0, d1;
  ds4::cuda::mma_m8n8k16_s8(d0, d1, a, b, C[g * 8 + 2 * q], C[g * 8 + 2 * q + 1]);
  D[g * 8 + 2 * q] = d0;
  D[g * 8 + 2 * q + 1] = d1;
}

TEST_F(CudaEmu, MmaM8n8k16FragmentsEqualAPlainIntMatmul) {
  uint32_t r = 12345;
  auto next = [&] { return r = r * 1664525u + 1013904223u; };
  for (int rep = 0; rep < 20; ++rep) {
    std::vector<int8_t> A(128), Bt(128);
    std::vector<int> C(64), want(64), got(64);
    for (auto& v : A) v = int8_t(next() >> 24);
    for (auto& v : Bt) v = int8_t(next() >> 24);
    if (rep == 0) std::fill(A.begin(), A.end(), int8_t(-128)), std::fill(Bt.begin(), Bt.end(), int8_t(-128));
    for (auto& v : C) v = int(next() % 20001) - 10000;
    for (int m = 0; m < 8; ++m)
      for (int n = 0; n < 8; ++n) {
        int acc = C[size_t(m * 8 + n)];
        for (int k = 0; k < 16; ++k) acc += int(A[size_t(m * 16 + k)]) * int(Bt[size_t(n * 16 + k)]);
        want[size_t(m * 8 + n)] = acc;
      }
    int8_t* dA = dev_alloc<int8_t>(128);
    int8_t* dB = dev_alloc<int8_t>(128);
    int* dC = dev_alloc<int>(64);
    int* dD = dev_alloc<int>(64);
    CK(cudaMemcpy(dA, A.data(), 128, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(dB, Bt.data(), 128, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(dC, C.data(), 256, cudaMemcpyHostToDevice));
    DS4_LAUNCH(mma_kernel, 1, 32, 0, nullptr, dA, dB, dC, dD);
    CK(cudaGetLastError());
    CK(cudaMemcpy(got.data(), dD, 256, cudaMemcpyDeviceToHost));
    ASSERT_EQ(got, want) << "rep " << rep;
  }
}

__global__ void minmax_kernel(int* o) {
  o[0] = min(3, -4);
  o[1] = max(7u, 9u);
  o[2] = int(min(2.5f, -1.0f));
  o[3] = int(max(int64_t(1) << 40, int64_t(5)) >> 40);
  o[4] = __float2int_rn(2.5f) + __float2int_rn(-3.5f);  // ties to even: 2 + -4
  o[5] = __popc(0xF0F0u) + __clz(1) + __ffs(8);         // 8 + 31 + 4
}

TEST_F(CudaEmu, MinMaxAndIntegerIntrinsics) {
  int* d = dev_alloc<int>(6);
  DS4_LAUNCH(minmax_kernel, 1, 1, 0, nullptr, d);
  int o[6];
  CK(cudaMemcpy(o, d, sizeof o, cudaMemcpyDeviceToHost));
  EXPECT_EQ(o[0], -4);
  EXPECT_EQ(o[1], 9);
  EXPECT_EQ(o[2], -1);
  EXPECT_EQ(o[3], 1);
  EXPECT_EQ(o[4], -2);
  EXPECT_EQ(o[5], 43);
}

// ---- sm_75 launch limits ------------------------------------------------------------------------------
__global__ void empty_kernel(int) {}

TEST_F(CudaEmu, LaunchLimitsOfSm75) {
  const auto launch = [](dim3 g, dim3 b, size_t smem) {
    DS4_LAUNCH(empty_kernel, g, b, smem, nullptr, 0);
    return cudaGetLastError();
  };
  EXPECT_EQ(launch(1, 1024, 0), cudaSuccess);
  EXPECT_EQ(launch(1, 1025, 0), cudaErrorInvalidConfiguration);
  EXPECT_EQ(launch(1, dim3(32, 32, 2), 0), cudaErrorInvalidConfiguration);  // 2048 threads
  EXPECT_EQ(launch(1, dim3(1, 1, 65), 0), cudaErrorInvalidConfiguration);
  EXPECT_EQ(launch(1, dim3(1, 1, 64), 0), cudaSuccess);
  EXPECT_EQ(launch(0, 32, 0), cudaErrorInvalidConfiguration);
  EXPECT_EQ(launch(dim3(1, 65536), 32, 0), cudaErrorInvalidConfiguration);
  EXPECT_EQ(launch(dim3(1, 1, 65536), 32, 0), cudaErrorInvalidConfiguration);
  EXPECT_EQ(launch(1, 32, 48 * 1024), cudaSuccess);
  EXPECT_EQ(launch(1, 32, 48 * 1024 + 1), cudaErrorInvalidValue);
  EXPECT_EQ(cudaFuncSetAttribute(empty_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, 64 * 1024 + 1),
            cudaErrorInvalidValue);
  EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidValue);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);  // reset by the read
  CK(cudaFuncSetAttribute(empty_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, 64 * 1024));
  EXPECT_EQ(launch(1, 32, 64 * 1024), cudaSuccess);
  EXPECT_EQ(launch(1, 32, 64 * 1024 + 16), cudaErrorInvalidValue);
  // The failed launch left the sticky-free last error, readable once.
  DS4_LAUNCH(empty_kernel, 1, 2000, 0, nullptr, 0);
  EXPECT_EQ(cudaPeekAtLastError(), cudaErrorInvalidConfiguration);
  EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidConfiguration);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
  CK(cudaDeviceSynchronize());
}

// ---- device memory ---------------------------------------------------------------------------------------
TEST_F(CudaEmu, UninitialisedDeviceMemoryIsGarbage) {
  float* d = dev_alloc<float>(1000);
  std::vector<float> got(1000, 0.0f);
  CK(cudaMemcpy(got.data(), d, 4000, cudaMemcpyDeviceToHost));
  for (float v : got) ASSERT_TRUE(std::isnan(v));
  CK(cudaMemset(d, 0, 4000));
  CK(cudaMemcpy(got.data(), d, 4000, cudaMemcpyDeviceToHost));
  for (float v : got) ASSERT_EQ(v, 0.0f);
}

TEST_F(CudaEmu, HostDereferenceOfDevicePointerFaults) {
  if (const char* e = std::getenv("DS4_CUDA_EMU_NO_PROTECT"); e && *e && *e != '0')
    GTEST_SKIP() << "DS4_CUDA_EMU_NO_PROTECT disables the protection";
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  int* d = dev_alloc<int>(16);
  CK(cudaMemset(d, 0, 64));
  CK(cudaDeviceSynchronize());
  EXPECT_DEATH({ *const_cast<volatile int*>(d) = 1; }, "");
  EXPECT_DEATH({ std::printf("%d\n", *const_cast<volatile int*>(d + 3)); }, "");
}

TEST_F(CudaEmu, CopiesRejectWrongKindsAndRanges) {
  int* d = dev_alloc<int>(16);
  int h[16] = {};
  EXPECT_EQ(cudaMemcpy(d, h, 64, cudaMemcpyDeviceToHost), cudaErrorInvalidValue);  // directions swapped
  EXPECT_EQ(cudaMemcpy(h, d, 65, cudaMemcpyDeviceToHost), cudaErrorInvalidValue);  // past the allocation
  EXPECT_EQ(cudaMemcpy(h, d, 64, cudaMemcpyDefault), cudaSuccess);
  EXPECT_EQ(cudaFree(d + 1), cudaErrorInvalidValue);
  EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidValue);
  CK(cudaFree(d));
}

TEST_F(CudaEmu, VramBudget) {
  ds4::emu::set_vram_bytes(0, 64u << 20);
  size_t fr = 0, total = 0;
  CK(cudaMemGetInfo(&fr, &total));
  EXPECT_EQ(total, 64u << 20);
  EXPECT_EQ(fr, total);
  void *a = nullptr, *b = nullptr;
  CK(cudaMalloc(&a, 40u << 20));
  CK(cudaMemGetInfo(&fr, &total));
  EXPECT_EQ(fr, 24u << 20);
  EXPECT_EQ(cudaMalloc(&b, 30u << 20), cudaErrorMemoryAllocation);
  EXPECT_EQ(cudaGetLastError(), cudaErrorMemoryAllocation);
  CK(cudaFree(a));
  CK(cudaMalloc(&b, 60u << 20));
  CK(cudaFree(b));
}

TEST_F(CudaEmu, DevicePropertiesAreSm75) {
  cudaDeviceProp p;
  CK(cudaGetDeviceProperties(&p, 0));
  EXPECT_EQ(p.major * 10 + p.minor, 75);
  EXPECT_EQ(p.maxThreadsPerBlock, 1024);
  EXPECT_EQ(p.sharedMemPerBlock, 48u * 1024);
  EXPECT_EQ(p.sharedMemPerBlockOptin, 64u * 1024);
  int n = 0;
  CK(cudaGetDeviceCount(&n));
  EXPECT_EQ(n, 1);
  EXPECT_EQ(cudaSetDevice(1), cudaErrorInvalidDevice);
  ds4::emu::set_device_count(3);
  CK(cudaGetDeviceCount(&n));
  EXPECT_EQ(n, 3);
  CK(cudaSetDevice(2));
  int d = -1;
  CK(cudaGetDevice(&d));
  EXPECT_EQ(d, 2);
  void* p2 = nullptr;
  CK(cudaMalloc(&p2, 100));
  cudaPointerAttributes at;
  CK(cudaPointerGetAttributes(&at, p2));
  EXPECT_EQ(at.type, cudaMemoryTypeDevice);
  EXPECT_EQ(at.device, 2);
  CK(cudaFree(p2));
  CK(cudaSetDevice(0));
}

// ---- streams, events, pinned vs pageable ---------------------------------------------------------------
__global__ void fill_kernel(int* p, int n, int v) {
  for (int i = int(blockIdx.x * blockDim.x + threadIdx.x); i < n; i += int(gridDim.x * blockDim.x)) p[i] = v + i;
}
__global__ void copy_plus_kernel(const int* a, int* b, int n) {
  for (int i = int(blockIdx.x * blockDim.x + threadIdx.x); i < n; i += int(gridDim.x * blockDim.x)) b[i] = a[i] + 1;
}

/// Producer on stream 1, consumer on stream 2; returns whether the consumer saw the producer's data.
bool producer_consumer(uint64_t seed, bool wait) {
  ds4::emu::set_seed(seed);
  const int n = 4096;
  int* a = dev_alloc<int>(n);
  int* b = dev_alloc<int>(n);
  cudaStream_t s1, s2;
  cudaEvent_t e;
  EXPECT_EQ(cudaStreamCreateWithFlags(&s1, cudaStreamNonBlocking), cudaSuccess);
  EXPECT_EQ(cudaStreamCreateWithFlags(&s2, cudaStreamNonBlocking), cudaSuccess);
  EXPECT_EQ(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), cudaSuccess);
  EXPECT_EQ(cudaMemsetAsync(a, 0, n * 4, s1), cudaSuccess);
  DS4_LAUNCH(fill_kernel, 8, 128, 0, s1, a, n, 100);
  EXPECT_EQ(cudaEventRecord(e, s1), cudaSuccess);
  if (wait) {
    EXPECT_EQ(cudaStreamWaitEvent(s2, e, 0), cudaSuccess);
  }
  DS4_LAUNCH(copy_plus_kernel, 8, 128, 0, s2, a, b, n);
  std::vector<int> got(n);
  EXPECT_EQ(cudaMemcpyAsync(got.data(), b, n * 4, cudaMemcpyDeviceToHost, s2), cudaSuccess);  // pageable: sync
  bool right = true;
  for (int i = 0; i < n; ++i) right = right && got[size_t(i)] == 101 + i;
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  cudaStreamDestroy(s1);
  cudaStreamDestroy(s2);
  cudaEventDestroy(e);
  cudaFree(a);
  cudaFree(b);
  return right;
}

TEST_F(CudaEmu, MissingEventWaitChangesTheResultUnderSomeSeed) {
  int wrong_without = 0;
  for (uint64_t seed = 1; seed <= 16; ++seed) {
    EXPECT_TRUE(producer_consumer(seed, true)) << "seed " << seed;
    wrong_without += !producer_consumer(seed, false);
  }
  EXPECT_GT(wrong_without, 0) << "no seed exposed the missing cudaStreamWaitEvent";
}

TEST_F(CudaEmu, PinnedCopiesAreAsynchronousPageableAreNot) {
  const int n = 256;
  int* d = dev_alloc<int>(n);
  int* pinned = nullptr;
  CK(cudaMallocHost(reinterpret_cast<void**>(&pinned), n * 4));
  std::vector<int> pageable(n);
  cudaStream_t s;
  CK(cudaStreamCreate(&s));
  for (int i = 0; i < n; ++i) pageable[size_t(i)] = i, pinned[i] = -1;
  CK(cudaMemcpyAsync(d, pageable.data(), n * 4, cudaMemcpyHostToDevice, s));
  for (int i = 0; i < n; ++i) pageable[size_t(i)] = 7;  // staged at the call: the device gets 0..n-1
  CK(cudaMemcpyAsync(pinned, d, n * 4, cudaMemcpyDeviceToHost, s));
  EXPECT_EQ(pinned[5], -1);  // a host read before synchronising sees the old contents
  CK(cudaStreamSynchronize(s));
  for (int i = 0; i < n; ++i) ASSERT_EQ(pinned[i], i);
  // Pinned source: read when the copy runs, not at the call.
  for (int i = 0; i < n; ++i) pinned[i] = 1000 + i;
  CK(cudaMemcpyAsync(d, pinned, n * 4, cudaMemcpyHostToDevice, s));
  for (int i = 0; i < n; ++i) pinned[i] = 2000 + i;
  CK(cudaMemcpyAsync(pageable.data(), d, n * 4, cudaMemcpyDeviceToHost, s));  // pageable dst: returns when done
  for (int i = 0; i < n; ++i) ASSERT_EQ(pageable[size_t(i)], 2000 + i);
  // cudaHostRegister makes pageable memory pinned.
  CK(cudaHostRegister(pageable.data(), n * 4, cudaHostRegisterDefault));
  EXPECT_EQ(cudaHostRegister(pageable.data() + 4, 16, 0), cudaErrorHostMemoryAlreadyRegistered);
  CK(cudaMemsetAsync(d, 0, n * 4, s));
  CK(cudaMemcpyAsync(pageable.data(), d, n * 4, cudaMemcpyDeviceToHost, s));
  EXPECT_EQ(pageable[3], 2003);
  CK(cudaStreamSynchronize(s));
  EXPECT_EQ(pageable[3], 0);
  CK(cudaHostUnregister(pageable.data()));
  EXPECT_EQ(cudaHostUnregister(pageable.data()), cudaErrorHostMemoryNotRegistered);
  cudaGetLastError();
  CK(cudaStreamDestroy(s));
  CK(cudaFreeHost(pinned));
  CK(cudaFree(d));
}

void record_host_fn(void* p) { static_cast<std::vector<int>*>(p)->push_back(int(static_cast<std::vector<int>*>(p)->size())); }
void api_in_host_fn(void* p) { *static_cast<cudaError_t*>(p) = cudaDeviceSynchronize(); }

TEST_F(CudaEmu, HostFunctionsEventsAndQueries) {
  cudaStream_t s;
  CK(cudaStreamCreate(&s));
  std::vector<int> log;
  cudaEvent_t a, b;
  CK(cudaEventCreate(&a));
  CK(cudaEventCreate(&b));
  EXPECT_EQ(cudaEventQuery(a), cudaSuccess);  // never recorded: complete
  CK(cudaEventRecord(a, s));
  for (int i = 0; i < 3; ++i) CK(cudaLaunchHostFunc(s, record_host_fn, &log));
  cudaError_t inner = cudaSuccess;
  CK(cudaLaunchHostFunc(s, api_in_host_fn, &inner));
  CK(cudaEventRecord(b, s));
  EXPECT_TRUE(log.empty());  // lazy: nothing ran yet
  EXPECT_EQ(cudaStreamQuery(s), cudaErrorNotReady);
  int polls = 0;
  while (cudaEventQuery(b) == cudaErrorNotReady) ++polls;  // polling makes progress
  EXPECT_GT(polls, 0);
  EXPECT_EQ(log, (std::vector<int>{0, 1, 2}));
  EXPECT_EQ(inner, cudaErrorNotPermitted);  // CUDA API calls inside host functions are not allowed
  float ms = -1;
  CK(cudaEventElapsedTime(&ms, a, b));
  EXPECT_GE(ms, 0.0f);
  CK(cudaStreamSynchronize(s));
  EXPECT_EQ(cudaStreamQuery(s), cudaSuccess);
  CK(cudaEventDestroy(a));
  CK(cudaEventDestroy(b));
  CK(cudaStreamDestroy(s));
}

TEST_F(CudaEmu, LegacyStreamSynchronisesWithBlockingStreams) {
  // A blocking stream's kernel, then a legacy-stream copy: ordered without any event, every seed.
  for (uint64_t seed = 1; seed <= 8; ++seed) {
    ds4::emu::set_seed(seed);
    const int n = 1024;
    int* a = dev_alloc<int>(n);
    cudaStream_t s;
    CK(cudaStreamCreate(&s));
    DS4_LAUNCH(fill_kernel, 4, 64, 0, s, a, n, 5);
    std::vector<int> got(n);
    CK(cudaMemcpy(got.data(), a, n * 4, cudaMemcpyDeviceToHost));
    for (int i = 0; i < n; ++i) ASSERT_EQ(got[size_t(i)], 5 + i) << seed;
    CK(cudaStreamDestroy(s));
    CK(cudaFree(a));
  }
}

/// A legacy-stream write of buffer a (a plain cudaMemset to 0, or with `use_memcpy` a plain
/// cudaMemcpy of 3*i from pageable memory), then `pad` unrelated kernels on a stream `s` created
/// with `flags`, then a reader on `s`: b = a + 1. `wait`: `s` waits for an event recorded on the
/// legacy stream after the write. Returns whether the reader saw the write (b[i] = 1 or 3i + 1).
bool legacy_write_then_reader(uint64_t seed, unsigned flags, bool wait, int pad, bool use_memcpy) {
  ds4::emu::set_seed(seed);
  const int n = 1024;
  int* a = dev_alloc<int>(n);
  int* b = dev_alloc<int>(n);
  int* other = dev_alloc<int>(n);
  cudaStream_t s;
  cudaEvent_t e;
  EXPECT_EQ(cudaStreamCreateWithFlags(&s, flags), cudaSuccess);
  EXPECT_EQ(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), cudaSuccess);
  std::vector<int> src(n);
  for (int i = 0; i < n; ++i) src[size_t(i)] = 3 * i;
  if (use_memcpy) {
    EXPECT_EQ(cudaMemcpy(a, src.data(), n * 4, cudaMemcpyHostToDevice), cudaSuccess);  // returns before the DMA lands
  } else {
    EXPECT_EQ(cudaMemset(a, 0, n * 4), cudaSuccess);  // asynchronous, legacy stream
  }
  if (wait) {
    EXPECT_EQ(cudaEventRecord(e, cudaStreamLegacy), cudaSuccess);
    EXPECT_EQ(cudaStreamWaitEvent(s, e, 0), cudaSuccess);
  }
  for (int k = 0; k < pad; ++k) DS4_LAUNCH(fill_kernel, 2, 64, 0, s, other, n, k);
  DS4_LAUNCH(copy_plus_kernel, 4, 64, 0, s, a, b, n);
  std::vector<int> got(n);
  EXPECT_EQ(cudaMemcpyAsync(got.data(), b, n * 4, cudaMemcpyDeviceToHost, s), cudaSuccess);  // pageable: returns when done
  bool right = true;
  for (int i = 0; i < n; ++i) right = right && got[size_t(i)] == (use_memcpy ? 3 * i : 0) + 1;
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  cudaStreamDestroy(s);
  cudaEventDestroy(e);
  cudaFree(a);
  cudaFree(b);
  cudaFree(other);
  return right;
}

// A cudaMemset / cudaMemcpy on the legacy stream is not ordered with a cudaStreamNonBlocking
// stream (CUDA Runtime API, "Stream synchronization behavior"): with 32 kernels queued before the
// reader (as in the backend, where buffers are zeroed long before their first reader), the
// legacy stream's random start delay makes the reader see the old contents under some seed; an
// event wait, or a blocking stream (implicitly ordered with the legacy stream), is right under
// every seed. Without the delay (DS4_CUDA_EMU_LEGACY_DELAY=0) no seed of 1..16 exposed this.
TEST_F(CudaEmu, LegacyStreamWorkIsNotOrderedWithNonBlockingStreams) {
  for (bool use_memcpy : {false, true}) {
    int wrong_without = 0;
    for (uint64_t seed = 1; seed <= 16; ++seed) {
      EXPECT_TRUE(legacy_write_then_reader(seed, cudaStreamNonBlocking, true, 32, use_memcpy))
          << "seed " << seed << (use_memcpy ? " cudaMemcpy" : " cudaMemset");
      EXPECT_TRUE(legacy_write_then_reader(seed, cudaStreamDefault, false, 32, use_memcpy))
          << "blocking stream, seed " << seed << (use_memcpy ? " cudaMemcpy" : " cudaMemset");
      wrong_without += !legacy_write_then_reader(seed, cudaStreamNonBlocking, false, 32, use_memcpy);
    }
    EXPECT_GT(wrong_without, 0) << "no seed exposed the missing wait on the legacy stream's "
                                << (use_memcpy ? "cudaMemcpy" : "cudaMemset");
    std::printf("  legacy %s without a wait: wrong under %d of 16 seeds\n", use_memcpy ? "cudaMemcpy" : "cudaMemset",
                wrong_without);
  }
}

/// Lanes 32..47 wait at __syncthreads, lanes 48..63 at a __syncwarp that names them too.
__global__ void divergent_barrier_kernel(int* p) {
  if (threadIdx.x < 48) __syncthreads();
  else __syncwarp();
  p[threadIdx.x] = 1;
}

TEST_F(CudaEmu, BarrierDeadlockIsReported) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  int* d = dev_alloc<int>(64);
  EXPECT_DEATH(
      {
        DS4_LAUNCH(divergent_barrier_kernel, 1, 64, 0, nullptr, d);
        cudaDeviceSynchronize();
      },
      "barrier deadlock");
}

// A host wait whose stream can never run (a collective the other rank never posts) is a deadlock:
// reported after DS4_CUDA_EMU_DEADLOCK_S with no stream work run by any host thread.
TEST_F(CudaEmu, HostWaitDeadlockIsReported) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_DEATH(
      {
        setenv("DS4_CUDA_EMU_DEADLOCK_S", "1", 1);
        ds4::emu::set_device_count(2);
        std::vector<ncclComm_t> comms(2);
        ncclCommInitAll(comms.data(), 2, nullptr);
        cudaSetDevice(0);
        float* d = dev_alloc<float>(4);
        cudaStream_t s;
        cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
        ncclAllReduce(d, d, 4, ncclFloat, ncclSum, comms[0], s);
        cudaStreamSynchronize(s);
      },
      "no stream work can run and the host waits for it \\(deadlock\\)");
}

// ---- in-process NCCL ------------------------------------------------------------------------------------
TEST_F(CudaEmu, NcclCollectivesOverEmulatedDevices) {
  const int R = 3;
  const size_t n = 1000;
  ds4::emu::set_device_count(R);
  std::vector<ncclComm_t> comms(R);
  ASSERT_EQ(ncclCommInitAll(comms.data(), R, nullptr), ncclSuccess);
  std::vector<float*> send(R), recv(R), gath(R);
  std::vector<cudaStream_t> st(R);
  std::vector<std::vector<float>> in(R, std::vector<float>(n * R));
  for (int r = 0; r < R; ++r) {
    for (size_t i = 0; i < n * R; ++i) in[size_t(r)][i] = float(int(i * 31 + size_t(r) * 7) % 1000) * 0.37f - 100.0f;
    CK(cudaSetDevice(r));
    CK(cudaStreamCreateWithFlags(&st[size_t(r)], cudaStreamNonBlocking));
    send[size_t(r)] = dev_alloc<float>(n * R);
    recv[size_t(r)] = dev_alloc<float>(n);
    gath[size_t(r)] = dev_alloc<float>(n * R);
    CK(cudaMemcpyAsync(send[size_t(r)], in[size_t(r)].data(), n * R * 4, cudaMemcpyHostToDevice, st[size_t(r)]));
  }
  // One host thread drives all ranks inside a group (the way NCCL requires it).
  ASSERT_EQ(ncclGroupStart(), ncclSuccess);
  for (int r = 0; r < R; ++r)
    ASSERT_EQ(ncclAllReduce(send[size_t(r)], recv[size_t(r)], n, ncclFloat, ncclSum, comms[size_t(r)], st[size_t(r)]),
              ncclSuccess);
  ASSERT_EQ(ncclGroupEnd(), ncclSuccess);
  for (int r = 0; r < R; ++r) {
    std::vector<float> got(n);
    CK(cudaSetDevice(r));
    CK(cudaMemcpyAsync(got.data(), recv[size_t(r)], n * 4, cudaMemcpyDeviceToHost, st[size_t(r)]));
    for (size_t i = 0; i < n; ++i) ASSERT_EQ(got[i], (in[0][i] + in[1][i]) + in[2][i]) << r << " " << i;
  }
  // One thread per rank: all-gather, broadcast from rank 2, reduce-scatter (max).
  std::vector<std::vector<float>> g(R), b(R), rs(R);
  std::vector<std::thread> th;
  for (int r = 0; r < R; ++r)
    th.emplace_back([&, r] {
      const size_t u = size_t(r);
      cudaSetDevice(r);
      EXPECT_EQ(ncclAllGather(send[u], gath[u], n, ncclFloat, comms[u], st[u]), ncclSuccess);
      g[u].resize(n * R);
      cudaMemcpyAsync(g[u].data(), gath[u], n * R * 4, cudaMemcpyDeviceToHost, st[u]);
      EXPECT_EQ(ncclBroadcast(send[u], recv[u], n, ncclFloat, 2, comms[u], st[u]), ncclSuccess);
      b[u].resize(n);
      cudaMemcpyAsync(b[u].data(), recv[u], n * 4, cudaMemcpyDeviceToHost, st[u]);
      EXPECT_EQ(ncclReduceScatter(send[u], recv[u], n, ncclFloat, ncclMax, comms[u], st[u]), ncclSuccess);
      rs[u].resize(n);
      cudaMemcpyAsync(rs[u].data(), recv[u], n * 4, cudaMemcpyDeviceToHost, st[u]);
    });
  for (auto& t : th) t.join();
  for (int r = 0; r < R; ++r)
    for (size_t i = 0; i < n; ++i) {
      for (int k = 0; k < R; ++k) ASSERT_EQ(g[size_t(r)][size_t(k) * n + i], in[size_t(k)][i]);
      ASSERT_EQ(b[size_t(r)][i], in[2][i]);
      const size_t j = size_t(r) * n + i;
      ASSERT_EQ(rs[size_t(r)][i], std::max({in[0][j], in[1][j], in[2][j]}));
    }
  // Buffers must be device memory of the communicator's device.
  std::vector<float> host(n);
  CK(cudaSetDevice(0));
  EXPECT_EQ(ncclAllReduce(host.data(), recv[0], n, ncclFloat, ncclSum, comms[0], st[0]), ncclInvalidArgument);
  EXPECT_EQ(ncclAllReduce(send[1], recv[0], n, ncclFloat, ncclSum, comms[0], st[0]), ncclInvalidArgument);
  for (int r = 0; r < R; ++r) {
    CK(cudaSetDevice(r));
    CK(cudaStreamSynchronize(st[size_t(r)]));
    EXPECT_EQ(ncclCommDestroy(comms[size_t(r)]), ncclSuccess);
  }
  CK(cudaSetDevice(0));
}

TEST_F(CudaEmu, NcclCommInitRankFromOneThreadPerRank) {
  ds4::emu::set_device_count(2);
  ncclUniqueId id;
  ASSERT_EQ(ncclGetUniqueId(&id), ncclSuccess);
  ncclComm_t c[2] = {nullptr, nullptr};
  std::thread t1([&] {
    cudaSetDevice(1);
    EXPECT_EQ(ncclCommInitRank(&c[1], 2, id, 1), ncclSuccess);
  });
  CK(cudaSetDevice(0));
  EXPECT_EQ(ncclCommInitRank(&c[0], 2, id, 0), ncclSuccess);
  t1.join();
  int dev = -1, rank = -1, count = 0;
  EXPECT_EQ(ncclCommCuDevice(c[1], &dev), ncclSuccess);
  EXPECT_EQ(ncclCommUserRank(c[1], &rank), ncclSuccess);
  EXPECT_EQ(ncclCommCount(c[0], &count), ncclSuccess);
  EXPECT_EQ(dev, 1);
  EXPECT_EQ(rank, 1);
  EXPECT_EQ(count, 2);
  ncclCommDestroy(c[0]);
  ncclCommDestroy(c[1]);
}

}  // namespace
}  // namespace ds4::emutest
