// kernels/cuda/ops/swiglu/swiglu.cu — the swiglu op (ops_cuda.h launch_swiglu; CPU reference
// kernels/cpu/swiglu.cpp swiglu_clamped and the device op's row weight): one thread per element,
// the CPU's exact expressions (a NaN gate clamps to the limit, as `g < limit ? g : limit`).
#include "kernels/cuda/ops/ops_common.cuh"
#include "kernels/cuda/ops/ops_cuda.h"
#include "kernels/quant/math.h"

namespace ds4::cuda {
namespace {

__global__ void swiglu_kernel(float* g, uint64_t g_nb, const float* u, uint64_t u_nb, int64_t n, int64_t ff,
                              float limit, const float* row_weight) {
  for (int64_t i = ops::global_thread(); i < n * ff; i += ops::grid_threads()) {
    const int64_t t = i / ff, c = i % ff;
    float* G = ops::at_row(g, t, g_nb) + c;
    const float uv = ops::at_row(u, t, u_nb)[c];
    float v;
    if (limit > 0) {
      const float gi = *G < limit ? *G : limit;
      const float ui = uv < -limit ? -limit : (uv > limit ? limit : uv);
      v = quant::silu_f32(gi) * ui;
    } else {
      v = quant::silu_f32(*G) * uv;
    }
    if (row_weight) v = v * row_weight[t];
    *G = v;
  }
}

}  // namespace

cudaError_t launch_swiglu(cudaStream_t s, float* g, uint64_t g_nb, const float* u, uint64_t u_nb, int64_t n,
                          int64_t ff, float limit, const float* row_weight) {
  if (n <= 0 || ff <= 0) return cudaSuccess;
  DS4_LAUNCH(swiglu_kernel, ops::grid_for(n * ff, ops::kElemThreads), ops::kElemThreads, 0, s, g, g_nb, u, u_nb, n, ff,
             limit, row_weight);
  return cudaGetLastError();
}

}  // namespace ds4::cuda
