// kernels/cuda/ops/indexer_scores/indexer_scores.cu — the indexer_scores op (ops_cuda.h
// launch_indexer_scores; CPU reference kernels/cpu/indexer_scores.cpp and the device op's shard
// loop in kernels/device_cpu.cpp). One warp per (shard, query, key): the shard's heads ascending,
// each a dot_f32 (ops::warp_dot_f32), relu as std::max(dot, 0) (NaN and -0 pass), times the
// head weight, summed from +0.
#include "kernels/cuda/ops/ops_common.cuh"
#include "kernels/cuda/ops/ops_cuda.h"

namespace ds4::cuda {
namespace {

constexpr int kThreads = 128;

__global__ void indexer_scores_kernel(const float* q, uint64_t q_nb, const float* w, uint64_t w_nb, const float* keys,
                                      uint64_t keys_nb, int64_t n, int64_t D, int64_t hs, int64_t shards,
                                      int64_t pos0, int64_t jmax, float* out, uint64_t out_nb, uint64_t out_nb2) {
  const int lane = static_cast<int>(threadIdx.x % 32);
  const int64_t warp = ops::global_thread() / 32, warps = ops::grid_threads() / 32;
  const int64_t total = shards * n * jmax;
  for (int64_t it = warp; it < total; it += warps) {
    const int64_t k = it / (n * jmax), rem = it % (n * jmax), t = rem / jmax, j = rem % jmax;
    if (j >= (pos0 + t + 1) / 4) continue;  // warp-uniform
    const float* Q = ops::at_row(q, t, q_nb);
    const float* W = ops::at_row(w, t, w_nb);
    const float* key = ops::at_row(keys, j, keys_nb);
    float s = 0;
    for (int64_t h = 0; h < hs; ++h) {
      const int64_t hh = k * hs + h;
      const float d = ops::warp_dot_f32(Q + hh * D, key, D, lane);
      const float r = d < 0.0f ? 0.0f : d;  // std::max(d, 0.0f)
      s += r * W[hh];
    }
    if (lane == 0) {
      float* o = reinterpret_cast<float*>(reinterpret_cast<unsigned char*>(out) + static_cast<uint64_t>(k) * out_nb2);
      ops::at_row(o, t, out_nb)[j] = s;
    }
  }
}

}  // namespace

cudaError_t launch_indexer_scores(cudaStream_t s, const float* q, uint64_t q_nb, const float* w, uint64_t w_nb,
                                  const float* keys, uint64_t keys_nb, int64_t key_rows, int64_t n, int64_t D,
                                  int64_t hs, int64_t shards, int64_t pos0, float* out, uint64_t out_nb,
                                  uint64_t out_nb2, int64_t ld) {
  if (pos0 < 0 || hs < 0) return cudaErrorInvalidValue;
  if (n <= 0 || shards <= 0) return cudaSuccess;
  const int64_t jmax = (pos0 + n) / 4;  // visible keys of the chunk's last query
  if (jmax > ld || jmax > key_rows) return cudaErrorInvalidValue;
  if (jmax == 0) return cudaSuccess;
  const int64_t warps = shards * n * jmax;
  DS4_LAUNCH(indexer_scores_kernel, ops::grid_for(warps * 32, kThreads), kThreads, 0, s, q, q_nb, w, w_nb, keys,
             keys_nb, n, D, hs, shards, pos0, jmax, out, out_nb, out_nb2);
  return cudaGetLastError();
}

}  // namespace ds4::cuda
