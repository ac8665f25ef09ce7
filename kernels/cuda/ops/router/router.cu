// kernels/cuda/ops/router/router.cu — the router op (ops_cuda.h launch_router; CPU reference
// kernels/cpu/router.cpp sqrt_softplus + route_token_into). One block per token: the scores
// s = sqrt(softplus(logit)) and the selection keys s + bias in shared memory (one thread per
// expert), the top-K by ops::block_topk (hash layers: the tid2eid row), then thread 0 sums the
// selected s in slot order and writes the weights, as the CPU does.
#include "kernels/cuda/ops/ops_common.cuh"
#include "kernels/cuda/ops/ops_cuda.h"
#include "kernels/quant/math.h"

namespace ds4::cuda {
namespace {

constexpr int kThreads = 128;
constexpr int kMaxExperts = 1024;

/// sqrt_f32(softplus(x)), softplus = log1p_f32(exp_f32(x)), x itself above 20 (router.cpp).
__device__ inline float sqrt_softplus_dev(float x) {
  const float sp = x > 20.0f ? x : quant::log1p_f32(quant::exp_f32(x));
  return quant::sqrt_f32(sp);
}

__global__ void router_kernel(const float* logits, uint64_t logits_nb, int64_t n, int64_t E, int64_t K,
                              const float* bias, const int32_t* tid2eid, uint64_t tid_nb, int64_t tid_rows,
                              const int32_t* tokens, bool normalize, float route_scale, int32_t* ids, uint64_t ids_nb,
                              float* weights, uint64_t weights_nb) {
  __shared__ float sc[kMaxExperts];
  __shared__ float sel[kMaxExperts];
  __shared__ float red_v[kThreads];
  __shared__ int32_t red_i[kThreads];
  for (int64_t t = blockIdx.x; t < n; t += gridDim.x) {
    const float* L = ops::at_row(logits, t, logits_nb);
    for (int64_t e = threadIdx.x; e < E; e += blockDim.x) {
      sc[e] = sqrt_softplus_dev(L[e]);
      sel[e] = bias ? sc[e] + bias[e] : sc[e];
    }
    __syncthreads();
    int32_t* I = ops::at_row(ids, t, ids_nb);
    float* W = ops::at_row(weights, t, weights_nb);
    if (tid2eid) {
      if (threadIdx.x == 0) {
        const int32_t tok = tokens[t];
        const bool ok = tok >= 0 && tok < tid_rows;
        const int32_t* h = ok ? ops::at_row(tid2eid, tok, tid_nb) : nullptr;
        for (int64_t i = 0; i < K; ++i) I[i] = ok ? h[i] : -1;
      }
    } else {
      ops::block_topk(sel, E, K, I, red_v, red_i);  // K <= E: all K written by thread 0
    }
    if (threadIdx.x == 0) {
      const bool bad = tid2eid && !(tokens[t] >= 0 && tokens[t] < tid_rows);
      float sum = 0;
      for (int64_t i = 0; i < K; ++i) sum += (I[i] >= 0 && I[i] < E) ? sc[I[i]] : 0.0f;
      for (int64_t i = 0; i < K; ++i) {
        const float se = (I[i] >= 0 && I[i] < E) ? sc[I[i]] : 0.0f;
        W[i] = bad ? 0.0f : (normalize ? se / sum : se) * route_scale;
      }
    }
    __syncthreads();  // sc / sel are rewritten for the next token
  }
}

}  // namespace

cudaError_t launch_router(cudaStream_t s, const float* logits, uint64_t logits_nb, int64_t n, int64_t E, int64_t K,
                          const float* bias, const int32_t* tid2eid, uint64_t tid_nb, int64_t tid_rows,
                          const int32_t* tokens, bool normalize, float route_scale, int32_t* ids, uint64_t ids_nb,
                          float* weights, uint64_t weights_nb) {
  if (E > kMaxExperts || K < 1 || K > E) return cudaErrorInvalidValue;
  if (n <= 0) return cudaSuccess;
  DS4_LAUNCH(router_kernel, ops::blocks_for(n), kThreads, 0, s, logits, logits_nb, n, E, K, bias, tid2eid, tid_nb,
             tid_rows, tokens, normalize, route_scale, ids, ids_nb, weights, weights_nb);
  return cudaGetLastError();
}

}  // namespace ds4::cuda
