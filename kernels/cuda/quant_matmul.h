// kernels/cuda/quant_matmul.h — host API of the CUDA quantized matrix kernels (Q8_1 activation
// quantization, MMVQ decode path, MMQ prefill / grouped-MoE path, MoE sort and combine).
//
// THE CONTRACT: every float these kernels return equals, bit for bit, what the scalar CPU
// reference returns for the same inputs (kernels/cpu/quant_ref.h):
//   quantize_q8_1        == cpu::quantize_row_q8_1 (kernels/quant/quantize_q8.h), per row
//   mmvq, mmq, mmq_moe   == cpu::vec_dot_q8_1 per (row, token) (kernels/quant/dot_q8_1.h: exact
//                           int32 sub-block sums, fixed fp32 chunk epilogue, 32-lane strided
//                           accumulation and the 16-8-4-2-1 butterfly)
//   moe_combine          == the loop documented on moe_combine
// whatever the batch size, the path (MMVQ / MMQ, MMA / DP4A) or the GPU. The one exception is
// mmvq_swiglu's SiLU (CUDA expf vs the C library's expf): within kSwigluRelTol, see below.
//
// Shapes use ggml order: a weight matrix W is [cols, rows] (ne0 = cols = K, contiguous; row r at
// W + r * row_bytes(type, cols)); activations are token-major: x [n, cols] float, act [n, cols/32]
// BlockQ8_1; outputs y [n, rows] float (y[t * rows + r]). All pointers are device pointers unless
// stated. Every launcher only enqueues work on `stream` and returns the launch status
// (cudaSuccess, cudaErrorInvalidValue for bad arguments, or the kernel launch error).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "kernels/quant/ggml_type.h"

namespace ds4::cuda {

/// Weight types with a CUDA Q8_1 dot: Q4_0, Q8_0, Q2_K, Q4_K, Q6_K, IQ2_XXS, IQ2_XS, IQ2_S, IQ1_S,
/// IQ1_M, MXFP4, NVFP4 (the same set as cpu::can_dot_q8_1).
bool can_dot_q8_1(GgmlType type);

/// x [n, cols] float (row-major) -> act [n, cols/32] BlockQ8_1; cols % 32 == 0. A block of 32
/// holding a NaN or an infinity gets the fp16 NaN scale 0x7E00 and zero codes (quantize_q8.h).
cudaError_t quantize_q8_1(const float* x, int64_t n, int64_t cols, void* act, cudaStream_t stream);

/// MMVQ (decode): y [n, rows] = W x^T with Q8_1 activations act [n, cols/32]. One warp per weight
/// row, lane l takes chunks l, l+32, ... (the contract's lanes), DP4A integer sums. Columns are
/// processed 8 at a time (n of any size is accepted; each column's bits do not depend on n).
cudaError_t mmvq(GgmlType type, const void* W, int64_t rows, int64_t cols, const void* act,
                 int64_t n, float* y, cudaStream_t stream);

/// Relative tolerance of mmvq_swiglu against the CPU formula evaluated on the bit-exact gate/up
/// dots: CUDA's expf is within 2 ulp of the exact value, the C library's within 1 ulp; the three
/// following fp32 operations are correctly rounded on both sides. 16 ulp of headroom.
inline constexpr float kSwigluRelTol = 16.0f / 8388608.0f;

/// Fused gate/up MMVQ with the DeepSeek-V4 clamped SwiGLU: g = Wg x, u = Wu x (each bit-exact as
/// mmvq); if limit > 0: g = min(g, limit), u = clamp(u, -limit, limit); h = (g / (1 + exp(-g))) * u
/// (dsv4-architecture.md "Routed expert"; kernels/cpu/swiglu.cpp swiglu_clamped). h [n, rows].
cudaError_t mmvq_swiglu(GgmlType type, const void* Wg, const void* Wu, int64_t rows, int64_t cols,
                        const void* act, int64_t n, float limit, float* h, cudaStream_t stream);

/// Which integer engine MMQ uses for its 16-element sub-block sums. Both give identical bits.
enum class MmqPath {
  Auto,  ///< int8 mma.sync m8n8k16 when the device is sm_75+, DP4A otherwise
  Mma,   ///< force MMA (cudaErrorInvalidDevice below sm_75 or when not compiled for it)
  Dp4a,  ///< force the DP4A fallback
};

/// MMQ (prefill): y [n, rows] = W x^T for any n. Weight tiles (64 rows x 32 values) are decoded
/// once into shared memory and shared by 16 tokens; each y element has one owning thread, which
/// accumulates the contract's 32 lanes in bit-reversed lane order with a 5-level stack, so the
/// sum is the contract's butterfly exactly.
cudaError_t mmq(GgmlType type, const void* W, int64_t rows, int64_t cols, const void* act,
                int64_t n, float* y, MmqPath path, cudaStream_t stream);

/// Device buffers of a stable counting sort of (token, slot) pairs by expert (moe_sort).
/// n_pairs = n_tokens * k; pair p = t * k + slot.
struct MoeSorted {
  int32_t* expert_bounds = nullptr;  ///< [n_experts + 1]: pairs of expert e are [b[e], b[e+1])
  int32_t* sorted_pairs = nullptr;   ///< [n_pairs]: pair ids, grouped by expert, ascending p within
  int32_t* tiles = nullptr;          ///< [moe_max_tiles(...) * 3]: (expert, begin, end) per MMQ tile
  int32_t* counters = nullptr;       ///< [2]: n_tiles, n_invalid (ids outside [0, n_experts))
};

/// Token columns per MMQ tile (one tile never mixes experts).
inline constexpr int kMmqTileCols = 16;
/// Upper bound of the MMQ tile count for n_pairs pairs over n_experts experts.
inline int64_t moe_max_tiles(int64_t n_pairs, int n_experts) {
  return (n_pairs + kMmqTileCols - 1) / kMmqTileCols + n_experts;
}

/// Stable counting sort of ids [n_pairs] (expert id of pair p) by expert: one thread per expert
/// counts and fills in ascending p (no atomics), prefix sums by one thread. Pairs with an id
/// outside [0, n_experts) are counted in counters[1] and left out. Mirror: moe_sort_host.h.
cudaError_t moe_sort(const int32_t* ids, int64_t n_pairs, int n_experts, const MoeSorted& out,
                     cudaStream_t stream);

/// Grouped MMQ: for each pair p = t * k + slot routed to expert e = ids[p]:
/// y [n_pairs, rows] row p = W_e act[t] (bit-exact as mmq). w_experts: device array of n_experts
/// device pointers (each a [cols, rows] matrix of `type`); act [n_tokens, cols/32] Q8_1.
/// Rows of y for invalid pairs are not written.
cudaError_t mmq_moe(GgmlType type, const void* const* w_experts, int n_experts, int64_t rows,
                    int64_t cols, const void* act, int k, const MoeSorted& sorted, int64_t n_pairs,
                    float* y, MmqPath path, cudaStream_t stream);

/// Combines expert outputs y [n_tokens * k, dim] into out [n_tokens, dim]: for each token, its k
/// slots are visited in ascending expert id (ties: ascending slot); acc = 0.0f; acc = acc + v with
/// v = y[t*k+slot][d], or v = weights[t*k+slot] * y[...] (rounded product) when weights != null.
/// Slots with an id outside [0, n_experts) are skipped. FP32, one thread per output element.
cudaError_t moe_combine(const float* y, const int32_t* ids, const float* weights, int64_t n_tokens,
                        int k, int n_experts, int64_t dim, float* out, cudaStream_t stream);

/// Test support: the contract's chunk partials P_b (dot_q8_1.h step 1) of one weight row with
/// act [cols/32] Q8_1, computed by the same device decode + DP4A code as mmvq. P [cols/32].
cudaError_t chunk_partials(GgmlType type, const void* w_row, int64_t cols, const void* act,
                           float* P, cudaStream_t stream);

}  // namespace ds4::cuda
