// engine/random_blocks.h — valid random quantized blocks written directly (no quantizer), for
// `ds4-offload make-tiny --random-blocks`: benchmark models of DeepSeek-V4-Flash's real shapes whose
// 6.4 G expert weights per layer the Q2_K / IQ encoders (~1 / ~0.45 M weights/s per thread) could
// not produce in minutes.
//
// Block layouts: ggml-org/llama.cpp ggml/src/ggml-common.h (block_q8_0, block_q2_K, block_iq2_xxs,
// block_iq2_xs, block_iq1_s, block_iq1_m, block_mxfp4), as this project's structs in
// kernels/quant/blocks.h, decoded by kernels/quant/decode.h / kernels/cpu/quant_ref.h.
//
// "Valid" means: every grid index is in range (all IQ index fields are full-width: 8 bits for the
// 256-entry iq2xxs grid, 9 bits for iq2xs's 512, 11 bits for iq1s's 2048), sign / code bits are
// uniform random, and the scales (fp16 d and dmin, 4-bit / 3-bit sub-scales, E8M0 exponent) are
// chosen so a decoded element has E[x^2] = rms^2: fp16 scales are finite and non-zero (clamped to
// [2^-24, 65504]). Per type, with d the fp16 super-scale:
//   Q8_0    q uniform in [-127, 127] (byte -128 read as -127), x = d*q;
//   Q2_K    codes uniform, sub-scale s = 8 + (3 random bits) in both nibbles, dmin = 1.5*d, so
//           x = d*s*q - 1.5*d*s = d*s*(q - 1.5) has mean ~0;
//   IQ2_XXS / IQ2_XS  every bit random (4-bit group scales, sign indices, grid indices), then d;
//   IQ1_S / IQ1_M     every bit random (3-bit scales, delta signs, grid indices), then d (IQ1_M:
//           its fp16 bits in the scales' top nibbles);
//   MXFP4   codes uniform; per block E8M0 e is one of the two powers of two around the target
//           scale, drawn so that E[x^2] = rms^2 exactly on average;
//   F32 / F16  uniform in [-rms*sqrt(3), rms*sqrt(3)].
//
// Random numbers: SplitMix64 (Steele, Lea, Flood 2014) seeded per row from (seed, absolute row
// index), so the bytes of a row depend only on them: any split over threads or chunks gives the
// same tensor, and one seed always the same bytes.
#pragma once

#include <cstdint>

#include "kernels/quant/ggml_type.h"

namespace ds4 {

/// True when random_block_rows can write `type`: F32, F16, Q8_0, Q2_K, IQ2_XXS, IQ2_XS, IQ1_S,
/// IQ1_M, MXFP4 (every weight type make-tiny emits, I32 excepted).
bool can_random_blocks(GgmlType type);

/// E[x^2] of one decoded element of `type` when its super-scale is 1 (d = 1, Q2_K dmin = 1.5,
/// MXFP4 2^(e-128) = 1, F32/F16 half-width sqrt(3)), from the block layout and ggml's grids.
/// Requires can_random_blocks(type).
double random_blocks_unit_mean_square(GgmlType type);

/// Writes rows [row0, row0 + nrows) of a `type` tensor with rows of `ne0` elements into `dst`
/// (nrows * row_bytes(type, ne0) bytes, the first byte being row row0's): valid random blocks whose
/// decoded elements have root mean square about `rms` (> 0, finite). Row r's bytes are a function
/// of (type, ne0, rms, seed, r) only. Programmer errors (checked): an unsupported type, ne0 not a
/// multiple of the block size, rms not finite and positive.
void random_block_rows(GgmlType type, int64_t ne0, int64_t row0, int64_t nrows, double rms, uint64_t seed, void* dst);

/// random_block_rows over all `nrows` rows, split over `threads` threads (<= 1: the calling
/// thread); the bytes do not depend on `threads`.
void random_block_tensor(GgmlType type, int64_t ne0, int64_t nrows, double rms, uint64_t seed, void* dst, int threads);

}  // namespace ds4
