// kernels/quant/decode.h — DS4_HD block decoders (host and CUDA device), one per format.
//
// Each decoder writes the exact fp32 values ggml's dequantize_row_* produces (ggml-org/ggml
// src/ggml-quants.c; formulas in shared/reference/quant-formats.md §2), with the same float
// operation order where a rounding can occur (Q2_K, Q4_K: (d*sc)*q - dmin*m rounds once).
// 256-element formats also have a per-group decoder (group g = elements 32g..32g+31, g < 8).
// Tested bit-exact against gguf-py in tests/quant/test_decode_oracle.cpp.
#pragma once

#include <cstdint>

#include "kernels/quant/blocks.h"
#include "kernels/quant/grids.h"

namespace ds4::quant {

/// Q4_0 block -> y[32].
DS4_HD inline void decode_q4_0(const BlockQ4_0& b, float* y) {
  const float d = fp16_to_f32(b.d);
  for (int j = 0; j < 16; ++j) {
    y[j] = float(int(b.qs[j] & 0xF) - 8) * d;
    y[j + 16] = float(int(b.qs[j] >> 4) - 8) * d;
  }
}

/// Q8_0 block -> y[32].
DS4_HD inline void decode_q8_0(const BlockQ8_0& b, float* y) {
  const float d = fp16_to_f32(b.d);
  for (int j = 0; j < 32; ++j) y[j] = float(b.qs[j]) * d;
}

/// Q8_1 block -> y[32] (s is ignored).
DS4_HD inline void decode_q8_1(const BlockQ8_1& b, float* y) {
  const float d = fp16_to_f32(b.d);
  for (int j = 0; j < 32; ++j) y[j] = float(b.qs[j]) * d;
}

/// Q8_K block -> y[256] (fp32 d; bsums ignored).
DS4_HD inline void decode_q8_k(const BlockQ8_K& b, float* y) {
  for (int j = 0; j < 256; ++j) y[j] = float(b.qs[j]) * b.d;
}

/// Q2_K 2-bit code of element e (0..255).
DS4_HD inline int q2_k_code(const BlockQ2_K& b, int e) {
  const int h = e / 128, r = e % 128, j = r / 32, l = r % 32;
  return (b.qs[32 * h + l] >> (2 * j)) & 3;
}
/// Q2_K scale byte (low nibble scale, high nibble min) of element e.
DS4_HD inline uint8_t q2_k_scale(const BlockQ2_K& b, int e) {
  const int h = e / 128, r = e % 128, j = r / 32, l = r % 32;
  return b.scales[8 * h + 2 * j + l / 16];
}
/// Q2_K group g (elements 32g..32g+31) -> y[32]: (d*(sc&15))*q - dmin*(sc>>4).
DS4_HD inline void decode_q2_k_group(const BlockQ2_K& b, int g, float* y) {
  const float d = fp16_to_f32(b.d), dmin = fp16_to_f32(b.dmin);
  for (int i = 0; i < 32; ++i) {
    const int e = 32 * g + i;
    const uint8_t sc = q2_k_scale(b, e);
    const float dl = d * float(sc & 0xF), ml = dmin * float(sc >> 4);
    y[i] = dl * float(q2_k_code(b, e)) - ml;
  }
}

/// Q4_K 6-bit scale and min of sub-block j (0..7) (ggml get_scale_min_k4).
DS4_HD inline void q4_k_scale_min(const BlockQ4_K& b, int j, int* sc, int* m) {
  const uint8_t* q = b.scales;
  if (j < 4) {
    *sc = q[j] & 63;
    *m = q[j + 4] & 63;
  } else {
    *sc = (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4);
    *m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
  }
}
/// Q4_K 4-bit code of element i of sub-block g.
DS4_HD inline int q4_k_code(const BlockQ4_K& b, int g, int i) {
  const uint8_t byte = b.qs[32 * (g / 2) + i];
  return (g & 1) ? (byte >> 4) : (byte & 0xF);
}
/// Q4_K group g -> y[32]: (d*sc)*q - dmin*m.
DS4_HD inline void decode_q4_k_group(const BlockQ4_K& b, int g, float* y) {
  int sc, m;
  q4_k_scale_min(b, g, &sc, &m);
  const float d1 = fp16_to_f32(b.d) * float(sc), m1 = fp16_to_f32(b.dmin) * float(m);
  for (int i = 0; i < 32; ++i) y[i] = d1 * float(q4_k_code(b, g, i)) - m1;
}

/// Q6_K signed code (-32..31) of element e.
DS4_HD inline int q6_k_code(const BlockQ6_K& b, int e) {
  const int h = e / 128, r = e % 128, k = r / 32, l = r % 32;
  const uint8_t lo = b.ql[64 * h + l + 32 * (k & 1)];
  const int low = (k >= 2) ? (lo >> 4) : (lo & 0xF);
  const int high = (b.qh[32 * h + l] >> (2 * k)) & 3;
  return (low | (high << 4)) - 32;
}
/// Q6_K int8 scale of element e.
DS4_HD inline int q6_k_scale(const BlockQ6_K& b, int e) {
  const int h = e / 128, r = e % 128, k = r / 32, l = r % 32;
  return b.scales[8 * h + l / 16 + 2 * k];
}
/// Q6_K group g -> y[32]: (d*sc)*q.
DS4_HD inline void decode_q6_k_group(const BlockQ6_K& b, int g, float* y) {
  const float d = fp16_to_f32(b.d);
  for (int i = 0; i < 32; ++i) {
    const int e = 32 * g + i;
    y[i] = (d * float(q6_k_scale(b, e))) * float(q6_k_code(b, e));
  }
}

/// IQ2 group scale d*(0.5+s)*0.25 for a 4-bit s (ggml order of operations).
DS4_HD inline float iq2_scale(float d, int s) { return d * (0.5f + float(s)) * 0.25f; }

/// IQ2_XXS group g -> y[32].
DS4_HD inline void decode_iq2_xxs_group(const BlockIQ2_XXS& b, int g, float* y) {
  const uint32_t a0 = uint32_t(b.qs[4 * g]) | (uint32_t(b.qs[4 * g + 1]) << 16);
  const uint32_t a1 = uint32_t(b.qs[4 * g + 2]) | (uint32_t(b.qs[4 * g + 3]) << 16);
  const float db = iq2_scale(fp16_to_f32(b.d), int(a1 >> 28));
  for (int l = 0; l < 4; ++l) {
    const uint64_t grid = iq2xxs_grid(int((a0 >> (8 * l)) & 0xFF));
    const uint8_t signs = ksigns_iq2xs(int((a1 >> (7 * l)) & 127));
    for (int j = 0; j < 8; ++j)
      y[8 * l + j] = db * float(grid_u8(grid, j)) * ((signs >> j) & 1 ? -1.0f : 1.0f);
  }
}

/// IQ2_XS group g -> y[32].
DS4_HD inline void decode_iq2_xs_group(const BlockIQ2_XS& b, int g, float* y) {
  const float d = fp16_to_f32(b.d);
  const float db[2] = {iq2_scale(d, b.scales[g] & 0xF), iq2_scale(d, b.scales[g] >> 4)};
  for (int l = 0; l < 4; ++l) {
    const uint16_t q = b.qs[4 * g + l];
    const uint64_t grid = iq2xs_grid(q & 511);
    const uint8_t signs = ksigns_iq2xs(q >> 9);
    for (int j = 0; j < 8; ++j)
      y[8 * l + j] = db[l / 2] * float(grid_u8(grid, j)) * ((signs >> j) & 1 ? -1.0f : 1.0f);
  }
}

/// IQ2_S grid index of entry l (0..3) of group g.
DS4_HD inline int iq2_s_index(const BlockIQ2_S& b, int g, int l) {
  return b.qs[4 * g + l] | ((b.qh[g] << (8 - 2 * l)) & 0x300);
}
/// IQ2_S group g -> y[32].
DS4_HD inline void decode_iq2_s_group(const BlockIQ2_S& b, int g, float* y) {
  const float d = fp16_to_f32(b.d);
  const float db[2] = {iq2_scale(d, b.scales[g] & 0xF), iq2_scale(d, b.scales[g] >> 4)};
  for (int l = 0; l < 4; ++l) {
    const uint64_t grid = iq2s_grid(iq2_s_index(b, g, l));
    const uint8_t signs = b.qs[32 + 4 * g + l];
    for (int j = 0; j < 8; ++j)
      y[8 * l + j] = db[l / 2] * float(grid_u8(grid, j)) * ((signs >> j) & 1 ? -1.0f : 1.0f);
  }
}

/// IQ1_S / IQ1_M delta magnitude (ggml IQ1S_DELTA = IQ1M_DELTA).
inline constexpr float kIQ1Delta = 0.125f;

/// IQ1_S group g -> y[32]: dl*(grid + delta).
DS4_HD inline void decode_iq1_s_group(const BlockIQ1_S& b, int g, float* y) {
  const uint16_t qh = b.qh[g];
  const float dl = fp16_to_f32(b.d) * float(2 * ((qh >> 12) & 7) + 1);
  const float delta = (qh & 0x8000) ? -kIQ1Delta : kIQ1Delta;
  for (int l = 0; l < 4; ++l) {
    const uint64_t grid = iq1s_grid(b.qs[4 * g + l] | (((qh >> (3 * l)) & 7) << 8));
    for (int j = 0; j < 8; ++j) y[8 * l + j] = dl * (float(grid_i8(grid, j)) + delta);
  }
}

/// IQ1_M: 3-bit scale of half h (0/1) of group g.
DS4_HD inline int iq1_m_scale(const BlockIQ1_M& b, int g, int h) {
  const uint16_t sc = uint16_t(b.scales[2 * (g / 2)] | (b.scales[2 * (g / 2) + 1] << 8));
  return (sc >> (6 * (g % 2) + 3 * h)) & 7;
}
/// IQ1_M: grid index of sub-group l (0..3) of group g.
DS4_HD inline int iq1_m_index(const BlockIQ1_M& b, int g, int l) {
  const uint8_t qh = b.qh[2 * g + l / 2];
  return b.qs[4 * g + l] | (((l & 1) ? (qh >> 4) : qh) & 7) << 8;
}
/// IQ1_M: true when sub-group l of group g has delta = -1/8.
DS4_HD inline bool iq1_m_delta_neg(const BlockIQ1_M& b, int g, int l) {
  const uint8_t qh = b.qh[2 * g + l / 2];
  return ((l & 1) ? (qh & 0x80) : (qh & 0x08)) != 0;
}
/// IQ1_M group g -> y[32].
DS4_HD inline void decode_iq1_m_group(const BlockIQ1_M& b, int g, float* y) {
  const float d = fp16_to_f32(iq1m_scale_bits(b));
  for (int l = 0; l < 4; ++l) {
    const float dl = d * float(2 * iq1_m_scale(b, g, l / 2) + 1);
    const float delta = iq1_m_delta_neg(b, g, l) ? -kIQ1Delta : kIQ1Delta;
    const uint64_t grid = iq1s_grid(iq1_m_index(b, g, l));
    for (int j = 0; j < 8; ++j) y[8 * l + j] = dl * (float(grid_i8(grid, j)) + delta);
  }
}

/// MXFP4 code (0..15) of element j (0..31).
DS4_HD inline int mxfp4_code(const BlockMXFP4& b, int j) {
  return j < 16 ? (b.qs[j] & 0xF) : (b.qs[j - 16] >> 4);
}
/// MXFP4 block -> y[32]: kvalues_mxfp4[code] * 2^(e-128).
DS4_HD inline void decode_mxfp4(const BlockMXFP4& b, float* y) {
  const float d = e8m0_to_f32_half(b.e);
  for (int j = 0; j < 32; ++j) y[j] = float(kvalues_mxfp4(mxfp4_code(b, j))) * d;
}

/// NVFP4 code (0..15) of element j (0..63).
DS4_HD inline int nvfp4_code(const BlockNVFP4& b, int j) {
  const int s = j / 16, r = j % 16;
  const uint8_t byte = b.qs[8 * s + (r & 7)];
  return r < 8 ? (byte & 0xF) : (byte >> 4);
}
/// NVFP4 block -> y[64]: kvalues_mxfp4[code] * ue4m3_half(d[j/16]).
DS4_HD inline void decode_nvfp4(const BlockNVFP4& b, float* y) {
  for (int j = 0; j < 64; ++j) y[j] = float(kvalues_mxfp4(nvfp4_code(b, j))) * ue4m3_to_f32_half(b.d[j / 16]);
}

/// ds4-internal F8_E4M3_R128 block -> y[128]: e4m3(qs[j]) * 2^(e-127).
DS4_HD inline void decode_f8_r128(const BlockF8R128& b, float* y) {
  const float d = e8m0_to_f32(b.e);
  for (int j = 0; j < 128; ++j) y[j] = e4m3_to_f32(b.qs[j]) * d;
}

/// ds4-internal NVFP4_S2 block -> y[64]: the NVFP4 value times the tensor scale s2.
DS4_HD inline void decode_nvfp4_s2(const BlockNVFP4S2& b, float* y) {
  const uint32_t bits = uint32_t(b.s2[0]) | uint32_t(b.s2[1]) << 8 | uint32_t(b.s2[2]) << 16 | uint32_t(b.s2[3]) << 24;
  const float s2 = f32_from_bits(bits);
  decode_nvfp4(b.b, y);
  for (int j = 0; j < 64; ++j) y[j] = y[j] * s2;
}

/// Decodes all 8 groups of a 256-element block with a per-group decoder.
template <class Block, void (*Group)(const Block&, int, float*)>
DS4_HD inline void decode_superblock(const Block& b, float* y) {
  for (int g = 0; g < 8; ++g) Group(b, g, y + 32 * g);
}

}  // namespace ds4::quant
