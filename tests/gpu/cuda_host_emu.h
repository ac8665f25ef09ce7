// tests/gpu/cuda_host_emu.h — just enough CUDA on the host to run this project's kernel code in
// CPU-only unit tests: the SIMD/integer intrinsics the kernels use, emulated from their documented
// semantics (CUDA Math API "SIMD Intrinsics", "Integer Intrinsics", "Single Precision
// Intrinsics", "Warp Shuffle Functions"), and a block runner that executes a kernel body on
// blockDim host threads with std::barriers as __syncthreads / warp shuffles and function-local
// statics as __shared__ memory. Kernels must reach barriers uniformly (whole warps / blocks).
// Include this BEFORE any kernels/cuda header, in a translation unit compiled without nvcc.
#pragma once

#ifdef __CUDACC__
#error "cuda_host_emu.h is for host-only translation units"
#endif

#include <barrier>
#include <cstdint>
#include <memory>
#include <thread>
#include <vector>

#define __device__
#define __global__
#define __shared__ static
#define __forceinline__ inline
#define __launch_bounds__(n)

namespace ds4::emu {
inline uint32_t bytewise(uint32_t a, uint32_t b, int op) {
  uint32_t r = 0;
  for (int i = 0; i < 4; ++i) {
    const uint32_t x = (a >> (8 * i)) & 0xFF, y = (b >> (8 * i)) & 0xFF;
    const uint32_t v = op == 0 ? (x != y ? 0xFFu : 0u) : op == 1 ? ((x - y) & 0xFF) : ((x + y) & 0xFF);
    r |= v << (8 * i);
  }
  return r;
}
struct Dim3 {
  unsigned x = 0, y = 0, z = 0;
};
inline std::barrier<>* g_block_barrier = nullptr;
inline std::vector<std::barrier<>*> g_warp_barriers;  // one per warp of the running block
inline float g_shfl_slots[32][32];                     // [warp][lane]
}  // namespace ds4::emu

/// Per-byte a != b -> 0xFF, else 0.
inline uint32_t __vcmpne4(uint32_t a, uint32_t b) { return ds4::emu::bytewise(a, b, 0); }
/// Per-byte a - b modulo 256.
inline uint32_t __vsub4(uint32_t a, uint32_t b) { return ds4::emu::bytewise(a, b, 1); }
/// Per-byte a + b modulo 256.
inline uint32_t __vadd4(uint32_t a, uint32_t b) { return ds4::emu::bytewise(a, b, 2); }
/// Byte i of the result = byte (s >> 4i) & 7 of the 8-byte value y:x (x = bytes 0..3).
inline uint32_t __byte_perm(uint32_t x, uint32_t y, uint32_t s) {
  const uint64_t v = uint64_t(x) | (uint64_t(y) << 32);
  uint32_t r = 0;
  for (int i = 0; i < 4; ++i) r |= uint32_t((v >> (8 * ((s >> (4 * i)) & 7))) & 0xFF) << (8 * i);
  return r;
}
/// c + sum of the four signed byte products of a and b.
inline int __dp4a(int a, int b, int c) {
  for (int i = 0; i < 4; ++i) c += int(int8_t(uint32_t(a) >> (8 * i))) * int(int8_t(uint32_t(b) >> (8 * i)));
  return c;
}
inline int __popc(uint32_t x) { return __builtin_popcount(x); }
inline float __fmul_rn(float a, float b) { return a * b; }  // host TU: -ffp-contract=off
inline float __fadd_rn(float a, float b) { return a + b; }
inline float __fsub_rn(float a, float b) { return a - b; }
inline float __int2float_rn(int i) { return float(i); }
inline float __fdiv_rn(float a, float b) { return a / b; }

inline thread_local ds4::emu::Dim3 threadIdx, blockIdx, blockDim;
inline void __syncthreads() { ds4::emu::g_block_barrier->arrive_and_wait(); }
/// Butterfly shuffle within the calling thread's warp (all 32 lanes must call it; mask ignored).
inline float __shfl_xor_sync(unsigned, float v, int off) {
  const unsigned w = threadIdx.x / 32, l = threadIdx.x % 32;
  ds4::emu::g_shfl_slots[w][l] = v;
  ds4::emu::g_warp_barriers[w]->arrive_and_wait();
  const float r = ds4::emu::g_shfl_slots[w][l ^ unsigned(off)];
  ds4::emu::g_warp_barriers[w]->arrive_and_wait();
  return r;
}

namespace ds4::emu {
/// Runs body() as block (bx, by) of `nthreads` threads (one host thread each). Blocks must be run
/// one at a time (shared memory is a function-local static).
template <class F>
void run_block(unsigned bx, unsigned by, int nthreads, F&& body) {
  std::barrier<> bar(nthreads);
  g_block_barrier = &bar;
  std::vector<std::unique_ptr<std::barrier<>>> warps;
  g_warp_barriers.clear();
  for (int w = 0; w < (nthreads + 31) / 32; ++w) {
    warps.push_back(std::make_unique<std::barrier<>>(32));
    g_warp_barriers.push_back(warps.back().get());
  }
  std::vector<std::thread> threads;
  threads.reserve(size_t(nthreads));
  for (int t = 0; t < nthreads; ++t)
    threads.emplace_back([&, t] {
      threadIdx = Dim3{unsigned(t), 0, 0};
      blockIdx = Dim3{bx, by, 0};
      blockDim = Dim3{unsigned(nthreads), 1, 1};
      body();
    });
  for (auto& th : threads) th.join();
  g_block_barrier = nullptr;
  g_warp_barriers.clear();
}
}  // namespace ds4::emu
