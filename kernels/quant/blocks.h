// kernels/quant/blocks.h — ggml block layouts shared by CPU and CUDA code (header-only).
//
// Byte layouts follow ggml-org/ggml src/ggml-common.h (see shared/reference/quant-formats.md §2).
// All multi-byte fields are little-endian; fp16 fields are stored as raw uint16_t bits (decode with
// fp16_to_f32). Sizes are checked against the ggml geometry table (ggml_type.h) below.
// Element e of a block is the e-th element along ne[0].
#pragma once

#include <cstdint>

#include "kernels/quant/ggml_type.h"
#include "kernels/quant/scalar_formats.h"

namespace ds4::quant {

inline constexpr int kQK4_0 = 32;   ///< Q4_0 elements per block
inline constexpr int kQK8_0 = 32;   ///< Q8_0 / Q8_1 elements per block
inline constexpr int kQK_K = 256;   ///< k-quant and IQ super-block elements
inline constexpr int kQK_MXFP4 = 32;
inline constexpr int kQK_NVFP4 = 64;
inline constexpr int kQK_NVFP4_SUB = 16;

/// Q4_0: x[j] = d * ((qs[j] & 15) - 8), x[j+16] = d * ((qs[j] >> 4) - 8), j < 16.
struct BlockQ4_0 {
  uint16_t d;
  uint8_t qs[kQK4_0 / 2];
};

/// Q8_0: x[j] = d * qs[j].
struct BlockQ8_0 {
  uint16_t d;
  int8_t qs[kQK8_0];
};

/// Q8_1 (ggml: 36 bytes; gguf-py's table says 40, which is wrong): x[j] = d * qs[j]; `s` is an
/// auxiliary sum (see quantize_row_q8_1 for what this project stores).
struct BlockQ8_1 {
  uint16_t d;
  uint16_t s;
  int8_t qs[kQK8_0];
};

/// Q8_K (CPU activation format): fp32 d, 256 int8, bsums[i] = sum of qs[16i..16i+15].
struct BlockQ8_K {
  float d;
  int8_t qs[kQK_K];
  int16_t bsums[kQK_K / 16];
};

/// Q2_K: 16 sub-blocks of 16; scales[i] low nibble = scale, high nibble = min; 2-bit qs.
/// x = (d*(sc&15))*q - dmin*(sc>>4); element e: h=e/128, r=e%128, j=r/32, l=r%32,
/// q = (qs[32h+l] >> 2j) & 3, sc = scales[8h + 2j + l/16].
struct BlockQ2_K {
  uint8_t scales[kQK_K / 16];
  uint8_t qs[kQK_K / 4];
  uint16_t d;
  uint16_t dmin;
};

/// Q4_K: 8 sub-blocks of 32 with 6-bit scale and min packed in scales[12] (ggml get_scale_min_k4).
struct BlockQ4_K {
  uint16_t d;
  uint16_t dmin;
  uint8_t scales[12];
  uint8_t qs[kQK_K / 2];
};

/// Q6_K: 16 sub-blocks of 16, int8 scales; q = (ql nibble | qh 2 bits << 4) - 32; x = d*sc*q.
struct BlockQ6_K {
  uint8_t ql[kQK_K / 2];
  uint8_t qh[kQK_K / 4];
  int8_t scales[kQK_K / 16];
  uint16_t d;
};

/// IQ2_XXS: 8 groups of 32; group g = two u32 words a0 (4 grid indices) and a1 (4 x 7-bit sign
/// indices into ksigns_iq2xs, bits 28..31 = scale s); x = d*(0.5+s)*0.25 * grid * sign.
struct BlockIQ2_XXS {
  uint16_t d;
  uint16_t qs[kQK_K / 8];
};

/// IQ2_XS: qs[i] bits 0..8 = iq2xs_grid index, bits 9..15 = ksigns index (8 elements each);
/// scales[g] low nibble for entries 4g,4g+1, high nibble for 4g+2,4g+3.
struct BlockIQ2_XS {
  uint16_t d;
  uint16_t qs[kQK_K / 8];
  uint8_t scales[kQK_K / 32];
};

/// IQ2_S: qs[0..31] low index bits, qs[32..63] explicit sign bytes, qh 2 high index bits each.
struct BlockIQ2_S {
  uint16_t d;
  uint8_t qs[kQK_K / 4];
  uint8_t qh[kQK_K / 32];
  uint8_t scales[kQK_K / 32];
};

/// IQ1_S: idx = qs[4g+l] | ((qh[g] >> 3l) & 7) << 8 into iq1s_grid; dl = d*(2*((qh>>12)&7)+1);
/// delta = qh bit 15 ? -1/8 : +1/8; x = dl*(grid+delta).
struct BlockIQ1_S {
  uint16_t d;
  uint8_t qs[kQK_K / 8];
  uint16_t qh[kQK_K / 32];
};

/// IQ1_M: no d field; the fp16 super-scale is spread over the top nibbles of scales (as u16[4]).
struct BlockIQ1_M {
  uint8_t qs[kQK_K / 8];
  uint8_t qh[kQK_K / 16];
  uint8_t scales[kQK_K / 32];
};

/// MXFP4 (ggml flavour): E8M0 exponent e, element j = low nibble of qs[j], j+16 = high nibble;
/// x = kvalues_mxfp4[nib] * 2^(e-128).
struct BlockMXFP4 {
  uint8_t e;
  uint8_t qs[kQK_MXFP4 / 2];
};

/// NVFP4 (ggml flavour): 4 UE4M3 scales (one per 16), sub-block s uses qs[8s..8s+7]: byte j low
/// nibble = element j, high nibble = element j+8; x = kvalues_mxfp4[nib] * ue4m3_half(d[s]).
struct BlockNVFP4 {
  uint8_t d[kQK_NVFP4 / kQK_NVFP4_SUB];
  uint8_t qs[kQK_NVFP4 / 2];
};

namespace detail {
// Iterates the table by value (no constexpr pointer comparisons: GCC rejects those under UBSan).
constexpr bool geometry_is(GgmlType t, int64_t elems, int64_t bytes) {
  for (const auto& g : ds4::detail::kGgmlGeometry)
    if (g.id == uint32_t(t)) return g.block_elems == elems && g.block_bytes == bytes;
  return false;
}
}  // namespace detail

static_assert(sizeof(BlockQ4_0) == 18 && detail::geometry_is(GgmlType::Q4_0, 32, sizeof(BlockQ4_0)));
static_assert(sizeof(BlockQ8_0) == 34 && detail::geometry_is(GgmlType::Q8_0, 32, sizeof(BlockQ8_0)));
static_assert(sizeof(BlockQ8_1) == 36 && detail::geometry_is(GgmlType::Q8_1, 32, sizeof(BlockQ8_1)));
static_assert(sizeof(BlockQ8_K) == 292 && detail::geometry_is(GgmlType::Q8_K, 256, sizeof(BlockQ8_K)));
static_assert(sizeof(BlockQ2_K) == 84 && detail::geometry_is(GgmlType::Q2_K, 256, sizeof(BlockQ2_K)));
static_assert(sizeof(BlockQ4_K) == 144 && detail::geometry_is(GgmlType::Q4_K, 256, sizeof(BlockQ4_K)));
static_assert(sizeof(BlockQ6_K) == 210 && detail::geometry_is(GgmlType::Q6_K, 256, sizeof(BlockQ6_K)));
static_assert(sizeof(BlockIQ2_XXS) == 66 && detail::geometry_is(GgmlType::IQ2_XXS, 256, sizeof(BlockIQ2_XXS)));
static_assert(sizeof(BlockIQ2_XS) == 74 && detail::geometry_is(GgmlType::IQ2_XS, 256, sizeof(BlockIQ2_XS)));
static_assert(sizeof(BlockIQ2_S) == 82 && detail::geometry_is(GgmlType::IQ2_S, 256, sizeof(BlockIQ2_S)));
static_assert(sizeof(BlockIQ1_S) == 50 && detail::geometry_is(GgmlType::IQ1_S, 256, sizeof(BlockIQ1_S)));
static_assert(sizeof(BlockIQ1_M) == 56 && detail::geometry_is(GgmlType::IQ1_M, 256, sizeof(BlockIQ1_M)));
static_assert(sizeof(BlockMXFP4) == 17 && detail::geometry_is(GgmlType::MXFP4, 32, sizeof(BlockMXFP4)));
static_assert(sizeof(BlockNVFP4) == 36 && detail::geometry_is(GgmlType::NVFP4, 64, sizeof(BlockNVFP4)));

/// ds4-internal F8_E4M3_R128 (not a ggml type): 128 consecutive elements of one row of a DeepSeek
/// FP8 tensor with the E8M0 scale of their 128x128 block (scale first, the layout of the
/// nisparks fork's F8_E4M3_B128). x[j] = e4m3(qs[j]) * 2^(e-127) (e = 0 -> 2^-127). Source of the
/// encoding: DeepSeek-V4 safetensors `<p>.weight` F8_E4M3 + `<p>.scale` F8_E8M0 (quant-formats.md §3).
struct BlockF8R128 {
  uint8_t e;
  uint8_t qs[128];
};
static_assert(sizeof(BlockF8R128) == 129 && detail::geometry_is(GgmlType::F8_E4M3_R128, 128, sizeof(BlockF8R128)));

/// ds4-internal NVFP4_S2 (not a ggml type): NVIDIA ModelOpt NVFP4 weights of 64 consecutive row
/// elements as a ggml NVFP4 block plus the tensor's FP32 `weight_scale_2` (bits, little-endian).
/// x[j] = (kvalues_mxfp4[code] * ue4m3_half(d[j/16])) * s2 = (e2m1 * e4m3(weight_scale)) * s2:
/// the first product is exact, the multiply by s2 rounds once (exact when s2 is a power of two).
/// ModelOpt layout: NeMo/ModelOpt NVFP4QTensor (quant-formats.md §2 "NVFP4, NVIDIA").
struct BlockNVFP4S2 {
  uint8_t s2[4];
  BlockNVFP4 b;
};
static_assert(sizeof(BlockNVFP4S2) == 40 && detail::geometry_is(GgmlType::NVFP4_S2, 64, sizeof(BlockNVFP4S2)));

/// fp16 super-scale of an IQ1_M block (bits spread over the top nibble of each u16 scale word).
DS4_HD inline uint16_t iq1m_scale_bits(const BlockIQ1_M& b) {
  const uint16_t s0 = uint16_t(b.scales[0] | (b.scales[1] << 8));
  const uint16_t s1 = uint16_t(b.scales[2] | (b.scales[3] << 8));
  const uint16_t s2 = uint16_t(b.scales[4] | (b.scales[5] << 8));
  const uint16_t s3 = uint16_t(b.scales[6] | (b.scales[7] << 8));
  return uint16_t((s0 >> 12) | ((s1 >> 8) & 0x00F0) | ((s2 >> 4) & 0x0F00) | (s3 & 0xF000));
}

}  // namespace ds4::quant
