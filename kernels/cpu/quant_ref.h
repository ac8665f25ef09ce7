// kernels/cpu/quant_ref.h — scalar CPU reference kernels for every ggml weight type we support.
// These define the project's numerics (DESIGN.md "Numerics contract"); AVX2 and CUDA kernels are
// tested against them. Block layouts: kernels/quant/blocks.h. Formats: ggml-org/ggml
// src/ggml-common.h and src/ggml-quants.c (see ../shared/reference/quant-formats.md §2).
//
// Row convention: a row is `n` consecutive elements along ne[0]; `n` must be a multiple of the
// type's block size (checked: programmer error otherwise).
#pragma once

#include <cstdint>
#include <cstddef>

#include "kernels/quant/ggml_type.h"

namespace ds4::cpu {

/// True when dequantize_row supports ggml type `type`.
bool can_dequantize(GgmlType type);
/// True when quantize_row can encode ggml type `type` (Q8_0, Q8_1, Q8_K, Q2_K, IQ2_XXS, IQ2_XS,
/// IQ1_S, IQ1_M, MXFP4, F32, F16, BF16).
bool can_quantize(GgmlType type);
/// True when vec_dot_q8_1 supports weight type `type`.
bool can_dot_q8_1(GgmlType type);

/// Decodes one row of `n` elements of type `type` from `src` (n/block_elems blocks) into float
/// `dst[n]`. Exact in FP32 (every ggml weight format decodes exactly, Q2_K rounds once).
void dequantize_row(GgmlType type, const void* src, float* dst, int64_t n);

/// Encodes float `src[n]` as type `type` into `dst` (n/block_elems blocks). Encoders for IQ types
/// are straightforward searches that produce valid blocks (for test models), not ggml's optimum.
void quantize_row(GgmlType type, const float* src, void* dst, int64_t n);

/// Quantizes activations to Q8_1 blocks (32 values): d = amax/127, q = roundf(x/d), s = d*sum(q).
void quantize_row_q8_1(const float* src, void* dst, int64_t n);

/// Dot product of one weight row (type `type`, n elements) with Q8_1 activations `act` (n/32
/// blocks): exact int32 sums per sub-block, float combination in the documented fixed order.
float vec_dot_q8_1(GgmlType type, const void* w_row, const void* act, int64_t n);

}  // namespace ds4::cpu
