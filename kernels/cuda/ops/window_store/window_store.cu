// kernels/cuda/ops/window_store/window_store.cu — the window_store op (ops_cuda.h
// launch_window_store; CPU reference kernels/cpu/window_store.cpp): the chunk's last min(n, win)
// raw KV rows into the sliding-window ring (slot = position % win; distinct slots, no conflicts).
#include "kernels/cuda/ops/ops_common.cuh"
#include "kernels/cuda/ops/ops_cuda.h"

namespace ds4::cuda {
namespace {

__global__ void window_store_kernel(const float* kv, uint64_t kv_nb, int64_t D, int64_t pos0, int64_t p_first,
                                    int64_t count, float* ring, uint64_t ring_nb, int64_t win) {
  for (int64_t i = ops::global_thread(); i < count * D; i += ops::grid_threads()) {
    const int64_t p = p_first + i / D, c = i % D;
    ops::at_row(ring, p % win, ring_nb)[c] = ops::at_row(kv, p - pos0, kv_nb)[c];
  }
}

}  // namespace

cudaError_t launch_window_store(cudaStream_t s, const float* kv, uint64_t kv_nb, int64_t n, int64_t D, int64_t pos0,
                                float* ring, uint64_t ring_nb, int64_t win) {
  if (win <= 0 || pos0 < 0) return cudaErrorInvalidValue;
  if (n <= 0 || D <= 0) return cudaSuccess;
  const int64_t p_first = pos0 + n - win > pos0 ? pos0 + n - win : pos0;
  const int64_t count = pos0 + n - p_first;
  DS4_LAUNCH(window_store_kernel, ops::grid_for(count * D, ops::kElemThreads), ops::kElemThreads, 0, s, kv, kv_nb, D,
             pos0, p_first, count, ring, ring_nb, win);
  return cudaGetLastError();
}

}  // namespace ds4::cuda
