// kernels/cuda/ops/rope/rope.cu — the rope op (ops_cuda.h launch_rope; CPU reference
// kernels/cpu/rope.cpp rope_angles + rope_apply_cs). One block per row: the row's cos/sin
// (float(pos) * freq, sincos_f32) are computed once into shared memory, 256 pairs at a time, and
// applied to every head: (a c - b s, a s + b c), s negated for the inverse.
#include "kernels/cuda/ops/ops_common.cuh"
#include "kernels/cuda/ops/ops_cuda.h"
#include "kernels/quant/math.h"

namespace ds4::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kPairs = 256;  // pairs per shared chunk

__global__ void rope_kernel(float* x, uint64_t x_nb, int64_t n, int64_t heads, int64_t D, const float* freqs,
                            int half, const int32_t* pos, bool inverse) {
  __shared__ float cs[2 * kPairs];
  for (int64_t t = blockIdx.x; t < n; t += gridDim.x) {
    float* X = ops::at_row(x, t, x_nb);
    const float fp = static_cast<float>(static_cast<int64_t>(pos[t]));
    for (int a = 0; a < half; a += kPairs) {
      const int m = half - a < kPairs ? half - a : kPairs;
      for (int i = threadIdx.x; i < m; i += blockDim.x) quant::sincos_f32(fp * freqs[a + i], &cs[2 * i + 1], &cs[2 * i]);
      __syncthreads();
      for (int64_t idx = threadIdx.x; idx < heads * m; idx += blockDim.x) {
        const int64_t h = idx / m;
        const int i = static_cast<int>(idx % m);
        float* r = X + h * D + (D - 2 * half) + 2 * (a + i);
        const float c = cs[2 * i];
        float sn = cs[2 * i + 1];
        if (inverse) sn = -sn;
        const float av = r[0], bv = r[1];
        r[0] = av * c - bv * sn;
        r[1] = av * sn + bv * c;
      }
      __syncthreads();  // cs is rewritten by the next chunk / row
    }
  }
}

}  // namespace

cudaError_t launch_rope(cudaStream_t s, float* x, uint64_t x_nb, int64_t n, int64_t heads, int64_t D,
                        const float* freqs, int half, const int32_t* pos, bool inverse) {
  if (half < 0 || 2 * static_cast<int64_t>(half) > D) return cudaErrorInvalidValue;
  if (n <= 0 || heads <= 0 || half == 0) return cudaSuccess;
  DS4_LAUNCH(rope_kernel, ops::blocks_for(n), kThreads, 0, s, x, x_nb, n, heads, D, freqs, half, pos, inverse);
  return cudaGetLastError();
}

}  // namespace ds4::cuda
