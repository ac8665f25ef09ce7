// kernels/cuda/ops/compressor/compressor.cu — the compressor op (ops_cuda.h launch_compressor; CPU
// reference: kernels/device_cpu.cpp compressor over kernels/cpu/compressor.cpp compressor_push,
// then rmsnorm_row and rope_apply). The state machine is sequential in the tokens, so ONE block
// walks the chunk's tokens in order; within a token the channels are spread over the threads:
// the token enters its state slot; when it completes block b, each channel is pooled by one thread
// (candidates in the CPU's order: max, den = sum of exps ascending, sum a_i * (e_i / den)
// ascending; e_i is recomputed, same bits), the overlap state moves to `prev`, thread 0 sums the
// squares of the pooled row for the RMS norm, and the row is rotated to position b * ratio.
#include "kernels/cuda/ops/ops_common.cuh"
#include "kernels/cuda/ops/ops_cuda.h"
#include "kernels/quant/math.h"

namespace ds4::cuda {
namespace {

constexpr int kThreads = 256;

struct CompArgs {
  const float* a;
  uint64_t a_nb;
  const float* g;
  uint64_t g_nb;
  int64_t n;
  const float* ape;
  const float* norm;
  float eps;
  const float* freqs;
  int half;
  int ratio;
  int64_t d;
  int64_t pos0;
  float* cur;
  float* prev;  // null: no overlap
  float* cache;
  uint64_t cache_nb;
};

/// Candidate i of channel ch (the CPU's sa / sg lists).
__device__ inline void candidate(const CompArgs& c, int64_t w, bool has_prev, int64_t ch, int i, float* av,
                                 float* gv) {
  const float* cur_a = c.cur;
  const float* cur_g = c.cur + c.ratio * w;
  if (c.prev) {
    const float* prev_a = c.prev;
    const float* prev_g = c.prev + c.ratio * c.d;
    if (i < c.ratio) {
      *av = prev_a[i * c.d + ch];
      *gv = has_prev ? prev_g[i * c.d + ch] : -INFINITY;
    } else {
      *av = cur_a[(i - c.ratio) * w + c.d + ch];
      *gv = cur_g[(i - c.ratio) * w + c.d + ch];
    }
  } else {
    *av = cur_a[i * w + ch];
    *gv = cur_g[i * w + ch];
  }
}

__global__ void compressor_kernel(CompArgs c) {
  __shared__ float r_sh;
  const int64_t d = c.d, w = c.prev ? 2 * d : d;
  const int n_cand = c.prev ? 2 * c.ratio : c.ratio;
  float* cur_a = c.cur;
  float* cur_g = c.cur + c.ratio * w;
  for (int64_t t = 0; t < c.n; ++t) {
    const int64_t pos = c.pos0 + t;
    const int slot = static_cast<int>(pos % c.ratio);
    const float* A = ops::at_row(c.a, t, c.a_nb);
    const float* G = ops::at_row(c.g, t, c.g_nb);
    for (int64_t ch = threadIdx.x; ch < w; ch += blockDim.x) {
      cur_a[slot * w + ch] = A[ch];
      cur_g[slot * w + ch] = G[ch] + c.ape[slot * w + ch];
    }
    __syncthreads();
    if (slot != c.ratio - 1) continue;  // block-uniform
    const int64_t b = pos / c.ratio;
    const bool has_prev = b > 0;
    float* out = ops::at_row(c.cache, b, c.cache_nb);
    for (int64_t ch = threadIdx.x; ch < d; ch += blockDim.x) {
      float av, gv;
      float mx = -INFINITY;
      for (int i = 0; i < n_cand; ++i) {
        candidate(c, w, has_prev, ch, i, &av, &gv);
        mx = fmaxf(mx, gv);
      }
      float den = 0;
      for (int i = 0; i < n_cand; ++i) {
        candidate(c, w, has_prev, ch, i, &av, &gv);
        den += quant::exp_f32(gv - mx);
      }
      float acc = 0;
      for (int i = 0; i < n_cand; ++i) {
        candidate(c, w, has_prev, ch, i, &av, &gv);
        acc += av * (quant::exp_f32(gv - mx) / den);
      }
      out[ch] = acc;
    }
    __syncthreads();
    if (c.prev) {
      float* prev_a = c.prev;
      float* prev_g = c.prev + c.ratio * d;
      for (int64_t idx = threadIdx.x; idx < c.ratio * d; idx += blockDim.x) {
        const int64_t i = idx / d, ch = idx % d;
        prev_a[i * d + ch] = cur_a[i * w + ch];
        prev_g[i * d + ch] = cur_g[i * w + ch];
      }
    }
    if (threadIdx.x < 32) {  // rmsnorm_row(out, norm, d, eps, out): ss = dot_f32(out, out)
      const float ss = ops::warp_dot_f32(out, out, d, static_cast<int>(threadIdx.x));
      if (threadIdx.x == 0) r_sh = 1.0f / quant::sqrt_f32(ss / static_cast<float>(d) + c.eps);
    }
    __syncthreads();
    const float r = r_sh;
    for (int64_t i = threadIdx.x; i < d; i += blockDim.x) out[i] = c.norm ? c.norm[i] * (out[i] * r) : out[i] * r;
    __syncthreads();
    // rope_apply(out, d, freqs, half, b * ratio, false): pair i by float(b * ratio) * freqs[i].
    const float fp = static_cast<float>(b * c.ratio);
    float* rr = out + (d - 2 * c.half);
    for (int i = threadIdx.x; i < c.half; i += blockDim.x) {
      float sn, cs;
      quant::sincos_f32(fp * c.freqs[i], &sn, &cs);
      const float av = rr[2 * i], bv = rr[2 * i + 1];
      rr[2 * i] = av * cs - bv * sn;
      rr[2 * i + 1] = av * sn + bv * cs;
    }
    __syncthreads();
  }
}

}  // namespace

cudaError_t launch_compressor(cudaStream_t s, const float* a, uint64_t a_nb, const float* g, uint64_t g_nb,
                              int64_t n, const float* ape, const float* norm, float eps, const float* freqs, int half,
                              int ratio, int64_t d, int64_t pos0, float* cur, float* prev, float* cache,
                              uint64_t cache_nb, int64_t cap) {
  if (ratio < 1 || ratio > 128 || half < 0 || 2 * static_cast<int64_t>(half) > d || pos0 < 0)
    return cudaErrorInvalidValue;
  if (n <= 0 || d <= 0) return cudaSuccess;
  if ((pos0 + n) / ratio > cap) return cudaErrorInvalidValue;  // a completed block b >= cap
  const CompArgs c{a, a_nb, g, g_nb, n, ape, norm, eps, freqs, half, ratio, d, pos0, cur, prev, cache, cache_nb};
  DS4_LAUNCH(compressor_kernel, 1, kThreads, 0, s, c);
  return cudaGetLastError();
}

}  // namespace ds4::cuda
