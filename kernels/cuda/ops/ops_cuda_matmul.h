// kernels/cuda/ops/ops_cuda_matmul.h — host launchers of the CUDA matrix-product family of the
// device API (kernels/device.h matmul, matmul2, moe_experts, embed_rows), namespace ds4::cuda.
// The Device class (kernels/cuda/device_cuda.cpp) maps dev::Tensors to these raw device pointers,
// element counts and row strides in bytes. Every launcher only enqueues work on `s` and returns
// the launch status (cudaErrorInvalidValue for bad arguments). The Q8_1 activation path reuses
// kernels/cuda/quant_matmul.h (quantize_q8_1 + mmvq / mmq, bit-exact to cpu::vec_dot_q8_1).
//
// Numerics (kernels/NUMERICS.md): the F32 path decodes each weight row exactly (kernels/quant/
// decode.h, DS4_HD) and dots it in the dot_f32 order of the shared spec: 32 lanes, lane l takes
// the elements i % 32 == l in ascending i with one fused multiply-add each (__fmaf_rn), from +0,
// then the butterfly 16, 8, 4, 2, 1 (__shfl_xor_sync). One warp per (weight row, 8 tokens).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "kernels/quant/ggml_type.h"

namespace ds4::cuda {

/// Elements one thread decodes at a time for `type` (32 for F32/F16/BF16, 32-element blocks and
/// the 32-element groups of 256-element super-blocks; 64 NVFP4/NVFP4_S2; 128 F8_E4M3_R128;
/// 256 Q8_K); 0 when the type has no CUDA decoder.
int decode_unit_elems(GgmlType type);

/// y[t, r] = dot_f32(decode(W row r), x[t, :]) for t < n, r < rows. W: `rows` rows of `cols`
/// elements of `type`, `w_nb1` bytes apart (strided views allowed); x F32 rows `x_nb1` bytes apart;
/// y F32 rows `y_nb1` bytes apart. cols % decode_unit_elems(type) == 0.
cudaError_t launch_matmul_f32(cudaStream_t s, GgmlType type, const void* w, int64_t rows, int64_t cols,
                              uint64_t w_nb1, const float* x, uint64_t x_nb1, int64_t n, float* y, uint64_t y_nb1);

/// FP8_QDQ activations: xq[t, :] = x[t, :] FP8 E4M3 quantize-dequantized in 1x128 blocks
/// (kernels/quant/act_qdq.h qdq_fp8_e4m3, the CPU's matmul_qdq_fp8). xq packed [n, cols];
/// cols % 128 == 0.
cudaError_t launch_qdq_fp8_rows(cudaStream_t s, const float* x, uint64_t x_nb1, int64_t n, int64_t cols, float* xq);

/// out[t, :] = decode(W row ids[t]) when vocab0 <= ids[t] < vocab1, else +0 (exact; the CPU's
/// cpu::embed_rows). W `cols` elements of `type` per row, `w_nb1` apart; ids [n]; out F32 rows
/// `out_nb1` bytes apart.
cudaError_t launch_embed_rows(cudaStream_t s, GgmlType type, const void* w, int64_t cols, uint64_t w_nb1,
                              const int32_t* ids, int64_t n, int64_t vocab0, int64_t vocab1, float* out,
                              uint64_t out_nb1);

/// Copies `rows` rows of `width` bytes from src (rows `spitch` apart) to dst (rows `dpitch`
/// apart), byte for byte (packs strided views for the Q8_1 kernels, which need packed rows).
cudaError_t launch_copy_rows_bytes(cudaStream_t s, void* dst, uint64_t dpitch, const void* src, uint64_t spitch,
                                   uint64_t width, int64_t rows);

/// MoE gather of one expert's m slots: for i < m, p = pairs[i] (= t * k + slot):
/// xe[i, :] = x[p / k, :] (dim floats; x rows `x_nb1` apart) and rw[i] = weights[p / k, p % k]
/// (weights rows `w_nb1` apart). xe packed [m, dim]; rw [m].
cudaError_t launch_moe_gather(cudaStream_t s, const float* x, uint64_t x_nb1, int64_t dim, const float* weights,
                              uint64_t w_nb1, int k, const int32_t* pairs, int64_t m, float* xe, float* rw);

/// MoE scatter: slots[pairs[i], :] = ye[i, :] for i < m (ye packed [m, dim]; slots rows
/// `s_nb1` apart).
cudaError_t launch_moe_scatter(cudaStream_t s, const float* ye, int64_t dim, const int32_t* pairs, int64_t m,
                               float* slots, uint64_t s_nb1);

/// Clamped SwiGLU times a row weight, in place (the CPU's swiglu_clamped then * rw[t]; used
/// inside moe_experts): g = silu_f32(min(g, limit)) * clamp(u, -limit, limit) (limit <= 0: no
/// clamp), then g *= rw[t] when rw != null. g, u packed [n, ff].
cudaError_t launch_moe_swiglu(cudaStream_t s, float* g, const float* u, int64_t n, int64_t ff, float limit,
                              const float* rw);

}  // namespace ds4::cuda
