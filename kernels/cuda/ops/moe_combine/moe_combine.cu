// kernels/cuda/ops/moe_combine/moe_combine.cu — the moe_combine op (ops_cuda.h
// launch_moe_combine; CPU reference kernels/cpu/moe_combine.cpp moe_combine_row). One thread per
// output element walks the token's slots in ascending (id, slot) order — the stable sort by id —
// by repeatedly taking the smallest pair after the previous one, summing from +0 in FP32.
#include "kernels/cuda/ops/ops_common.cuh"
#include "kernels/cuda/ops/ops_cuda.h"

namespace ds4::cuda {
namespace {

__global__ void moe_combine_kernel(const float* slots, uint64_t slots_nb, const int32_t* ids, uint64_t ids_nb,
                                   int64_t n, int64_t K, int64_t dim, float* out, uint64_t out_nb) {
  for (int64_t i = ops::global_thread(); i < n * dim; i += ops::grid_threads()) {
    const int64_t t = i / dim, d = i % dim;
    const int32_t* id = ops::at_row(ids, t, ids_nb);
    float acc = 0.0f;
    int64_t pk = -1;
    int32_t pid = 0;
    for (int64_t r = 0; r < K; ++r) {
      int64_t bk = -1;
      for (int64_t k = 0; k < K; ++k) {
        const bool after = pk < 0 || id[k] > pid || (id[k] == pid && k > pk);
        if (after && (bk < 0 || id[k] < id[bk])) bk = k;  // ties: the first (lowest) k found
      }
      pk = bk;
      pid = id[bk];
      acc += ops::at_row(slots, t * K + bk, slots_nb)[d];
    }
    ops::at_row(out, t, out_nb)[d] = acc;
  }
}

}  // namespace

cudaError_t launch_moe_combine(cudaStream_t s, const float* slots, uint64_t slots_nb, const int32_t* ids,
                               uint64_t ids_nb, int64_t n, int64_t K, int64_t dim, float* out, uint64_t out_nb) {
  if (K < 1 || K > 64) return cudaErrorInvalidValue;
  if (n <= 0 || dim <= 0) return cudaSuccess;
  DS4_LAUNCH(moe_combine_kernel, ops::grid_for(n * dim, ops::kElemThreads), ops::kElemThreads, 0, s, slots, slots_nb,
             ids, ids_nb, n, K, dim, out, out_nb);
  return cudaGetLastError();
}

}  // namespace ds4::cuda
