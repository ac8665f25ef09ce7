// tests/cuda_emu/test_cuda_emu_kernels.h — launchers of test_cuda_emu_kernels.cu (cuda_emu_test).
#pragma once

#include <cuda_runtime.h>

namespace ds4::emutest {
/// y[i] = fmaf(a, x[i], y[i]) for i < n (128-thread blocks).
cudaError_t launch_axpy(cudaStream_t s, const float* x, float* y, float a, int n);
/// out[b] = sum of x[256b .. 256b+255] (one 256-thread block each, static shared tree).
cudaError_t launch_block_sum(cudaStream_t s, const int* x, int nblocks, int* out);
/// Reverses each `block`-value slice of x into y through dynamic shared memory.
cudaError_t launch_reverse(cudaStream_t s, const float* x, float* y, int nblocks, int block);
}  // namespace ds4::emutest
