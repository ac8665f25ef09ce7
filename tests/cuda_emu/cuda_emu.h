// tests/cuda_emu/cuda_emu.h — test-only emulation of the CUDA runtime and device language, so the
// backend's .cu sources compile as host C++ (g++ -x c++ -DDS4_CUDA_EMU -include this file) and
// run in CI without a GPU. See tests/cuda_emu/README.md for what is emulated and what is not.
//
// Build with ds4_add_cuda_emu_sources(target file.cu ...) (tests/cuda_emu/cuda_emu.cmake), which
// compiles the .cu files as C++ with the right flags and links the emulator (ds4_cuda_emu).
//
// Device side (cuda_emu_device.h): kernel qualifiers, threadIdx/blockIdx/blockDim/gridDim (per
// CUDA thread; every CUDA thread of a block is a fiber on the executing OS thread), __syncthreads,
// __syncwarp, warp shuffles / votes, integer atomics, the integer / SIMD / *_rn intrinsics.
// Runtime side (cuda_emu_runtime.h): cudaMalloc & co. over a host-inaccessible (PROT_NONE)
// region per emulated device, streams as lazily executed ordered queues run in a seeded random
// interleaving (DS4_CUDA_EMU_SEED), events, stream waits, host functions, sm_75 launch limits.
#pragma once

#ifdef __CUDACC__
#error "tests/cuda_emu/cuda_emu.h is for host-only (emulated) builds, never for nvcc"
#endif

#define DS4_CUDA_EMU_ACTIVE 1

// ---- kernel qualifiers -----------------------------------------------------------------------
#define __host__
#define __device__
#define __global__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __restrict__ __restrict
#define __align__(n) alignas(n)
#define __constant__
// Static shared memory: one instance per OS thread per declaration. Correct because the emulator
// runs every block of a grid to completion on one OS thread before it starts another block there
// (blocks never interleave on an OS thread; see README "Shared memory"). Like CUDA, its contents
// at block start are unspecified (here: what the previous block left).
#define __shared__ static thread_local

#include "tests/cuda_emu/cuda_emu_runtime.h"
#include "tests/cuda_emu/cuda_emu_device.h"
