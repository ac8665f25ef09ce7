// kernels/cuda/launch.h — the one way backend code launches a kernel and declares dynamic shared
// memory, so the same .cu sources build with nvcc and, for CPU-only tests, as host C++ against
// the CUDA emulation in tests/cuda_emu/ (compiled with -DDS4_CUDA_EMU, cuda_emu.h force-included).
//
//   DS4_LAUNCH(kernel, grid, block, smem_bytes, stream, args...)
//     nvcc: (kernel)<<<grid, block, smem_bytes, stream>>>(args...)
//     emu:  validates the configuration against sm_75's limits (errors go to cudaGetLastError,
//           like a real launch) and enqueues the grid on the emulated stream.
//     A template kernel with a comma in its name goes in parentheses:
//       DS4_LAUNCH((mmq_kernel<Tr, true>), grid, block, 0, stream, w, ...);
//     The arguments are converted to the kernel's parameter types at the launch, as CUDA does.
//     It is one expression statement (usable as the body of an if / else).
//
//   DS4_DYN_SHARED(T, name);   inside a kernel body
//     nvcc: extern __shared__ T name[];      emu: T* name = <this block's dynamic shared memory>
//     Only one per kernel (CUDA gives every extern __shared__ array the same address).
//
// Static shared memory is plain `__shared__ T name[N];` inside the kernel.
#pragma once

#ifdef DS4_CUDA_EMU
#ifndef DS4_CUDA_EMU_ACTIVE
#error "DS4_CUDA_EMU builds must force-include tests/cuda_emu/cuda_emu.h (use ds4_add_cuda_emu_sources)"
#endif
#define DS4_LAUNCH(kernel, grid, block, smem_bytes, stream, ...) \
  ::ds4::emu::launch((kernel), #kernel, (grid), (block), (smem_bytes), (stream), ##__VA_ARGS__)
#define DS4_DYN_SHARED(T, name) T* const name = static_cast<T*>(::ds4::emu::dynamic_shared())
#else
#define DS4_LAUNCH(kernel, grid, block, smem_bytes, stream, ...) \
  (kernel)<<<(grid), (block), (smem_bytes), (stream)>>>(__VA_ARGS__)
#define DS4_DYN_SHARED(T, name) extern __shared__ T name[]
#endif
