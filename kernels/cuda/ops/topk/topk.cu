// kernels/cuda/ops/topk/topk.cu — the topk op (ops_cuda.h launch_topk; CPU reference
// kernels/cpu/topk.cpp topk_desc_into and the device op's visible count and -1 padding). One block
// per row: ops::block_topk selects the k best of the row's visible scores in the total order
// (larger first, ties to the lower index, NaN last).
#include "kernels/cuda/ops/ops_common.cuh"
#include "kernels/cuda/ops/ops_cuda.h"

namespace ds4::cuda {
namespace {

constexpr int kThreads = 128;

__global__ void topk_kernel(const float* scores, uint64_t scores_nb, int64_t n, int64_t ld, int64_t pos0, int ratio,
                            int32_t* out, uint64_t out_nb, int64_t k) {
  __shared__ float red_v[kThreads];
  __shared__ int32_t red_i[kThreads];
  for (int64_t t = blockIdx.x; t < n; t += gridDim.x) {
    const int64_t vis = (pos0 + t + 1) / ratio;
    const int64_t nvis = vis < ld ? vis : ld;
    int32_t* O = ops::at_row(out, t, out_nb);
    const int64_t m = ops::block_topk(ops::at_row(scores, t, scores_nb), nvis, k, O, red_v, red_i);
    for (int64_t i = m + threadIdx.x; i < k; i += blockDim.x) O[i] = -1;
  }
}

}  // namespace

cudaError_t launch_topk(cudaStream_t s, const float* scores, uint64_t scores_nb, int64_t n, int64_t ld, int64_t pos0,
                        int ratio, int32_t* out, uint64_t out_nb, int64_t k) {
  if (ratio <= 0 || k < 0) return cudaErrorInvalidValue;
  if (n <= 0 || k == 0) return cudaSuccess;
  DS4_LAUNCH(topk_kernel, ops::blocks_for(n), kThreads, 0, s, scores, scores_nb, n, ld, pos0, ratio, out, out_nb, k);
  return cudaGetLastError();
}

}  // namespace ds4::cuda
