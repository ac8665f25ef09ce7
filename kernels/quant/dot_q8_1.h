// kernels/quant/dot_q8_1.h — THE DOT-PRODUCT CONTRACT (DS4_HD; CPU reference and CUDA share it).
//
// A weight row of n elements (n % 32 == 0) times Q8_1 activations (n/32 blocks, quantize_q8.h) is
// computed as follows; every implementation (scalar CPU, AVX2, CUDA DP4A/MMA) must return the
// same float bits. Notation: da = fp16_to_f32(act[b].d) (the Q8_1 `s` field is never used),
// q = act[b].qs, all products/sums named I are exact int32, float(I) is exact (|I| < 2^24).
//
// 1. Chunks. Chunk b (elements 32b..32b+31) pairs Q8_1 block b with the weight elements it covers:
//    a 32-element weight block, half of an NVFP4 block (c = b%2), or group g = b%8 of a 256-element
//    super-block. Its float partial P_b is (all ops fp32, round-to-nearest, never fused):
//    Q4_0     I = sum (code-8)*q                          P = (d*da) * float(I)
//    Q8_0     I = sum w*q                                 P = (d*da) * float(I)
//    MXFP4    I = sum kvalues_mxfp4[code]*q               P = (e8m0_half(e)*da) * float(I)
//    NVFP4    I0, I1 = sum kvalues*q over sub-blocks 2c, 2c+1 (16 each), s_k = ue4m3_half(d[k])
//                                                         P = da * ((s0*float(I0)) + (s1*float(I1)))
//    Q2_K     per 16-sub-block k=0,1 (scale byte sc_k): I1 = sum_k (sc_k&15) * sum code*q,
//             I2 = sum_k (sc_k>>4) * sum q                P = da * ((d*float(I1)) - (dmin*float(I2)))
//    Q4_K     (sc, m) of sub-block g: I1 = sc * sum code*q, I2 = m * sum q
//                                                         P = da * ((d*float(I1)) - (dmin*float(I2)))
//    Q6_K     I = sum_k sc_k * sum code*q (k = two 16-sub-blocks, code in -32..31)
//                                                         P = (d*da) * float(I)
//    IQ2_XXS  I = (2s+1) * sum grid*sign*q                P = ((d*0.125f)*da) * float(I)
//    IQ2_XS, IQ2_S  I = sum_h (2s_h+1) * sum_{16-half h} grid*sign*q   P as IQ2_XXS
//    IQ1_S    I = (2s+1) * (8*sum grid*q + sgn*sum q), sgn = -1 if delta<0 else +1
//                                                         P = ((d*0.125f)*da) * float(I)
//    IQ1_M    I = sum_h (2s_h+1) * sum_{8-subgroup l in h} (8*sum grid*q + sgn_l*sum q)
//                                                         P = ((d*0.125f)*da) * float(I)
//    (d, dmin = the block's fp16 scales as fp32; IQ1_M's d is iq1m_scale_bits. The IQ forms are the
//    exact integer rewrite of d*(2s+1)/8*(...) — identical value, fewer roundings.)
// 2. Row sum: 32 FP32 lanes, lane[l] = 0; for b = 0, 1, ..., n/32-1 in order:
//    lane[b % 32] = lane[b % 32] + P_b.  Then the fixed butterfly: for off = 16, 8, 4, 2, 1:
//    lane[l] = lane[l] + lane[l + off] for l < off. Result = lane[0]. (= a CUDA warp in which lane
//    l handles chunks l, l+32, ... sequentially, then __shfl_xor_sync with offsets 16..1.)
// Float path (vec_dot_f32 / matvec_f32): P_c = ((0 + w0*x0) + w1*x1) + ... + w31*x31 over the
// exactly decoded weights (products rounded, then added), then step 2 unchanged.
//
// Error vs an exact dot of the decoded weights with the unquantized x: dominated by the Q8_1
// rounding |x - da*q| <= da/2 per element; see tests/quant/test_dot.cpp for the named tolerances.
#pragma once

#include <cstdint>

#include "kernels/quant/blocks.h"
#include "kernels/quant/decode.h"

namespace ds4::quant {

/// Number of accumulation lanes of the contract (step 2).
inline constexpr int kDotLanes = 32;

/// Step 2 of the contract: butterfly over 32 lanes (modifies `lane`), returns the row result.
DS4_HD inline float lane_reduce32(float* lane) {
  for (int off = kDotLanes / 2; off > 0; off >>= 1)
    for (int l = 0; l < off; ++l) lane[l] = lane[l] + lane[l + off];
  return lane[0];
}

/// Integer dot sum_{j<len} w[j] * q[j].
DS4_HD inline int32_t idot(const int* w, const int8_t* q, int len) {
  int32_t s = 0;
  for (int j = 0; j < len; ++j) s += w[j] * int32_t(q[j]);
  return s;
}
/// Integer sum of q[0..len).
DS4_HD inline int32_t isum(const int8_t* q, int len) {
  int32_t s = 0;
  for (int j = 0; j < len; ++j) s += q[j];
  return s;
}

DS4_HD inline float dot_chunk_q4_0(const BlockQ4_0& w, int, const BlockQ8_1& a) {
  int v[32];
  for (int j = 0; j < 16; ++j) {
    v[j] = (w.qs[j] & 0xF) - 8;
    v[j + 16] = (w.qs[j] >> 4) - 8;
  }
  return (fp16_to_f32(w.d) * fp16_to_f32(a.d)) * float(idot(v, a.qs, 32));
}

DS4_HD inline float dot_chunk_q8_0(const BlockQ8_0& w, int, const BlockQ8_1& a) {
  int v[32];
  for (int j = 0; j < 32; ++j) v[j] = w.qs[j];
  return (fp16_to_f32(w.d) * fp16_to_f32(a.d)) * float(idot(v, a.qs, 32));
}

DS4_HD inline float dot_chunk_mxfp4(const BlockMXFP4& w, int, const BlockQ8_1& a) {
  int v[32];
  for (int j = 0; j < 32; ++j) v[j] = kvalues_mxfp4(mxfp4_code(w, j));
  return (e8m0_to_f32_half(w.e) * fp16_to_f32(a.d)) * float(idot(v, a.qs, 32));
}

DS4_HD inline float dot_chunk_nvfp4(const BlockNVFP4& w, int c, const BlockQ8_1& a) {
  int v[32];
  for (int j = 0; j < 32; ++j) v[j] = kvalues_mxfp4(nvfp4_code(w, 32 * c + j));
  const float s0 = ue4m3_to_f32_half(w.d[2 * c]), s1 = ue4m3_to_f32_half(w.d[2 * c + 1]);
  const int32_t i0 = idot(v, a.qs, 16), i1 = idot(v + 16, a.qs + 16, 16);
  return fp16_to_f32(a.d) * ((s0 * float(i0)) + (s1 * float(i1)));
}

/// ds4-internal NVFP4_S2 (NVIDIA ModelOpt NVFP4 with its tensor scale, blocks.h): the NVFP4 chunk
/// dot times s2 (one rounding more; exact when s2 is a power of two).
DS4_HD inline float dot_chunk_nvfp4_s2(const BlockNVFP4S2& w, int c, const BlockQ8_1& a) {
  const uint32_t bits = uint32_t(w.s2[0]) | uint32_t(w.s2[1]) << 8 | uint32_t(w.s2[2]) << 16 | uint32_t(w.s2[3]) << 24;
  return dot_chunk_nvfp4(w.b, c, a) * f32_from_bits(bits);
}

DS4_HD inline float dot_chunk_q2_k(const BlockQ2_K& w, int g, const BlockQ8_1& a) {
  int32_t i1 = 0, i2 = 0;
  for (int k = 0; k < 2; ++k) {
    int v[16];
    for (int j = 0; j < 16; ++j) v[j] = q2_k_code(w, 32 * g + 16 * k + j);
    const uint8_t sc = q2_k_scale(w, 32 * g + 16 * k);
    i1 += int32_t(sc & 0xF) * idot(v, a.qs + 16 * k, 16);
    i2 += int32_t(sc >> 4) * isum(a.qs + 16 * k, 16);
  }
  return fp16_to_f32(a.d) * ((fp16_to_f32(w.d) * float(i1)) - (fp16_to_f32(w.dmin) * float(i2)));
}

DS4_HD inline float dot_chunk_q4_k(const BlockQ4_K& w, int g, const BlockQ8_1& a) {
  int sc, m, v[32];
  q4_k_scale_min(w, g, &sc, &m);
  for (int j = 0; j < 32; ++j) v[j] = q4_k_code(w, g, j);
  const int32_t i1 = sc * idot(v, a.qs, 32), i2 = m * isum(a.qs, 32);
  return fp16_to_f32(a.d) * ((fp16_to_f32(w.d) * float(i1)) - (fp16_to_f32(w.dmin) * float(i2)));
}

DS4_HD inline float dot_chunk_q6_k(const BlockQ6_K& w, int g, const BlockQ8_1& a) {
  int32_t i = 0;
  for (int k = 0; k < 2; ++k) {
    int v[16];
    for (int j = 0; j < 16; ++j) v[j] = q6_k_code(w, 32 * g + 16 * k + j);
    i += q6_k_scale(w, 32 * g + 16 * k) * idot(v, a.qs + 16 * k, 16);
  }
  return (fp16_to_f32(w.d) * fp16_to_f32(a.d)) * float(i);
}

/// Signed IQ2 grid values (grid byte * sign) of one 8-element entry.
DS4_HD inline void iq2_entry(uint64_t grid, uint8_t signs, int* v) {
  for (int j = 0; j < 8; ++j) v[j] = (signs >> j) & 1 ? -grid_u8(grid, j) : grid_u8(grid, j);
}

DS4_HD inline float dot_chunk_iq2_xxs(const BlockIQ2_XXS& w, int g, const BlockQ8_1& a) {
  const uint32_t a0 = uint32_t(w.qs[4 * g]) | (uint32_t(w.qs[4 * g + 1]) << 16);
  const uint32_t a1 = uint32_t(w.qs[4 * g + 2]) | (uint32_t(w.qs[4 * g + 3]) << 16);
  int v[32];
  for (int l = 0; l < 4; ++l)
    iq2_entry(iq2xxs_grid(int((a0 >> (8 * l)) & 0xFF)), ksigns_iq2xs(int((a1 >> (7 * l)) & 127)), v + 8 * l);
  const int32_t i = int32_t(2 * (a1 >> 28) + 1) * idot(v, a.qs, 32);
  return ((fp16_to_f32(w.d) * 0.125f) * fp16_to_f32(a.d)) * float(i);
}

DS4_HD inline float dot_chunk_iq2_xs(const BlockIQ2_XS& w, int g, const BlockQ8_1& a) {
  int v[32];
  for (int l = 0; l < 4; ++l) {
    const uint16_t q = w.qs[4 * g + l];
    iq2_entry(iq2xs_grid(q & 511), ksigns_iq2xs(q >> 9), v + 8 * l);
  }
  const int32_t i = (2 * (w.scales[g] & 0xF) + 1) * idot(v, a.qs, 16) +
                    (2 * (w.scales[g] >> 4) + 1) * idot(v + 16, a.qs + 16, 16);
  return ((fp16_to_f32(w.d) * 0.125f) * fp16_to_f32(a.d)) * float(i);
}

DS4_HD inline float dot_chunk_iq2_s(const BlockIQ2_S& w, int g, const BlockQ8_1& a) {
  int v[32];
  for (int l = 0; l < 4; ++l) iq2_entry(iq2s_grid(iq2_s_index(w, g, l)), w.qs[32 + 4 * g + l], v + 8 * l);
  const int32_t i = (2 * (w.scales[g] & 0xF) + 1) * idot(v, a.qs, 16) +
                    (2 * (w.scales[g] >> 4) + 1) * idot(v + 16, a.qs + 16, 16);
  return ((fp16_to_f32(w.d) * 0.125f) * fp16_to_f32(a.d)) * float(i);
}

/// IQ1 integer term of one 8-element sub-group: 8*sum grid*q + sgn*sum q.
DS4_HD inline int32_t iq1_sub(uint64_t grid, bool neg, const int8_t* q) {
  int32_t gq = 0, s = 0;
  for (int j = 0; j < 8; ++j) {
    gq += grid_i8(grid, j) * int32_t(q[j]);
    s += q[j];
  }
  return 8 * gq + (neg ? -s : s);
}

DS4_HD inline float dot_chunk_iq1_s(const BlockIQ1_S& w, int g, const BlockQ8_1& a) {
  const uint16_t qh = w.qh[g];
  int32_t t = 0;
  for (int l = 0; l < 4; ++l)
    t += iq1_sub(iq1s_grid(w.qs[4 * g + l] | (((qh >> (3 * l)) & 7) << 8)), (qh & 0x8000) != 0, a.qs + 8 * l);
  const int32_t i = int32_t(2 * ((qh >> 12) & 7) + 1) * t;
  return ((fp16_to_f32(w.d) * 0.125f) * fp16_to_f32(a.d)) * float(i);
}

DS4_HD inline float dot_chunk_iq1_m(const BlockIQ1_M& w, int g, const BlockQ8_1& a) {
  int32_t i = 0;
  for (int h = 0; h < 2; ++h) {
    int32_t t = 0;
    for (int l = 2 * h; l < 2 * h + 2; ++l)
      t += iq1_sub(iq1s_grid(iq1_m_index(w, g, l)), iq1_m_delta_neg(w, g, l), a.qs + 8 * l);
    i += (2 * iq1_m_scale(w, g, h) + 1) * t;
  }
  return ((fp16_to_f32(iq1m_scale_bits(w)) * 0.125f) * fp16_to_f32(a.d)) * float(i);
}

}  // namespace ds4::quant
