// kernels/cuda/ops/owner_rows/owner_rows.cu — the owner_rows op (ops_cuda.h launch_owner_rows; CPU
// reference kernels/cpu/embed_rows.cpp owner_rows): each token's row from the rank owning its id.
#include "kernels/cuda/ops/ops_common.cuh"
#include "kernels/cuda/ops/ops_cuda.h"

namespace ds4::cuda {
namespace {

__global__ void owner_rows_kernel(const float* all, uint64_t all_nb, int64_t all_rows, const int32_t* ids,
                                  int64_t rows_per_rank, int64_t n, int64_t dim, float* out, uint64_t out_nb) {
  for (int64_t i = ops::global_thread(); i < n * dim; i += ops::grid_threads()) {
    const int64_t t = i / dim, c = i % dim;
    const int64_t src = (ids[t] / rows_per_rank) * n + t;  // C++ division (toward zero), as the CPU
    if (src < 0 || src >= all_rows) continue;
    ops::at_row(out, t, out_nb)[c] = ops::at_row(all, src, all_nb)[c];
  }
}

}  // namespace

cudaError_t launch_owner_rows(cudaStream_t s, const float* all, uint64_t all_nb, int64_t all_rows, const int32_t* ids,
                              int64_t rows_per_rank, int64_t n, int64_t dim, float* out, uint64_t out_nb) {
  if (rows_per_rank <= 0) return cudaErrorInvalidValue;
  if (n <= 0 || dim <= 0) return cudaSuccess;
  DS4_LAUNCH(owner_rows_kernel, ops::grid_for(n * dim, ops::kElemThreads), ops::kElemThreads, 0, s, all, all_nb,
             all_rows, ids, rows_per_rank, n, dim, out, out_nb);
  return cudaGetLastError();
}

}  // namespace ds4::cuda
