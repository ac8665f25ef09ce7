// kernels/cpu/mmq.h — multi-token ("MMQ-style") CPU matmul over Q8_1 activations: a weight row is
// decoded ONCE into a form that is cheap to dot (MmqGroup: unsigned bytes + integer multipliers +
// float scales) and that form is then dotted against many tokens' Q8_1 activations, instead of
// re-decoding the row (grid look-ups, sign patterns, nibble shuffles) for every token as the
// matvec kernels of dot_dispatch.h must. Every (row, token) result follows the dot-product
// contract of kernels/quant/dot_q8_1.h step for step (the same exact chunk integers, the same fp32
// epilogue of each chunk, the same 32-lane accumulation and butterfly), so it is bit-identical to
// vec_dot_q8_1 and to the matvec kernels; tests/cpu_simd/test_mmq.cpp checks it for every type.
//
// Decoded form of chunk c (32 weight elements, the contract's chunk) with element values w_j (the
// integer the contract multiplies q_j by, before the chunk multipliers), offset `off` of the type
// (u_j = w_j + off in [0, 127]) and per-16-half multipliers m_h:
//   S      = sum_h m_h * sum_{j in half h} u_j * q_j          (int16 pair sums, then int32)
//   I      = S - sum_h (off * m_h) * sumq_h                    (sumq_h: the token's half sums)
//   form A: P = (d * da) * float(I)
//   form B: P = da * ((d * float(I)) - (dmin * float(I2))),   I2 = sum_h n_h * sumq_h
// which is the contract's I (and P) for every listed type: the offset term removes exactly what
// the unsigned bytes add. Q8_0 instead keeps |w| in u and w itself (for the sign) in `m` (the
// scalar decoder and the AVX2 family); the VNNI families' own Q8_0 decoder stores u = w + 128, off
// 128 (vpdpbusd does not saturate), so a kernel is only paired with its family's decoder
// (family_mmq_decoder).
#pragma once

#include <cstdint>

#include "kernels/cpu/cpu_features.h"
#include "kernels/quant/ggml_type.h"

namespace ds4::cpu {

/// Eight consecutive contract chunks (256 weight elements) of one row in decoded form. Only the
/// fields a type's kernel reads are filled (see mmq_decode_row). Chunks past the row end (a tail
/// of a 32-element-block row) are zero and never added.
struct alignas(64) MmqGroup {
  uint8_t u[8][32];       ///< after mmq_finish_group: u[k][4c + j] = u_{4k+j} of chunk c (Q8_0: |w|)
  int16_t m[8][16];       ///< decoders: per-half multipliers spread over 16 pair lanes of chunk c (Q8_0: the
                          ///< signed w bytes, transposed as u by mmq_finish_group)
  int16_t corr[16];       ///< off * m_h of chunk c half h at lane 2c + h (one-multiplier types: off)
  int32_t mult[8];        ///< the chunk's single multiplier (IQ2_XXS, IQ1_S, Q4_K)
  int16_t nmin[16];       ///< form B: n_h at lane 2c + h
  float d[8];             ///< the chunk's weight scale (form A: as multiplied by da first)
  float dmin[8];          ///< form B
  int32_t mh[2][8];       ///< mmq_finish_group: the half multipliers m_h of chunk c (per-half types)
};

/// Last step of every decoder: mh from the spread multipliers, then u (and m, as bytes) from
/// chunk-major [c][32] to the transposed [k][4c + j] layout, in which one 32-byte vector holds
/// bytes 4k..4k+3 of all eight chunks, so a four-term dot per int32 lane sums into that chunk's
/// lane and no horizontal sum is needed (the token codes are laid out alike: MmqTokens::qt).
void mmq_finish_group(MmqGroup& g);

/// Per-token data the kernels share across all rows: token t's Q8_1 blocks at xq + t * qb bytes,
/// its chunk scales da (fp16_to_f32 of each block's d) at da + t * nc8 and its half sums
/// (sum of codes 16h..16h+15 of block b at index 2b + h) at hs + t * 2 * nc8; nc8 = the chunk
/// count rounded up to a multiple of 8 (padding zero).
struct MmqTokens {
  const uint8_t* xq = nullptr;
  int64_t qb = 0;
  const float* da = nullptr;
  const int16_t* hs = nullptr;
  int64_t nc8 = 0;
  /// Token t's codes in the transposed group layout at qt + t * 32 * nc8: group i, vector k, int32
  /// lane c = codes 4k..4k+3 of block 8i + c (zero past the last block).
  const uint8_t* qt = nullptr;
};

/// One decoded row (ceil(nc / 8) groups, nc = row length / 32 chunks) dotted with tokens
/// [t0, t1) of `tok`: out[(t - t0) * out_ld] = the contract result for token t.
using MmqFn = void (*)(const MmqGroup* row, int64_t nc, const MmqTokens& tok, int64_t t0, int64_t t1, float* out,
                       int64_t out_ld);

/// Decodes one weight row (n elements) into ceil(n / 256) groups for one family's kernel: the
/// bytes of mmq_decode_row in every field the kernel reads, except the VNNI families' Q8_0 form
/// (u = w + 128, see above).
using MmqDecodeFn = void (*)(const void* w_row, int64_t n, MmqGroup* out);

/// True when `type` has a decoded form (Q4_0, Q8_0, MXFP4, Q2_K, Q4_K, Q6_K, IQ2_XXS, IQ2_XS,
/// IQ2_S, IQ1_S, IQ1_M).
bool mmq_has_decode(GgmlType type);

/// Decodes one weight row of `type` (n elements, n % 32 == 0; 256-element types n % 256 == 0) into
/// ceil(n / 256) groups at `out`. Requires mmq_has_decode(type).
void mmq_decode_row(GgmlType type, const void* w_row, int64_t n, MmqGroup* out);

/// Fills token t's da / hs / qt rows (layout of MmqTokens, n elements) from its Q8_1 blocks `xq_row`.
void mmq_token_sums(const uint8_t* xq_row, int64_t n, float* da_row, int16_t* hs_row, uint8_t* qt_row);

/// The decoder matching simd_mmq(type): the selected family's SIMD one where it has one (Q8_0,
/// MXFP4, Q2_K, IQ2_XXS, IQ2_XS, IQ1_S, IQ1_M), else the scalar mmq_decode_row.
MmqDecodeFn mmq_decoder(GgmlType type);
/// Fewest tokens of a matmul for which the multi-token kernel of `type` is used (decode once per
/// row + cheap per-token dots beat the per-token matvec kernels; bench/README.md issue 19).
int64_t mmq_min_tokens(GgmlType type);

/// The kernel of the selected family (selected_backend()) for `type`, or nullptr (scalar policy,
/// no SIMD family on this CPU, or no decoded form).
MmqFn simd_mmq(GgmlType type);
/// The kernel of family `b` for `type` (nullptr as simd_mmq); call only when backend_usable(b).
MmqFn family_mmq(DotBackend b, GgmlType type);
/// The decoder of family `b` for `type` (its SIMD one, else the scalar one; nullptr without a
/// decoded form); call only when backend_usable(b).
MmqDecodeFn family_mmq_decoder(DotBackend b, GgmlType type);

namespace avx2 {
/// AVX2 kernel for `type` or nullptr (mmq_x86.inc); call only when cpu_avx2_usable().
MmqFn mmq(GgmlType type);
/// The family's SIMD decoder for `type` or nullptr (same call condition).
MmqDecodeFn mmq_decoder(GgmlType type);
}
namespace avx_vnni {
/// AVX-VNNI kernel for `type` or nullptr; call only when backend_usable(DotBackend::AvxVnni).
MmqFn mmq(GgmlType type);
/// The family's SIMD decoder for `type` or nullptr (same call condition).
MmqDecodeFn mmq_decoder(GgmlType type);
}
namespace avx512_vnni {
/// AVX512-VNNI kernel for `type` or nullptr; call only when backend_usable(DotBackend::Avx512Vnni).
MmqFn mmq(GgmlType type);
/// The family's SIMD decoder for `type` or nullptr (same call condition).
MmqDecodeFn mmq_decoder(GgmlType type);
}

}  // namespace ds4::cpu
