// kernels/cuda/ops/sparse_attention/sparse_attention.cu — the sparse_attention op (ops_cuda.h
// launch_sparse_attention; CPU reference: the candidate list of kernels/device_cpu.cpp
// sparse_attention and kernels/cpu/sparse_attention.cpp attend_with_sink).
//
// One block of 512 threads (16 warps) per (query, head). The raw candidate list (window positions
// ascending, then the compressed rows: for ratio 4 the ksel selection entries, where an entry
// outside 0..ckv_rows-1 is skipped; early in a sequence almost all of the 512 are the top-k's -1
// padding) is walked in chunks of 256 raw candidates: each chunk's valid candidates are
// compacted, in order, into a shared list of row pointers (warp ballots + a prefix over the 8 warp
// counts), so the softmax and the output loops touch only valid candidates, and a skipped entry costs
// one load of its id per walk instead of one per thread per loop. Per item:
//   1. scores: per chunk, warp w takes compacted rows w, w + 16, ...: dot_f32(q, c) * scale (the
//      contract's 32-lane FMA order; for D <= 512 each lane keeps its 16 q values in registers and
//      issues its 16 loads of the row before the FMAs) into sc[k], k = index among valid candidates;
//   2. max over sink and scores by a block tree of fmaxf. fmaxf ignores a NaN operand and otherwise
//      returns the larger, so any order gives the max of the non-NaN values (NaN when all are NaN),
//      as the serial loop does; only the sign of a zero max can differ, and that cannot change a bit
//      downstream: the max is only used as exp_f32(x - max), x - (+0) and x - (-0) differ only for
//      x = -0 (-0 and +0), and exp_f32(-0) == exp_f32(+0) == 1;
//   3. every thread exponentiates its sc[k] = exp_f32(sc[k] - max);
//   4. thread 0 sums den = exp_f32(sink - max) + sc[0] + sc[1] + ... in order (the contract's order);
//   5. every thread divides its sc[k] = sc[k] / den (the same division the CPU does per candidate);
//   6. output: the chunks are compacted again and thread d accumulates o[d] = +0 + p_0 c_0[d] +
//      p_1 c_1[d] + ... in candidate order (product, then add: built with --fmad=false), one element
//      d per thread per pass (ceil(D / 512) passes, one at D = 512).
// Prefill (n > 1) runs the same per-item code, one block per (token, head), grid-stride.
// Shared memory: sc[] is dynamic, 4 bytes per candidate of the launch's longest list (at most
// kMaxCand = 11264: 44 KiB), plus 2 KiB of chunk pointers and a few words of static shared memory,
// which stays under sm_75's 48 KiB per block without the opt-in.
#include "kernels/cuda/ops/ops_common.cuh"
#include "kernels/cuda/ops/ops_cuda.h"
#include "kernels/quant/math.h"

namespace ds4::cuda {
namespace {

constexpr int kThreads = 512;  // one output element per thread at D = 512
constexpr int kWarps = kThreads / 32;
constexpr int kChunk = 256;  // raw candidates compacted per step (warps 0..7)
constexpr int kChunkWarps = kChunk / 32;
constexpr int kQRegs = 16;  // q values per lane held in registers: D <= 512
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

/// Row of raw candidate i of query t (window candidates from position p_lo, nw of them), or null
/// for a skipped selection entry.
__device__ inline const float* cand_row(const AttnArgs& a, int64_t t, int64_t p_lo, int64_t nw, int64_t i) {
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

/// Compacts the valid candidates among raw indices [base, base + kChunk) (those below ncand) of
/// query t into rows[0..m), keeping their order, and returns m to every thread. Threads below
/// kChunk test one raw index each; a warp's ballot gives each valid lane its rank in the warp, the
/// counts of the warps before it give the warp's offset. Every thread of the block must call it
/// (two barriers); rows is ready for every thread on return. wcnt: kChunkWarps shared ints.
__device__ inline int compact_chunk(const AttnArgs& a, int64_t t, int64_t p_lo, int64_t nw, int64_t ncand,
                                    int64_t base, const float** rows, int* wcnt) {
  const int tid = static_cast<int>(threadIdx.x), lane = tid % 32, warp = tid / 32;
  const float* c = nullptr;
  int rank = 0;
  if (warp < kChunkWarps) {  // warp-uniform
    const int64_t i = base + tid;
    if (i < ncand) c = cand_row(a, t, p_lo, nw, i);
    const unsigned valid = __ballot_sync(0xffffffffu, c != nullptr);
    rank = __popc(valid & ((1u << lane) - 1u));
    if (lane == 0) wcnt[warp] = __popc(valid);
  }
  __syncthreads();
  int before = 0, total = 0;
  for (int w = 0; w < kChunkWarps; ++w) {
    const int x = wcnt[w];
    if (w < warp) before += x;
    total += x;
  }
  if (c) rows[before + rank] = c;
  __syncthreads();
  return total;
}

/// dot_f32(q, c) over n <= 32 * kQRegs elements computed by one warp with lane's q values in
/// registers (qv[j] = q[lane + 32 j]): the same FMAs in the same order as ops::warp_dot_f32 (lane l
/// adds i = l, l + 32, ... ascending from +0, then the butterfly 16..1); all loads of the row are
/// issued before the first FMA. Every lane returns the same bits.
__device__ inline float warp_dot_qregs(const float (&qv)[kQRegs], const float* c, int64_t n, int lane) {
  float cv[kQRegs];
#pragma unroll
  for (int j = 0; j < kQRegs; ++j) cv[j] = lane + 32 * j < n ? c[lane + 32 * j] : 0.0f;
  float acc = 0.0f;
#pragma unroll
  for (int j = 0; j < kQRegs; ++j)
    if (lane + 32 * j < n) acc = fmaf(qv[j], cv[j], acc);
  for (int off = 16; off > 0; off >>= 1) acc = acc + __shfl_xor_sync(0xffffffffu, acc, off);
  return acc;
}

__global__ void __launch_bounds__(kThreads) sparse_attention_kernel(AttnArgs a) {
  DS4_DYN_SHARED(float, sc);
  __shared__ const float* rows[kChunk];
  __shared__ int wcnt[kChunkWarps];
  __shared__ float red[kWarps];
  __shared__ float den_sh;
  const int tid = static_cast<int>(threadIdx.x), lane = tid % 32, warp = tid / 32;
  const bool qregs = a.D <= 32 * kQRegs;
  for (int64_t item = blockIdx.x; item < a.n * a.H; item += gridDim.x) {
    const int64_t t = item / a.H, h = item % a.H, pos = a.pos0 + t;
    const int64_t p_lo = pos - a.win + 1 > 0 ? pos - a.win + 1 : 0;
    const int64_t nw = pos - p_lo + 1;
    const int64_t nc = a.ratio == 4 ? a.ksel : (a.ratio > 0 ? (pos + 1) / a.ratio : 0);
    const int64_t ncand = nw + nc;
    const float* Q = ops::at_row(a.q, t, a.q_nb) + h * a.D;
    const float sink = a.sinks[h];
    float qv[kQRegs];
#pragma unroll
    for (int j = 0; j < kQRegs; ++j) qv[j] = qregs && lane + 32 * j < a.D ? Q[lane + 32 * j] : 0.0f;

    // 1. Scores of the valid candidates, compacted: sc[0..nv).
    int64_t nv = 0;
    for (int64_t base = 0; base < ncand; base += kChunk) {
      const int m = compact_chunk(a, t, p_lo, nw, ncand, base, rows, wcnt);
      for (int r = warp; r < m; r += kWarps) {  // warp-uniform
        const float d = qregs ? warp_dot_qregs(qv, rows[r], a.D, lane) : ops::warp_dot_f32(Q, rows[r], a.D, lane);
        if (lane == 0) sc[nv + r] = d * a.scale;
      }
      nv += m;
      __syncthreads();  // sc written; rows free for the next chunk
    }

    // 2. max over the sink and the scores (block tree of fmaxf: see the file comment).
    float mx = sink;
    for (int64_t k = tid; k < nv; k += kThreads) mx = fmaxf(mx, sc[k]);
    for (int off = 16; off > 0; off >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, off));
    if (lane == 0) red[warp] = mx;
    __syncthreads();
    mx = red[0];
    for (int w = 1; w < kWarps; ++w) mx = fmaxf(mx, red[w]);

    // 3. e_k = exp(s_k - max).
    for (int64_t k = tid; k < nv; k += kThreads) sc[k] = quant::exp_f32(sc[k] - mx);
    __syncthreads();

    // 4. den in the contract's order, one thread.
    if (tid == 0) {
      float den = quant::exp_f32(sink - mx);
#pragma unroll 8
      for (int64_t k = 0; k < nv; ++k) den += sc[k];
      den_sh = den;
    }
    __syncthreads();

    // 5. p_k = e_k / den.
    const float den = den_sh;
    for (int64_t k = tid; k < nv; k += kThreads) sc[k] = sc[k] / den;
    __syncthreads();

    // 6. o[d] = sum_k p_k c_k[d] in candidate order from +0, one element per thread per pass.
    float* O = ops::at_row(a.out, t, a.out_nb) + h * a.D;
    for (int64_t d0 = 0; d0 < a.D; d0 += kThreads) {
      const int64_t d = d0 + tid;
      const bool active = d < a.D;
      float acc = 0.0f;
      int64_t k0 = 0;
      for (int64_t base = 0; base < ncand; base += kChunk) {
        const int m = compact_chunk(a, t, p_lo, nw, ncand, base, rows, wcnt);
        if (active) {
          const float* p = sc + k0;
#pragma unroll 8
          for (int r = 0; r < m; ++r) acc += p[r] * rows[r][d];
        }
        k0 += m;
        __syncthreads();  // rows read; free for the next chunk (and sc for the next item)
      }
      if (active) O[d] = acc;
    }
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
