// kernels/cuda/common/chunk_decode.cuh — device decoders of one 32-element chunk of a weight block
// into int8 lanes (packed 4 per int32) plus the chunk's epilogue metadata, and the epilogue that
// turns exact integer sub-block sums into the contract's fp32 partial P_b.
//
// Every weight type's chunk partial in kernels/quant/dot_q8_1.h can be written from two 16-element
// integer sums S_h = sum_{j<16} w[16h+j] * q[16h+j] (h = 0, 1) of SIGNED INT8 weight values w, the
// activation sums A_h = sum_{j<16} q[16h+j], and small per-chunk integers/floats:
//   Scaled (Q4_0, Q8_0, MXFP4, Q6_K, IQ2_*, IQ1_*): P = (a * da) * float(k0*S0 + k1*S1)
//   Nv     (NVFP4):                                  P = da * ((a * float(S0)) + (b * float(S1)))
//   Min    (Q2_K, Q4_K):  P = da * ((a * float(k0*S0 + k1*S1)) - (b * float(m0*A0 + m1*A1)))
// with the int8 values and (a, b, k, m) per type below. The integer forms are identical to the
// contract's (sums of exact products regrouped); IQ1's 8*sum(grid*q) + sgn*sum(q) is folded into
// one int8 weight 8*grid + sgn in {-9,-7,-1,1,7,9}. The float operations are the contract's, in
// its order, with explicitly rounded intrinsics (never contracted into FMA).
//
// Decoders read blocks through the kernels/quant struct layouts (2-byte aligned structs, 1-byte
// for MXFP4/NVFP4/IQ1_M) and use the shared DS4_HD accessors for scales and grid indices.
#pragma once

#include <cstdint>

#include "kernels/quant/blocks.h"
#include "kernels/quant/decode.h"
#include "kernels/quant/grids.h"

namespace ds4::cuda {

using namespace ds4::quant;

/// Epilogue families (see the file comment).
enum class Epi { Scaled, Nv, Min };

/// Per-chunk epilogue data.
struct ChunkMeta {
  float a, b;
  int k0, k1, m0, m1;
};

// ---- word helpers ----------------------------------------------------------------------------

/// 4 bytes at a 2-byte aligned address as one little-endian word.
__device__ __forceinline__ uint32_t ld_u32_a2(const void* p) {
  const uint16_t* q = static_cast<const uint16_t*>(p);
  return uint32_t(q[0]) | (uint32_t(q[1]) << 16);
}
/// 4 bytes at any address as one little-endian word.
__device__ __forceinline__ uint32_t ld_u32_a1(const void* p) {
  const uint8_t* q = static_cast<const uint8_t*>(p);
  return uint32_t(q[0]) | (uint32_t(q[1]) << 8) | (uint32_t(q[2]) << 16) | (uint32_t(q[3]) << 24);
}
/// Negates the bytes of `g` whose bit in `signs4` (bits 0..3 = bytes 0..3) is set.
__device__ __forceinline__ uint32_t apply_signs4(uint32_t g, uint32_t signs4) {
  const uint32_t m = __vcmpne4((signs4 * 0x01010101u) & 0x08040201u, 0u);  // 0xFF per negated byte
  return __vsub4(g ^ m, m);
}
/// Maps four 4-bit codes (low nibble of each byte of `codes`) through kvalues_mxfp4 (int8 bytes).
__device__ __forceinline__ uint32_t kvalues_mxfp4_x4(uint32_t codes) {
  // kvalues_mxfp4 = {0,1,2,3,4,6,8,12, 0,-1,-2,-3,-4,-6,-8,-12} as bytes (grids.inc), checked
  // against the table by a static_assert in mmvq_dispatch.cu.
  constexpr uint32_t kT0 = 0x03020100u, kT1 = 0x0C080604u, kT2 = 0xFDFEFF00u, kT3 = 0xF4F8FAFCu;
  const uint32_t lo3 = codes & 0x07070707u;
  const uint32_t packed = lo3 | (lo3 >> 4);                         // byte0 = c0|c1<<4, byte2 = c2|c3<<4
  const uint32_t sel = (packed & 0xFFu) | ((packed >> 8) & 0xFF00u);  // 4 selector nibbles
  const uint32_t pos = __byte_perm(kT0, kT1, sel), neg = __byte_perm(kT2, kT3, sel);
  const uint32_t m = __vcmpne4(codes & 0x08080808u, 0u);
  return (pos & ~m) | (neg & m);
}
/// Signed IQ2 grid entry halves with the sign byte applied: w[0] = elements 0..3, w[1] = 4..7.
__device__ __forceinline__ void iq2_words(uint64_t grid, uint32_t signs, int* w) {
  w[0] = int(apply_signs4(uint32_t(grid), signs & 0xFu));
  w[1] = int(apply_signs4(uint32_t(grid >> 32), signs >> 4));
}
/// ksigns_iq2xs(i) computed: bits 0..6 = i, bit 7 = parity of i (grids.h).
__device__ __forceinline__ uint32_t ksigns_of(uint32_t i) { return i | ((__popc(i) & 1u) << 7); }
/// IQ1 entry as int8 lanes 8*grid + sgn (sgn = -1 when neg, else +1): w[0..1].
__device__ __forceinline__ void iq1_words(uint64_t grid, bool neg, int* w) {
  const uint32_t add = neg ? 0xFFFFFFFFu : 0x01010101u;
  w[0] = int(__vadd4((uint32_t(grid) << 3) & 0xF8F8F8F8u, add));
  w[1] = int(__vadd4((uint32_t(grid >> 32) << 3) & 0xF8F8F8F8u, add));
}

// ---- per-type traits: Block, chunks per block, epilogue, decode ------------------------------

struct TraitsQ4_0 {
  using Block = BlockQ4_0;
  static constexpr GgmlType kType = GgmlType::Q4_0;
  static constexpr int kChunks = 1;
  static constexpr Epi kEpi = Epi::Scaled;
  __device__ static void decode(const Block& b, int, int* w, ChunkMeta& m) {
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const uint32_t q = ld_u32_a2(b.qs + 4 * i);
      w[i] = int(__vsub4(q & 0x0F0F0F0Fu, 0x08080808u));
      w[i + 4] = int(__vsub4((q >> 4) & 0x0F0F0F0Fu, 0x08080808u));
    }
    m = {fp16_to_f32(b.d), 0.0f, 1, 1, 0, 0};
  }
};

struct TraitsQ8_0 {
  using Block = BlockQ8_0;
  static constexpr GgmlType kType = GgmlType::Q8_0;
  static constexpr int kChunks = 1;
  static constexpr Epi kEpi = Epi::Scaled;
  __device__ static void decode(const Block& b, int, int* w, ChunkMeta& m) {
#pragma unroll
    for (int i = 0; i < 8; ++i) w[i] = int(ld_u32_a2(b.qs + 4 * i));
    m = {fp16_to_f32(b.d), 0.0f, 1, 1, 0, 0};
  }
};

struct TraitsMXFP4 {
  using Block = BlockMXFP4;
  static constexpr GgmlType kType = GgmlType::MXFP4;
  static constexpr int kChunks = 1;
  static constexpr Epi kEpi = Epi::Scaled;
  __device__ static void decode(const Block& b, int, int* w, ChunkMeta& m) {
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const uint32_t q = ld_u32_a1(b.qs + 4 * i);
      w[i] = int(kvalues_mxfp4_x4(q & 0x0F0F0F0Fu));
      w[i + 4] = int(kvalues_mxfp4_x4((q >> 4) & 0x0F0F0F0Fu));
    }
    m = {e8m0_to_f32_half(b.e), 0.0f, 1, 1, 0, 0};
  }
};

struct TraitsNVFP4 {
  using Block = BlockNVFP4;
  static constexpr GgmlType kType = GgmlType::NVFP4;
  static constexpr int kChunks = 2;
  static constexpr Epi kEpi = Epi::Nv;
  __device__ static void decode(const Block& b, int c, int* w, ChunkMeta& m) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {  // sub-block s = 2c + h: bytes qs[8s..8s+7]
      const uint32_t q0 = ld_u32_a1(b.qs + 8 * (2 * c + h)), q1 = ld_u32_a1(b.qs + 8 * (2 * c + h) + 4);
      w[4 * h + 0] = int(kvalues_mxfp4_x4(q0 & 0x0F0F0F0Fu));         // elements 0..3
      w[4 * h + 1] = int(kvalues_mxfp4_x4(q1 & 0x0F0F0F0Fu));         // 4..7
      w[4 * h + 2] = int(kvalues_mxfp4_x4((q0 >> 4) & 0x0F0F0F0Fu));  // 8..11
      w[4 * h + 3] = int(kvalues_mxfp4_x4((q1 >> 4) & 0x0F0F0F0Fu));  // 12..15
    }
    m = {ue4m3_to_f32_half(b.d[2 * c]), ue4m3_to_f32_half(b.d[2 * c + 1]), 1, 1, 0, 0};
  }
};

struct TraitsQ2_K {
  using Block = BlockQ2_K;
  static constexpr GgmlType kType = GgmlType::Q2_K;
  static constexpr int kChunks = 8;
  static constexpr Epi kEpi = Epi::Min;
  __device__ static void decode(const Block& b, int g, int* w, ChunkMeta& m) {
    const int h = g / 4, j = g % 4;
#pragma unroll
    for (int i = 0; i < 8; ++i) w[i] = int((ld_u32_a2(b.qs + 32 * h + 4 * i) >> (2 * j)) & 0x03030303u);
    const uint8_t s0 = b.scales[8 * h + 2 * j], s1 = b.scales[8 * h + 2 * j + 1];
    m = {fp16_to_f32(b.d), fp16_to_f32(b.dmin), s0 & 0xF, s1 & 0xF, s0 >> 4, s1 >> 4};
  }
};

struct TraitsQ4_K {
  using Block = BlockQ4_K;
  static constexpr GgmlType kType = GgmlType::Q4_K;
  static constexpr int kChunks = 8;
  static constexpr Epi kEpi = Epi::Min;
  __device__ static void decode(const Block& b, int g, int* w, ChunkMeta& m) {
    const int shift = (g & 1) ? 4 : 0;
#pragma unroll
    for (int i = 0; i < 8; ++i) w[i] = int((ld_u32_a2(b.qs + 32 * (g / 2) + 4 * i) >> shift) & 0x0F0F0F0Fu);
    int sc, mn;
    q4_k_scale_min(b, g, &sc, &mn);
    m = {fp16_to_f32(b.d), fp16_to_f32(b.dmin), sc, sc, mn, mn};
  }
};

struct TraitsQ6_K {
  using Block = BlockQ6_K;
  static constexpr GgmlType kType = GgmlType::Q6_K;
  static constexpr int kChunks = 8;
  static constexpr Epi kEpi = Epi::Scaled;
  __device__ static void decode(const Block& b, int g, int* w, ChunkMeta& m) {
    const int h = g / 4, k = g % 4;
    const int lshift = k >= 2 ? 4 : 0;
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      const uint32_t lo = (ld_u32_a2(b.ql + 64 * h + 32 * (k & 1) + 4 * i) >> lshift) & 0x0F0F0F0Fu;
      const uint32_t hi = ((ld_u32_a2(b.qh + 32 * h + 4 * i) >> (2 * k)) & 0x03030303u) << 4;
      w[i] = int(__vsub4(lo | hi, 0x20202020u));
    }
    m = {fp16_to_f32(b.d), 0.0f, int(b.scales[8 * h + 2 * k]), int(b.scales[8 * h + 2 * k + 1]), 0, 0};
  }
};

struct TraitsIQ2_XXS {
  using Block = BlockIQ2_XXS;
  static constexpr GgmlType kType = GgmlType::IQ2_XXS;
  static constexpr int kChunks = 8;
  static constexpr Epi kEpi = Epi::Scaled;
  __device__ static void decode(const Block& b, int g, int* w, ChunkMeta& m) {
    const uint32_t a0 = uint32_t(b.qs[4 * g]) | (uint32_t(b.qs[4 * g + 1]) << 16);
    const uint32_t a1 = uint32_t(b.qs[4 * g + 2]) | (uint32_t(b.qs[4 * g + 3]) << 16);
#pragma unroll
    for (int l = 0; l < 4; ++l)
      iq2_words(iq2xxs_grid(int((a0 >> (8 * l)) & 0xFF)), ksigns_of((a1 >> (7 * l)) & 127u), w + 2 * l);
    const int k = int(2 * (a1 >> 28) + 1);
    m = {__fmul_rn(fp16_to_f32(b.d), 0.125f), 0.0f, k, k, 0, 0};
  }
};

struct TraitsIQ2_XS {
  using Block = BlockIQ2_XS;
  static constexpr GgmlType kType = GgmlType::IQ2_XS;
  static constexpr int kChunks = 8;
  static constexpr Epi kEpi = Epi::Scaled;
  __device__ static void decode(const Block& b, int g, int* w, ChunkMeta& m) {
#pragma unroll
    for (int l = 0; l < 4; ++l) {
      const uint16_t q = b.qs[4 * g + l];
      iq2_words(iq2xs_grid(q & 511), ksigns_of(q >> 9), w + 2 * l);
    }
    m = {__fmul_rn(fp16_to_f32(b.d), 0.125f), 0.0f, 2 * (b.scales[g] & 0xF) + 1, 2 * (b.scales[g] >> 4) + 1, 0, 0};
  }
};

struct TraitsIQ2_S {
  using Block = BlockIQ2_S;
  static constexpr GgmlType kType = GgmlType::IQ2_S;
  static constexpr int kChunks = 8;
  static constexpr Epi kEpi = Epi::Scaled;
  __device__ static void decode(const Block& b, int g, int* w, ChunkMeta& m) {
#pragma unroll
    for (int l = 0; l < 4; ++l) iq2_words(iq2s_grid(iq2_s_index(b, g, l)), b.qs[32 + 4 * g + l], w + 2 * l);
    m = {__fmul_rn(fp16_to_f32(b.d), 0.125f), 0.0f, 2 * (b.scales[g] & 0xF) + 1, 2 * (b.scales[g] >> 4) + 1, 0, 0};
  }
};

struct TraitsIQ1_S {
  using Block = BlockIQ1_S;
  static constexpr GgmlType kType = GgmlType::IQ1_S;
  static constexpr int kChunks = 8;
  static constexpr Epi kEpi = Epi::Scaled;
  __device__ static void decode(const Block& b, int g, int* w, ChunkMeta& m) {
    const uint16_t qh = b.qh[g];
    const bool neg = (qh & 0x8000) != 0;
#pragma unroll
    for (int l = 0; l < 4; ++l) iq1_words(iq1s_grid(b.qs[4 * g + l] | (((qh >> (3 * l)) & 7) << 8)), neg, w + 2 * l);
    const int k = 2 * ((qh >> 12) & 7) + 1;
    m = {__fmul_rn(fp16_to_f32(b.d), 0.125f), 0.0f, k, k, 0, 0};
  }
};

struct TraitsIQ1_M {
  using Block = BlockIQ1_M;
  static constexpr GgmlType kType = GgmlType::IQ1_M;
  static constexpr int kChunks = 8;
  static constexpr Epi kEpi = Epi::Scaled;
  __device__ static void decode(const Block& b, int g, int* w, ChunkMeta& m) {
#pragma unroll
    for (int l = 0; l < 4; ++l) iq1_words(iq1s_grid(iq1_m_index(b, g, l)), iq1_m_delta_neg(b, g, l), w + 2 * l);
    m = {__fmul_rn(fp16_to_f32(iq1m_scale_bits(b)), 0.125f), 0.0f, 2 * iq1_m_scale(b, g, 0) + 1,
         2 * iq1_m_scale(b, g, 1) + 1, 0, 0};
  }
};

// ---- epilogue --------------------------------------------------------------------------------

/// The contract's chunk partial from the integer sums (see the file comment). a0/a1 (activation
/// sums) are only read by the Min family.
template <Epi kEpi>
__device__ __forceinline__ float chunk_epilogue(const ChunkMeta& m, float da, int s0, int s1, int a0, int a1) {
  if constexpr (kEpi == Epi::Scaled) {
    return __fmul_rn(__fmul_rn(m.a, da), __int2float_rn(m.k0 * s0 + m.k1 * s1));
  } else if constexpr (kEpi == Epi::Nv) {
    return __fmul_rn(da, __fadd_rn(__fmul_rn(m.a, __int2float_rn(s0)), __fmul_rn(m.b, __int2float_rn(s1))));
  } else {
    const float t1 = __fmul_rn(m.a, __int2float_rn(m.k0 * s0 + m.k1 * s1));
    const float t2 = __fmul_rn(m.b, __int2float_rn(m.m0 * a0 + m.m1 * a1));
    return __fmul_rn(da, __fsub_rn(t1, t2));
  }
}

/// Q8_1 activation block loaded as words: da (decoded fp16 d), qs as 8 int8x4 words.
struct ActWords {
  float da;
  int q[8];
};
/// Loads activation block `a` (4-byte aligned: 36-byte blocks from a cudaMalloc base).
__device__ __forceinline__ void load_act(const BlockQ8_1* a, ActWords& out) {
  out.da = fp16_to_f32(a->d);
  const int* q = reinterpret_cast<const int*>(a->qs);
#pragma unroll
  for (int i = 0; i < 8; ++i) out.q[i] = q[i];
}

/// Contract chunk partial of decoded chunk (w, m) with activation words `a`, via DP4A.
template <Epi kEpi>
__device__ __forceinline__ float chunk_dot_dp4a(const int* w, const ChunkMeta& m, const ActWords& a) {
  int s0 = 0, s1 = 0, a0 = 0, a1 = 0;
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    s0 = __dp4a(w[i], a.q[i], s0);
    s1 = __dp4a(w[i + 4], a.q[i + 4], s1);
  }
  if constexpr (kEpi == Epi::Min) {
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      a0 = __dp4a(0x01010101, a.q[i], a0);
      a1 = __dp4a(0x01010101, a.q[i + 4], a1);
    }
  }
  return chunk_epilogue<kEpi>(m, a.da, s0, s1, a0, a1);
}

/// Decodes chunk b (0-based over the row) of a weight row of Tr blocks.
template <class Tr>
__device__ __forceinline__ void decode_row_chunk(const uint8_t* row, int64_t b, int* w, ChunkMeta& m) {
  const auto* blk = reinterpret_cast<const typename Tr::Block*>(row) + b / Tr::kChunks;
  Tr::decode(*blk, int(b % Tr::kChunks), w, m);
}

}  // namespace ds4::cuda
