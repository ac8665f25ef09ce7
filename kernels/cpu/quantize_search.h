// kernels/cpu/quantize_search.h — straightforward-search weight quantizers (internal to
// kernels/cpu; use quantize_row). Each writes n/256 valid blocks decodable by dequantize_row.
// They minimise squared error per sub-block by exhaustive search over the sub-block scale and the
// grid entries, with the block's fp16 super-scale fixed from the block maximum; no importance
// matrix (ggml's quantizers use one and search more, so they are more accurate, not required here).
#pragma once

#include <cstdint>

namespace ds4::cpu {

/// Q2_K: per 16-element sub-block, search 4-bit scale x 4-bit min (near the ideal min).
void quantize_row_q2_k_search(const float* src, void* dst, int64_t n);
/// IQ2_XXS: per 32-group, search the 4-bit scale and, per 8 elements, the best of 256 grid
/// entries with signs of x (an odd sign count flips the cheapest element: ksigns parity rule).
void quantize_row_iq2_xxs_search(const float* src, void* dst, int64_t n);
/// IQ2_XS: as IQ2_XXS with a 4-bit scale per 16 elements and the 512-entry grid.
void quantize_row_iq2_xs_search(const float* src, void* dst, int64_t n);
/// IQ1_S: per 32-group, search delta sign x 3-bit scale x (per 8) the 2048-entry ternary grid.
void quantize_row_iq1_s_search(const float* src, void* dst, int64_t n);
/// IQ1_M: per 16-half a 3-bit scale, per 8 elements the delta sign and grid entry.
void quantize_row_iq1_m_search(const float* src, void* dst, int64_t n);

}  // namespace ds4::cpu
