// kernels/cuda/math/math_eval.cu — see math_eval.h. Compiled with --fmad=false (kernels/cuda
// CMakeLists), so the double evaluation of math.h rounds exactly as on the host.
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/launch.h"
#include "kernels/cuda/math/math_eval.h"
#include "kernels/quant/math.h"

namespace ds4::cuda {
namespace {

__global__ void math_kernel(int fn, const float* x, float* y, int64_t n) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const float v = x[i];
  float s, c;
  switch (fn) {
    case 0: y[i] = quant::exp_f32(v); break;
    case 1: y[i] = quant::log_f32(v); break;
    case 2: y[i] = quant::log1p_f32(v); break;
    case 3: quant::sincos_f32(v, &s, &c); y[i] = s; break;
    case 4: quant::sincos_f32(v, &s, &c); y[i] = c; break;
    case 5: y[i] = quant::sqrt_f32(v); break;
    case 6: y[i] = quant::sigmoid_f32(v); break;
    default: y[i] = quant::silu_f32(v); break;
  }
}

}  // namespace

void math_eval(MathFn fn, const float* x, float* y, int64_t n) {
  if (n <= 0) return;
  const int threads = 256;
  const int64_t blocks = (n + threads - 1) / threads;
  DS4_LAUNCH(math_kernel, static_cast<unsigned>(blocks), threads, 0, nullptr, static_cast<int>(fn), x, y, n);
  DS4_CUDA_CHECK(cudaGetLastError());
  DS4_CUDA_CHECK(cudaDeviceSynchronize());
}

}  // namespace ds4::cuda
