// kernels/cpu/quant_ref.h — scalar CPU reference kernels for every ggml weight type we support.
// These define the project's numerics (DESIGN.md "Numerics contract"); AVX2 and CUDA kernels are
// tested against them. Block layouts: kernels/quant/blocks.h. Formats: ggml-org/ggml
// src/ggml-common.h and src/ggml-quants.c (see shared/reference/quant-formats.md §2).
//
// Row convention: a row is `n` consecutive elements along ne[0]; `n` must be a multiple of the
// type's block size (checked: programmer error otherwise). Matrices are ggml-ordered: W has
// ne0 = cols (contiguous, the K dimension) and ne1 = rows; row r starts at r * row_bytes(type, cols).
//
// The dot-product contract (integer sums, float epilogue per 32-element chunk, 32-lane strided
// accumulation + fixed butterfly) is written in kernels/quant/dot_q8_1.h; the Q8_1 activation
// quantizer contract in kernels/quant/quantize_q8.h.
#pragma once

#include <cstddef>
#include <cstdint>

#include "kernels/quant/ggml_type.h"

namespace ds4::cpu {

/// True when dequantize_row supports ggml type `type`: F32, F16, BF16, Q4_0, Q8_0, Q8_1, Q8_K,
/// Q2_K, Q4_K, Q6_K, IQ2_XXS, IQ2_XS, IQ2_S, IQ1_S, IQ1_M, MXFP4, NVFP4.
bool can_dequantize(GgmlType type);
/// True when quantize_row can encode ggml type `type` (F32, F16, BF16, Q8_0, Q8_1, Q8_K, Q2_K,
/// IQ2_XXS, IQ2_XS, IQ1_S, IQ1_M, MXFP4).
bool can_quantize(GgmlType type);
/// True when vec_dot_q8_1 / matvec_q8_1 support weight type `type` (Q4_0, Q8_0, Q2_K, Q4_K, Q6_K,
/// IQ2_XXS, IQ2_XS, IQ2_S, IQ1_S, IQ1_M, MXFP4, NVFP4).
bool can_dot_q8_1(GgmlType type);

/// Bytes of one row of `n` elements of `type` (n must be a multiple of the block size).
int64_t row_bytes(GgmlType type, int64_t n);

/// Decodes one row of `n` elements of type `type` from `src` (n/block_elems blocks, any
/// alignment) into float `dst[n]`. Exact in FP32 (every ggml weight format decodes exactly, Q2_K
/// and Q4_K round once), bit-identical to ggml's dequantize_row_* / gguf-py.
void dequantize_row(GgmlType type, const void* src, float* dst, int64_t n);

/// Encodes finite float `src[n]` as type `type` into `dst` (n/block_elems blocks).
/// Q8_0 and MXFP4 reproduce ggml's reference quantizers bit-for-bit; Q2_K and the IQ types use a
/// straightforward search (valid blocks, bounded error; not ggml's imatrix-driven optimum);
/// Q8_1 / Q8_K are the activation quantizers below.
void quantize_row(GgmlType type, const float* src, void* dst, int64_t n);

/// Quantizes finite activations to Q8_1 (32 per block), contract in kernels/quant/quantize_q8.h:
/// d = fp16(amax/127), q = clamp(roundf(x / float(d)), -127, 127), s = fp16(float(d) * sum(q)).
void quantize_row_q8_1(const float* src, void* dst, int64_t n);

/// Quantizes finite activations to Q8_K (256 per block): d = amax/127 (fp32), q = clamp(roundf(x
/// / d), -127, 127), bsums = sums of 16 q. (ggml's own Q8_K quantizer maps the signed max to -128;
/// ours is symmetric; both decode with x = d*q.)
void quantize_row_q8_k(const float* src, void* dst, int64_t n);

/// Dot product of one weight row (type `type`, n elements) with Q8_1 activations `act` (n/32
/// blocks): exact int32 sums per sub-block, float combination in the order of dot_q8_1.h.
float vec_dot_q8_1(GgmlType type, const void* w_row, const void* act, int64_t n);

/// out[r] = vec_dot_q8_1(type, row r of W, act_q8_1, cols) for r < rows, split over `n_threads`
/// threads by rows (n_threads <= 1: calling thread only). Results do not depend on n_threads.
void matvec_q8_1(GgmlType type, const void* W, int64_t rows, int64_t cols, const void* act_q8_1,
                 float* out, int n_threads);

/// Float dot of one weight row with x[n]: the row is decoded exactly (dequantize_row), then
/// accumulated in FP32 in the fixed order of dot_q8_1.h "float path": per 32-element chunk c a
/// sequential sum p_c = (((0 + w0*x0) + w1*x1) + ...) (products rounded, no FMA), then the
/// 32-lane strided sum and butterfly over chunks. Any type can_dequantize supports.
float vec_dot_f32(GgmlType type, const void* w_row, const float* x, int64_t n);

/// out[r] = vec_dot_f32(type, row r of W, x, cols), multi-threaded over rows as matvec_q8_1.
void matvec_f32(GgmlType type, const void* W, int64_t rows, int64_t cols, const float* x,
                float* out, int n_threads);

/// DeepSeek safetensors FP8 (F8_E4M3 weight, F8_E8M0 scale per 128x128 block): decodes one row of
/// `n` elements; `scale_row` holds the ceil(n/128) E8M0 bytes of this row's 128-row block.
/// x = e4m3(w) * 2^(e-127) (e = 0 -> 2^-127). Source: llama.cpp conversion/deepseek.py,
/// antirez/ds4 gguf-tools/deepseek4-quantize.c (quant-formats.md §3).
void dequantize_row_ds_fp8(const uint8_t* w_row, const uint8_t* scale_row, float* dst, int64_t n);

/// DeepSeek safetensors FP4 experts (I8 bytes [out, in/2], F8_E8M0 scale [out, in/32]): one row of
/// n elements (n % 32 == 0); byte j: low nibble = element 2j, high nibble = element 2j+1;
/// x = e2m1(nib) * 2^(e-127).
void dequantize_row_ds_fp4(const uint8_t* w_row, const uint8_t* scale_row, float* dst, int64_t n);

/// Lossless repack of one DeepSeek FP4 row (as above) into n/32 ggml MXFP4 blocks: e copied,
/// nibbles re-paired to qs[j] = v[j] | v[j+16] << 4 (llama.cpp _pack_fp4_as_mxfp4). Decodes to
/// the same floats as dequantize_row_ds_fp4.
void repack_ds_fp4_to_mxfp4(const uint8_t* w_row, const uint8_t* scale_row, void* dst, int64_t n);

/// Repack of one NVIDIA ModelOpt NVFP4 row (`weight` U8 [out, in/2]: element 2k in the low nibble;
/// `weight_scale` F8_E4M3 [out, in/16]; the tensor's F32 `weight_scale_2` = `s2`) into n/64
/// ds4-internal NVFP4_S2 blocks (kernels/quant/blocks.h): E4M3 bytes copied, nibbles re-paired to
/// ggml NVFP4 order (byte j of sub-block s: element 16s+j low, 16s+j+8 high). Returns the index of
/// the first scale byte with the sign bit set or NaN (0x7F/0xFF), which no ggml NVFP4 decoder
/// reads as the checkpoint means, or -1 when every scale is valid (the row is written either way).
int64_t repack_modelopt_nvfp4_row(const uint8_t* w_row, const uint8_t* scale_row, float s2, void* dst, int64_t n);

}  // namespace ds4::cpu
