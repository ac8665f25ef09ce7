// tests/gpu/cuda_host_emu.h — the block runner of the CPU-only kernel tests, now a thin layer over
// the CUDA emulator (tests/cuda_emu: fibers per CUDA thread, warp collectives, intrinsics; it is
// force-included when a test links ds4_cuda_emu). emu::run_block(bx, by, n, body) runs body() as
// block (bx, by) of n threads (1-D) right now on the calling thread.
#pragma once

#ifndef DS4_CUDA_EMU_ACTIVE
#error "tests/gpu/cuda_host_emu.h: link the test to ds4_cuda_emu (it force-includes tests/cuda_emu/cuda_emu.h)"
#endif

#include <utility>

namespace ds4::emu {
/// Runs body() as block (bx, by) of `nthreads` threads of a grid just large enough to hold it.
template <class F>
void run_block(unsigned bx, unsigned by, int nthreads, F&& body) {
  run_block_now(dim3(bx + 1, by + 1, 1), uint3{bx, by, 0}, dim3(unsigned(nthreads), 1, 1), 0, std::forward<F>(body));
}
}  // namespace ds4::emu
