// kernels/cuda/ops/sparse_attention/sparse_attention.cu — the sparse_attention op (ops_cuda.h
// launch_sparse_attention; CPU reference: the candidate list of kernels/device_cpu.cpp
// sparse_attention and kernels/cpu/sparse_attention.cpp attend_with_sink). One block per (query,
// head): warps compute the candidate scores dot_f32 * scale into shared memory (candidate order:
// window positions ascending, then the compressed rows), thread 0 takes the max over the sink and
// the scores in order, every thread exponentiates, thread 0 sums den = exp(sink - max) + e_i in
// order, then one thread per output element d accumulates (e_i / den) c_i[d] ascending from +0.
#include "kernels/cuda/ops/ops_common.cuh"
#include "kernels/cuda/ops/ops_cuda.h"
#include "kernels/quant/math.h"

namespace ds4::cuda {
namespace {

constexpr int kThreads = 128;
constexpr int64_t kMaxCand = 11264;  // 44 KiB of scores (sm_75: 48 KiB of shared memory per block)

struct AttnArgs {
  const float* q;
  uint64_t q_nb;
  const float* kv;
  uint64_t kv_nb;
  const float* ring;
  uint64_t ring_nb;
  int64_t win;
  const float* ckv;
  uint64_t ckv_nb;
  int64_t ckv_rows;
  const int32_t* sel;
  uint64_t sel_nb;
  int64_t ksel;
  const float* sinks;
  int ratio;
  int64_t n, H, D, pos0;
  float scale;
  float* out;
  uint64_t out_nb;
};

/// Row of candidate i of query t (position pos; window candidates from p_lo), or null for a
/// skipped selection entry.
__device__ inline const float* cand_row(const AttnArgs& a, int64_t t, int64_t pos, int64_t p_lo, int64_t nw,
                                        int64_t i) {
  if (i < nw) {
    const int64_t p = p_lo + i;
    return p >= a.pos0 ? ops::at_row(a.kv, p - a.pos0, a.kv_nb) : ops::at_row(a.ring, p % a.win, a.ring_nb);
  }
  const int64_t j = i - nw;
  if (a.ratio == 4) {
    const int32_t id = ops::at_row(a.sel, t, a.sel_nb)[j];
    return id >= 0 && id < a.ckv_rows ? ops::at_row(a.ckv, id, a.ckv_nb) : nullptr;
  }
  return ops::at_row(a.ckv, j, a.ckv_nb);
}

__global__ void sparse_attention_kernel(AttnArgs a) {
  DS4_DYN_SHARED(float, sc);
  __shared__ float mx_sh, den_sh;
  const int lane = static_cast<int>(threadIdx.x % 32), warp = static_cast<int>(threadIdx.x / 32);
  const int warps = static_cast<int>(blockDim.x / 32);
  for (int64_t item = blockIdx.x; item < a.n * a.H; item += gridDim.x) {
    const int64_t t = item / a.H, h = item % a.H, pos = a.pos0 + t;
    const int64_t p_lo = pos - a.win + 1 > 0 ? pos - a.win + 1 : 0;
    const int64_t nw = pos - p_lo + 1;
    const int64_t nc = a.ratio == 4 ? a.ksel : (a.ratio > 0 ? (pos + 1) / a.ratio : 0);
    const int64_t ncand = nw + nc;
    const float* Q = ops::at_row(a.q, t, a.q_nb) + h * a.D;
    const float sink = a.sinks[h];
    for (int64_t i = warp; i < ncand; i += warps) {
      const float* c = cand_row(a, t, pos, p_lo, nw, i);
      if (!c) continue;  // warp-uniform
      const float d = ops::warp_dot_f32(Q, c, a.D, lane);
      if (lane == 0) sc[i] = d * a.scale;
    }
    __syncthreads();
    if (threadIdx.x == 0) {
      float mx = sink;
      for (int64_t i = 0; i < ncand; ++i)
        if (cand_row(a, t, pos, p_lo, nw, i)) mx = fmaxf(mx, sc[i]);
      mx_sh = mx;
    }
    __syncthreads();
    const float mx = mx_sh;
    for (int64_t i = threadIdx.x; i < ncand; i += blockDim.x)
      if (cand_row(a, t, pos, p_lo, nw, i)) sc[i] = quant::exp_f32(sc[i] - mx);
    __syncthreads();
    if (threadIdx.x == 0) {
      float den = quant::exp_f32(sink - mx);
      for (int64_t i = 0; i < ncand; ++i)
        if (cand_row(a, t, pos, p_lo, nw, i)) den += sc[i];
      den_sh = den;
    }
    __syncthreads();
    const float den = den_sh;
    float* O = ops::at_row(a.out, t, a.out_nb) + h * a.D;
    for (int64_t d = threadIdx.x; d < a.D; d += blockDim.x) {
      float acc = 0;
      for (int64_t i = 0; i < ncand; ++i) {
        const float* c = cand_row(a, t, pos, p_lo, nw, i);
        if (!c) continue;
        const float p = sc[i] / den;
        acc += p * c[d];
      }
      O[d] = acc;
    }
    __syncthreads();  // sc, mx_sh, den_sh are rewritten for the next item
  }
}

}  // namespace

cudaError_t launch_sparse_attention(cudaStream_t s, const float* q, uint64_t q_nb, const float* kv, uint64_t kv_nb,
                                    const float* ring, uint64_t ring_nb, int64_t win, const float* ckv,
                                    uint64_t ckv_nb, int64_t ckv_rows, const int32_t* sel, uint64_t sel_nb,
                                    int64_t ksel, const float* sinks, int ratio, int64_t n, int64_t H, int64_t D,
                                    int64_t pos0, float scale, float* out, uint64_t out_nb) {
  if (win < 1 || ratio < 0 || pos0 < 0 || (ratio == 4 && ksel > 0 && !sel)) return cudaErrorInvalidValue;
  if (ratio != 4) ksel = 0;
  if (ratio > 0 && ratio != 4 && (pos0 + n) / ratio > ckv_rows) return cudaErrorInvalidValue;
  if (n <= 0 || H <= 0 || D <= 0) return cudaSuccess;
  const int64_t last = pos0 + n - 1;
  const int64_t max_win = last + 1 < win ? last + 1 : win;
  const int64_t max_comp = ratio == 4 ? ksel : (ratio > 0 ? (last + 1) / ratio : 0);
  const int64_t max_cand = max_win + max_comp;
  if (max_cand > kMaxCand) return cudaErrorInvalidValue;
  const AttnArgs a{q,    q_nb,  kv, kv_nb, ring, ring_nb, win,  ckv,   ckv_nb, ckv_rows, sel, sel_nb,
                   ksel, sinks, ratio, n,   H,    D,       pos0, scale, out,    out_nb};
  DS4_LAUNCH(sparse_attention_kernel, ops::blocks_for(n * H), kThreads, static_cast<size_t>(max_cand) * 4, s, a);
  return cudaGetLastError();
}

}  // namespace ds4::cuda
