// kernels/cuda/ops/ops_cuda.h — host launchers of the CUDA kernels of the non-matmul device ops
// (kernels/device.h; the matmul family is in ops_cuda_matmul.h). One folder per op,
// kernels/cuda/ops/<op>/<op>.cu, holding the kernel and its launcher.
//
// Conventions (all launchers):
// - Work is queued on stream `s` (kernel launches through kernels/cuda/launch.h DS4_LAUNCH); the
//   return value is the launch error (cudaSuccess when queued) or cudaErrorInvalidValue for
//   arguments outside what the kernel supports (named on each launcher). Nothing is synchronized.
// - Pointers are device pointers; a matrix is `rows` rows of `cols` elements (ggml order: the
//   row is contiguous), rows `*_nb` BYTES apart (strided views allowed; nb must be a multiple of
//   the element size). "packed" = rows back to back. Counts are elements, not bytes.
// - Results are those of the CPU reference named on each launcher (kernels/cpu/<op>.cpp, declared
//   in kernels/cpu/ops.h), bit for bit (kernels/NUMERICS.md): every output element is computed in
//   the contract's order by one thread (or one warp for the F32 dots, shared-spec section 1);
//   transcendentals from kernels/quant/math.h; no float atomics; built with --fmad=false.
// - Zero rows / elements: nothing is launched, cudaSuccess.
// Checked by tests/cuda_emu ops test (cuda_emu_ops_test) against the CPU reference on the
// emulated runtime, and by the gpu tests on a real device.
#pragma once

#include <cstdint>

#ifndef DS4_CUDA_EMU
#include <cuda_runtime_api.h>
#endif

namespace ds4::cuda {

// ---- element-wise (4-byte elements; rows x cols) ---------------------------------------------

/// dst[t, i] = src[t, i] as raw 4-byte words (F32 or I32) (kernels/cpu/copy.cpp copy_rows).
/// src and dst must not overlap.
cudaError_t launch_copy(cudaStream_t s, const void* src, uint64_t src_nb, void* dst, uint64_t dst_nb, int64_t rows,
                        int64_t cols);
/// dst[t, i] = dst[t, i] + src[t, i] in FP32 (kernels/cpu/add.cpp add_rows).
cudaError_t launch_add(cudaStream_t s, float* dst, uint64_t dst_nb, const float* src, uint64_t src_nb, int64_t rows,
                       int64_t cols);
/// x[t, i] = x[t, i] * factor in FP32 (kernels/cpu/scale.cpp scale_rows).
cudaError_t launch_scale(cudaStream_t s, float* x, uint64_t x_nb, int64_t rows, int64_t cols, float factor);
/// x[t, i] = value (kernels/cpu/fill.cpp fill_rows).
cudaError_t launch_fill(cudaStream_t s, float* x, uint64_t x_nb, int64_t rows, int64_t cols, float value);

/// x[t, j*dim + d] = e[t, d] for t < n, j < hc, d < dim (kernels/cpu/hc_expand.cpp).
/// e [n, dim], x [n, hc*dim].
cudaError_t launch_hc_expand(cudaStream_t s, const float* e, uint64_t e_nb, int64_t n, int64_t dim, int hc, float* x,
                             uint64_t x_nb);

/// out[t, :] = all[(ids[t] / rows_per_rank) * n + t, :] (dim elements) for t < n
/// (kernels/cpu/embed_rows.cpp owner_rows). all [all_rows, dim], ids I32 [n] packed, out [n, dim].
/// An id whose source row falls outside [0, all_rows) leaves out's row untouched (the CPU
/// reference reads out of bounds there; the Device checks ids where it can).
/// Errors: rows_per_rank <= 0.
cudaError_t launch_owner_rows(cudaStream_t s, const float* all, uint64_t all_nb, int64_t all_rows, const int32_t* ids,
                              int64_t rows_per_rank, int64_t n, int64_t dim, float* out, uint64_t out_nb);

/// ring[p % win, :] = kv[p - pos0, :] (D elements) for p in [max(pos0, pos0 + n - win), pos0 + n)
/// (kernels/cpu/window_store.cpp). kv [n, D], ring [win, D]. Errors: win <= 0, pos0 < 0.
cudaError_t launch_window_store(cudaStream_t s, const float* kv, uint64_t kv_nb, int64_t n, int64_t D, int64_t pos0,
                                float* ring, uint64_t ring_nb, int64_t win);

// ---- normalization, rotation, activation -----------------------------------------------------

/// y[t, :] = w * (x[t, :] * r), r = 1 / sqrt_f32(ss / dim + eps), ss = dot_f32(x[t], x[t])
/// (kernels/cpu/rmsnorm.cpp rmsnorm_row; w null: x * r). x, y [n, dim] (y may equal x: the same
/// pointer and stride), w [dim] packed or null.
cudaError_t launch_rmsnorm(cudaStream_t s, const float* x, uint64_t x_nb, const float* w, int64_t n, int64_t dim,
                           float eps, float* y, uint64_t y_nb);

/// Interleaved RoPE in place on the last 2*half elements of each of the `heads` D-element heads
/// of every row: pair i rotated by float(pos[t]) * freqs[i] (cos/sin from sincos_f32), the
/// conjugate when `inverse` (kernels/cpu/rope.cpp rope_angles + rope_apply_cs).
/// x [n, heads*D], freqs [half] packed, pos I32 [n] packed. Errors: 2*half > D.
cudaError_t launch_rope(cudaStream_t s, float* x, uint64_t x_nb, int64_t n, int64_t heads, int64_t D,
                        const float* freqs, int half, const int32_t* pos, bool inverse);

/// Clamped SwiGLU in place: g = silu_f32(min(g, limit)) * clamp(u, -limit, limit) (limit <= 0: no
/// clamp), then g = g * row_weight[t] when row_weight is non-null (kernels/cpu/swiglu.cpp
/// swiglu_clamped + the device op's row weight). g, u [n, ff]; row_weight [n] packed or null.
cudaError_t launch_swiglu(cudaStream_t s, float* g, uint64_t g_nb, const float* u, uint64_t u_nb, int64_t n,
                          int64_t ff, float limit, const float* row_weight);

/// In-place activation QDQ of the `heads` D-element heads of every row (kernels/cpu/act_qdq.cpp
/// act_qdq_rows, kernels/quant/act_qdq.h): hadamard_fp4 false: FP8 E4M3 QDQ of elements [0, len)
/// of each head in blocks of `block`; true: normalized Hadamard of the head then FP4 E2M1 QDQ in
/// blocks of `block`. x [n, heads*D]. Errors: block <= 0, len % block != 0, len > D; hadamard_fp4
/// with len != D or D not a power of two.
cudaError_t launch_act_qdq(cudaStream_t s, float* x, uint64_t x_nb, int64_t n, int64_t heads, int64_t D,
                           bool hadamard_fp4, int64_t len, int64_t block);

// ---- reductions in a fixed order ---------------------------------------------------------------

/// dst[i] = ((src[0*m + i] + src[1*m + i]) + ...) + src[(parts-1)*m + i] for i < m
/// (kernels/cpu/ordered_sum.cpp). src [parts, m] packed, dst [m] packed. Errors: parts < 1.
cudaError_t launch_ordered_sum(cudaStream_t s, const float* src, int64_t parts, int64_t m, float* dst);

/// out[t, :] = ((+0 + slot_{k1}) + slot_{k2}) + ... over token t's K slots (slot row t*K + k) in
/// ascending ids[t, k], equal ids in slot order (kernels/cpu/moe_combine.cpp moe_combine_row).
/// slots [n*K, dim], ids I32 [n, K], out [n, dim]. Errors: K < 1 or K > 64.
cudaError_t launch_moe_combine(cudaStream_t s, const float* slots, uint64_t slots_nb, const int32_t* ids,
                               uint64_t ids_nb, int64_t n, int64_t K, int64_t dim, float* out, uint64_t out_nb);

/// Per row t < n, the indices of the k largest of scores[t, 0 .. min(ld, (pos0 + t + 1) / ratio)),
/// descending, ties to the lower index, NaN last, padded with -1 (the topk device op:
/// kernels/cpu/topk.cpp topk_desc_into). scores [n, ld], out I32 [n, k]. Errors: ratio <= 0, k < 0.
cudaError_t launch_topk(cudaStream_t s, const float* scores, uint64_t scores_nb, int64_t n, int64_t ld, int64_t pos0,
                        int ratio, int32_t* out, uint64_t out_nb, int64_t k);

/// MoE routing of n tokens over E experts (kernels/cpu/router.cpp route_token_into): s =
/// sqrt_f32(softplus(logits)); tid2eid non-null (hash layers): ids[t] = tid2eid[tokens[t], 0..K),
/// else the top-K of s + bias (bias null: s) in the topk order; weights[t, i] = s[ids[t, i]] /
/// (sum of the selected s in slot order) when `normalize`, else s, times route_scale (an id
/// outside [0, E) counts as s = 0). A token outside [0, tid_rows) (the CPU reference aborts)
/// gives ids -1 and weights 0. logits [n, E], bias [E] packed, tid2eid I32 [tid_rows, K],
/// tokens I32 [n] packed, ids I32 [n, K], weights [n, K]. Errors: E > 1024, K < 1, K > E.
cudaError_t launch_router(cudaStream_t s, const float* logits, uint64_t logits_nb, int64_t n, int64_t E, int64_t K,
                          const float* bias, const int32_t* tid2eid, uint64_t tid_nb, int64_t tid_rows,
                          const int32_t* tokens, bool normalize, float route_scale, int32_t* ids, uint64_t ids_nb,
                          float* weights, uint64_t weights_nb);

// ---- mHC ---------------------------------------------------------------------------------------

/// mHC before a sublayer, per token t < n (kernels/cpu/hc_pre.cpp hc_pre_row): mixes[r] =
/// dot_f32(fn[r], X[t]) * (1 / sqrt_f32(ss / (hc*dim) + norm_eps)) (ss = dot_f32(X[t], X[t])), the
/// Sinkhorn split into mix[t] = [pre hc | post hc | comb hc*hc], y[t, d] = sum_j pre[j] X[t, j*dim + d]
/// (j ascending from +0). x [n, hc*dim], fn [(2+hc)*hc, hc*dim], scale [3], base [(2+hc)*hc]
/// (packed), y [n, dim], mix [n, (2+hc)*hc]. Errors: hc < 1 or (2+hc)*hc > 64.
cudaError_t launch_hc_pre(cudaStream_t s, const float* x, uint64_t x_nb, const float* fn, uint64_t fn_nb,
                          const float* scale, const float* base, int hc, int64_t dim, int64_t n, int iters,
                          float hc_eps, float norm_eps, float* y, uint64_t y_nb, float* mix, uint64_t mix_nb);

/// mHC after a sublayer, in place (kernels/cpu/hc_post.cpp hc_post_row): X'[t, k*dim + d] =
/// post[k] f[t, d] + (sum_j comb[j*hc + k] X[t, j*dim + d], j ascending from +0) with post, comb
/// from mix[t]. f [n, dim], mix [n, (2+hc)*hc], x [n, hc*dim]. Errors: hc < 1 or hc > 16.
cudaError_t launch_hc_post(cudaStream_t s, const float* f, uint64_t f_nb, const float* mix, uint64_t mix_nb, int hc,
                           int64_t dim, int64_t n, float* x, uint64_t x_nb);

/// The head's mHC reduction (kernels/cpu/hc_head.cpp hc_head_row): mixes as hc_pre's over fn's hc
/// rows, w_j = sigmoid_f32(mixes[j] * scale[0] + base[j]) + hc_eps, h[t, d] = sum_j w_j X[t, j*dim + d].
/// x [n, hc*dim], fn [hc, hc*dim], scale [1+], base [hc], h [n, dim]. Errors: hc < 1 or hc > 16.
cudaError_t launch_hc_head(cudaStream_t s, const float* x, uint64_t x_nb, const float* fn, uint64_t fn_nb,
                           const float* scale, const float* base, int hc, int64_t dim, int64_t n, float hc_eps,
                           float norm_eps, float* h, uint64_t h_nb);

// ---- attention-side ops ------------------------------------------------------------------------

/// Sparse attention with sink over one sequence's chunk (the sparse_attention device op:
/// kernels/device_cpu.cpp candidate list + kernels/cpu/sparse_attention.cpp attend_with_sink).
/// Query t (position pos = pos0 + t), head h < H: candidates = raw KV of positions
/// max(0, pos - win + 1) .. pos (kv row p - pos0 for p >= pos0, else ring row p % win), then
/// ratio 4: ckv rows sel[t, i] for i < ksel with 0 <= sel < ckv_rows (others skipped), ratio > 0
/// otherwise: ckv rows 0 .. (pos + 1) / ratio - 1, ratio 0: none; s_i = dot_f32(q_h, c_i) * scale;
/// softmax with sinks[h]; out[t, h*D + d] = sum_i (e_i / den) c_i[d] ascending.
/// q [n, H*D], kv [n, D], ring [win, D], ckv [ckv_rows, D], sel I32 [n, ksel] (may be null when
/// ksel == 0), sinks [H] packed, out [n, H*D]. Errors: win < 1; ratio < 0; ratio not 0 or 4 with
/// (pos0 + n) / ratio > ckv_rows; more than 11264 candidates per query (the scores live in
/// shared memory).
cudaError_t launch_sparse_attention(cudaStream_t s, const float* q, uint64_t q_nb, const float* kv, uint64_t kv_nb,
                                    const float* ring, uint64_t ring_nb, int64_t win, const float* ckv,
                                    uint64_t ckv_nb, int64_t ckv_rows, const int32_t* sel, uint64_t sel_nb,
                                    int64_t ksel, const float* sinks, int ratio, int64_t n, int64_t H, int64_t D,
                                    int64_t pos0, float scale, float* out, uint64_t out_nb);

/// The compressor over one sequence's chunk of n tokens at positions pos0.. (the compressor device
/// op: kernels/cpu/compressor.cpp compressor_push, then rmsnorm_row with `norm` and rope_apply at
/// the block start b*ratio). Width w = 2d (overlap, `prev` non-null) or d. a, g [n, w]; ape
/// [ratio, w] packed; norm [d] packed or null; freqs [half] packed; cur [2, ratio*w] packed
/// (cur_a, cur_g); prev [2, ratio*d] packed or null; cache [cap, d] (row b = completed block b).
/// Errors: ratio < 1 or > 128; 2*half > d; a completed block b >= cap.
cudaError_t launch_compressor(cudaStream_t s, const float* a, uint64_t a_nb, const float* g, uint64_t g_nb,
                              int64_t n, const float* ape, const float* norm, float eps, const float* freqs, int half,
                              int ratio, int64_t d, int64_t pos0, float* cur, float* prev, float* cache,
                              uint64_t cache_nb, int64_t cap);

/// Lightning-indexer shard scores (the indexer_scores device op: kernels/cpu/indexer_scores.cpp):
/// out[k, t, j] = sum over h < hs ascending from +0 of max(dot_f32(q[t, (k*hs + h)*D ..], keys[j]),
/// 0) * w[t, k*hs + h] for shard k < shards, t < n, j < (pos0 + t + 1) / 4; other entries
/// untouched. q [n, H*D], w [n, H], keys [key_rows, D], out [shards, n, ld] (rows out_nb, planes
/// out_nb2 bytes apart). Errors: (pos0 + n) / 4 > ld or > key_rows.
cudaError_t launch_indexer_scores(cudaStream_t s, const float* q, uint64_t q_nb, const float* w, uint64_t w_nb,
                                  const float* keys, uint64_t keys_nb, int64_t key_rows, int64_t n, int64_t D,
                                  int64_t hs, int64_t shards, int64_t pos0, float* out, uint64_t out_nb,
                                  uint64_t out_nb2, int64_t ld);

}  // namespace ds4::cuda
