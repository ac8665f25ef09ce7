// kernels/cuda/ops/moe_experts/moe_gather.cu — the data movement and SwiGLU of the grouped MoE
// op (kernels/device.h moe_experts; CPU: kernels/cpu/moe_experts.cpp): gather one expert's slots'
// token rows and routing weights, the clamped SwiGLU times the routing weight (the CPU's
// swiglu_clamped, kernels/cpu/swiglu.cpp, then * rw: the same IEEE operations per element), and
// the scatter of the expert's outputs to their slots. Plus a byte-exact strided row copy.
//
// Launch shapes: gather and scatter are one thread per element, 256-thread blocks, grid
// (ceil(dim / 256), min(m, 65535)), the y blocks walking the slots grid-stride: a 4096-wide slot
// row is 16 blocks with one load and one store per thread (the former one 128-thread block per
// slot made each thread copy 32 elements in sequence: 14 us per launch on an H200 for a decode
// step's single slot). The SwiGLU is one thread per element; the row copy one 128-thread block
// per row.
#include "kernels/cuda/ops/launch_compat.h"
#include "kernels/cuda/ops/ops_cuda_matmul.h"
#include "kernels/quant/math.h"

namespace ds4::cuda {
namespace {

constexpr int kMoveThreads = 256;  // gather / scatter: threads per block, one element each

/// The gather / scatter grid: x covers a row's elements, y the slots (grid-stride past 65535).
dim3 move_grid(int64_t dim, int64_t m) {
  const int64_t gx = (dim + kMoveThreads - 1) / kMoveThreads;
  return dim3{static_cast<unsigned>(gx > 0 ? gx : 1), static_cast<unsigned>(m < 65535 ? m : 65535)};
}

__global__ void moe_gather_kernel(const float* __restrict__ x, uint64_t x_nb1, int64_t dim,
                                  const float* __restrict__ weights, uint64_t w_nb1, int k,
                                  const int32_t* __restrict__ pairs, int64_t m, float* __restrict__ xe,
                                  float* __restrict__ rw) {
  const int64_t d = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  for (int64_t i = blockIdx.y; i < m; i += gridDim.y) {
    const int32_t p = pairs[i];
    const int64_t t = p / k;
    if (d < dim) xe[i * dim + d] = reinterpret_cast<const float*>(reinterpret_cast<const uint8_t*>(x) + uint64_t(t) * x_nb1)[d];
    if (d == 0)
      rw[i] = reinterpret_cast<const float*>(reinterpret_cast<const uint8_t*>(weights) + uint64_t(t) * w_nb1)[p % k];
  }
}

__global__ void moe_scatter_kernel(const float* __restrict__ ye, int64_t dim, const int32_t* __restrict__ pairs,
                                   int64_t m, float* __restrict__ slots, uint64_t s_nb1) {
  const int64_t d = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (d >= dim) return;
  for (int64_t i = blockIdx.y; i < m; i += gridDim.y)
    reinterpret_cast<float*>(reinterpret_cast<uint8_t*>(slots) + uint64_t(pairs[i]) * s_nb1)[d] = ye[i * dim + d];
}

__global__ void moe_swiglu_kernel(float* __restrict__ g, const float* __restrict__ u, int64_t n, int64_t ff,
                                  float limit, const float* __restrict__ rw) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n * ff) return;
  float v;
  if (limit > 0) {
    const float gi = g[i] < limit ? g[i] : limit;
    const float ui = u[i] < -limit ? -limit : (u[i] > limit ? limit : u[i]);
    v = __fmul_rn(quant::silu_f32(gi), ui);
  } else {
    v = __fmul_rn(quant::silu_f32(g[i]), u[i]);
  }
  if (rw) v = __fmul_rn(v, rw[i / ff]);
  g[i] = v;
}

__global__ void copy_rows_bytes_kernel(uint8_t* __restrict__ dst, uint64_t dpitch, const uint8_t* __restrict__ src,
                                       uint64_t spitch, uint64_t width) {
  const int64_t r = blockIdx.x;
  for (uint64_t b = threadIdx.x; b < width; b += blockDim.x) dst[uint64_t(r) * dpitch + b] = src[uint64_t(r) * spitch + b];
}

}  // namespace

cudaError_t launch_moe_gather(cudaStream_t s, const float* x, uint64_t x_nb1, int64_t dim, const float* weights,
                              uint64_t w_nb1, int k, const int32_t* pairs, int64_t m, float* xe, float* rw) {
  if (k <= 0 || m < 0 || m > 0x7fffffff || dim < 0 || dim > 0x7fffffffLL * kMoveThreads) return cudaErrorInvalidValue;
  if (m == 0) return cudaSuccess;
  DS4_LAUNCH(moe_gather_kernel, move_grid(dim, m), dim3(kMoveThreads), 0, s, x, x_nb1, dim, weights, w_nb1, k, pairs,
             m, xe, rw);
  return cudaGetLastError();
}

cudaError_t launch_moe_scatter(cudaStream_t s, const float* ye, int64_t dim, const int32_t* pairs, int64_t m,
                               float* slots, uint64_t s_nb1) {
  if (m < 0 || m > 0x7fffffff || dim < 0 || dim > 0x7fffffffLL * kMoveThreads) return cudaErrorInvalidValue;
  if (m == 0 || dim == 0) return cudaSuccess;
  DS4_LAUNCH(moe_scatter_kernel, move_grid(dim, m), dim3(kMoveThreads), 0, s, ye, dim, pairs, m, slots, s_nb1);
  return cudaGetLastError();
}

cudaError_t launch_moe_swiglu(cudaStream_t s, float* g, const float* u, int64_t n, int64_t ff, float limit,
                              const float* rw) {
  const int64_t total = n * ff;
  if (n < 0 || ff < 0) return cudaErrorInvalidValue;
  if (total == 0) return cudaSuccess;
  DS4_LAUNCH(moe_swiglu_kernel, dim3(unsigned((total + 255) / 256)), dim3(256), 0, s, g, u, n, ff, limit, rw);
  return cudaGetLastError();
}

cudaError_t launch_copy_rows_bytes(cudaStream_t s, void* dst, uint64_t dpitch, const void* src, uint64_t spitch,
                                   uint64_t width, int64_t rows) {
  if (rows < 0 || rows > 0x7fffffff) return cudaErrorInvalidValue;
  if (rows == 0 || width == 0) return cudaSuccess;
  DS4_LAUNCH(copy_rows_bytes_kernel, dim3(unsigned(rows)), dim3(128), 0, s, static_cast<uint8_t*>(dst), dpitch,
             static_cast<const uint8_t*>(src), spitch, width);
  return cudaGetLastError();
}

}  // namespace ds4::cuda
