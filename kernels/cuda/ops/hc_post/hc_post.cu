// kernels/cuda/ops/hc_post/hc_post.cu — the hc_post op (ops_cuda.h launch_hc_post; CPU reference
// kernels/cpu/hc_post.cpp hc_post_row). One thread per (token, d): it reads the hc copies'
// element d into registers, then writes every copy k = post[k] f[d] + (sum_j comb[j, k] X[j, d]),
// so the in-place update needs no scratch.
#include "kernels/cuda/ops/ops_common.cuh"
#include "kernels/cuda/ops/ops_cuda.h"

namespace ds4::cuda {
namespace {

constexpr int kMaxHc = 16;

__global__ void hc_post_kernel(const float* f, uint64_t f_nb, const float* mix, uint64_t mix_nb, int hc, int64_t dim,
                               int64_t n, float* x, uint64_t x_nb) {
  for (int64_t i = ops::global_thread(); i < n * dim; i += ops::grid_threads()) {
    const int64_t t = i / dim, d = i % dim;
    const float* M = ops::at_row(mix, t, mix_nb);
    const float* post = M + hc;
    const float* comb = M + 2 * hc;
    float* X = ops::at_row(x, t, x_nb);
    float xv[kMaxHc];
    for (int j = 0; j < hc; ++j) xv[j] = X[j * dim + d];
    const float fd = ops::at_row(f, t, f_nb)[d];
    for (int k = 0; k < hc; ++k) {
      const float s = post[k] * fd;
      float acc = 0;
      for (int j = 0; j < hc; ++j) acc += comb[j * hc + k] * xv[j];
      X[k * dim + d] = s + acc;
    }
  }
}

}  // namespace

cudaError_t launch_hc_post(cudaStream_t s, const float* f, uint64_t f_nb, const float* mix, uint64_t mix_nb, int hc,
                           int64_t dim, int64_t n, float* x, uint64_t x_nb) {
  if (hc < 1 || hc > kMaxHc) return cudaErrorInvalidValue;
  if (n <= 0 || dim <= 0) return cudaSuccess;
  DS4_LAUNCH(hc_post_kernel, ops::grid_for(n * dim, ops::kElemThreads), ops::kElemThreads, 0, s, f, f_nb, mix, mix_nb,
             hc, dim, n, x, x_nb);
  return cudaGetLastError();
}

}  // namespace ds4::cuda
