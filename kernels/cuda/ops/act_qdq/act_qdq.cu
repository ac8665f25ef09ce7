// kernels/cuda/ops/act_qdq/act_qdq.cu — the act_qdq op (ops_cuda.h launch_act_qdq; CPU reference
// kernels/cpu/act_qdq.cpp act_qdq_rows over kernels/quant/act_qdq.h, whose DS4_HD scalar
// functions run here unchanged): FP8 one thread per (row, head, block) (blocks are independent),
// Hadamard + FP4 one thread per (row, head).
#include "kernels/cuda/ops/ops_common.cuh"
#include "kernels/cuda/ops/ops_cuda.h"
#include "kernels/quant/act_qdq.h"

namespace ds4::cuda {
namespace {

__global__ void act_qdq_fp8_kernel(float* x, uint64_t x_nb, int64_t n, int64_t heads, int64_t D, int64_t len,
                                   int64_t block) {
  const int64_t nb = len / block, per_row = heads * nb;
  for (int64_t i = ops::global_thread(); i < n * per_row; i += ops::grid_threads()) {
    const int64_t t = i / per_row, h = (i % per_row) / nb, b = i % nb;
    quant::qdq_fp8_e4m3(ops::at_row(x, t, x_nb) + h * D + b * block, block, block);
  }
}

__global__ void act_qdq_fp4_kernel(float* x, uint64_t x_nb, int64_t n, int64_t heads, int64_t D, int64_t block) {
  for (int64_t i = ops::global_thread(); i < n * heads; i += ops::grid_threads()) {
    float* v = ops::at_row(x, i / heads, x_nb) + (i % heads) * D;
    quant::hadamard_normalized(v, D);
    quant::qdq_fp4_e2m1(v, D, block);
  }
}

}  // namespace

cudaError_t launch_act_qdq(cudaStream_t s, float* x, uint64_t x_nb, int64_t n, int64_t heads, int64_t D,
                           bool hadamard_fp4, int64_t len, int64_t block) {
  if (block <= 0 || len % block != 0 || len > D || len < 0) return cudaErrorInvalidValue;
  if (hadamard_fp4 && (len != D || D <= 0 || (D & (D - 1)) != 0)) return cudaErrorInvalidValue;
  if (n <= 0 || heads <= 0 || len == 0) return cudaSuccess;
  constexpr int kThreads = 128;
  if (hadamard_fp4) {
    DS4_LAUNCH(act_qdq_fp4_kernel, ops::grid_for(n * heads, kThreads), kThreads, 0, s, x, x_nb, n, heads, D, block);
  } else {
    DS4_LAUNCH(act_qdq_fp8_kernel, ops::grid_for(n * heads * (len / block), kThreads), kThreads, 0, s, x, x_nb, n,
               heads, D, len, block);
  }
  return cudaGetLastError();
}

}  // namespace ds4::cuda
