// tests/cuda_emu/cuda_emu_fiber.h — runs one CUDA block as fibers on the calling OS thread
// (cuda_emu_fiber.cpp). Internal to the emulator.
#pragma once

#include <cstddef>
#include <cstdint>

#include "tests/cuda_emu/cuda_emu.h"

namespace ds4::emu {

/// Runs block `block_idx` of a grid: blockDim threads, each a fiber calling invoke(args); barriers
/// and warp collectives park fibers; warps start in an order drawn from `order_seed` (0 = in
/// order). dyn_shared / smem: this block's dynamic shared memory. Aborts with the kernel name on
/// a barrier deadlock (threads waiting at different barriers).
void run_block(const char* kernel, uint3 block_idx, dim3 grid, dim3 block, void* dyn_shared,
               void (*invoke)(void*), void* args, uint64_t order_seed);

/// This OS thread's dynamic shared memory buffer for a block using `bytes` (<= 64 KiB): filled
/// with a garbage pattern, ending at a PROT_NONE guard page so overruns fault.
void* block_dynamic_shared(size_t bytes);

}  // namespace ds4::emu
