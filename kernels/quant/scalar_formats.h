// kernels/quant/scalar_formats.h — scalar float formats used by quant blocks (header-only, DS4_HD).
//
// IEEE binary16 (fp16), bfloat16, OCP E8M0 / E4M3 / E2M1 and ggml's "UE4M3 half" scale, as
// conversions to/from fp32 by bit manipulation, usable from host and CUDA device code.
// Sources: IEEE 754-2008 (binary16); OCP Microscaling Formats (MX) v1.0 (E8M0, E2M1, E4M3);
// ggml-org/ggml src/ggml-impl.h (ggml_e8m0_to_fp32, ggml_e8m0_to_fp32_half, ggml_ue4m3_to_fp32,
// ggml_compute_fp32_to_bf16) — summarised in shared/reference/quant-formats.md §2.
#pragma once

#include <cstdint>
#include <cmath>
#include <math.h>
#include <cstring>

/// Marks functions callable from both host and CUDA device code.
#ifdef __CUDACC__
#define DS4_HD __host__ __device__
#else
#define DS4_HD
#endif

namespace ds4::quant {

/// Bit pattern of a float (no conversion).
DS4_HD inline uint32_t f32_bits(float f) {
#ifdef __CUDA_ARCH__
  return __float_as_uint(f);
#else
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
#endif
}

/// Float with bit pattern `u`.
DS4_HD inline float f32_from_bits(uint32_t u) {
#ifdef __CUDA_ARCH__
  return __uint_as_float(u);
#else
  float f;
  std::memcpy(&f, &u, 4);
  return f;
#endif
}

/// IEEE binary16 bits -> fp32 (exact; subnormals, inf and NaN preserved, NaN payload kept).
DS4_HD inline float fp16_to_f32(uint16_t h) {
  const uint32_t sign = uint32_t(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1Fu;
  uint32_t man = h & 0x3FFu;
  if (exp == 0x1F) return f32_from_bits(sign | 0x7F800000u | (man << 13));  // inf / NaN
  if (exp == 0) {
    if (man == 0) return f32_from_bits(sign);  // +-0
    // Subnormal: normalise. value = man * 2^-24.
    int e = -14;
    while ((man & 0x400u) == 0) {
      man <<= 1;
      --e;
    }
    man &= 0x3FFu;
    return f32_from_bits(sign | (uint32_t(e + 127) << 23) | (man << 13));
  }
  return f32_from_bits(sign | ((exp - 15 + 127) << 23) | (man << 13));
}

/// fp32 -> IEEE binary16 bits, round to nearest even (overflow -> inf, NaN -> quiet NaN,
/// underflow -> subnormal/zero). Same result as the hardware cvt.rn.f16.f32 / F16C.
DS4_HD inline uint16_t f32_to_fp16(float f) {
  const uint32_t x = f32_bits(f);
  const uint16_t sign = uint16_t((x >> 16) & 0x8000u);
  const uint32_t ax = x & 0x7FFFFFFFu;
  if (ax > 0x7F800000u) return uint16_t(sign | 0x7E00u | ((ax >> 13) & 0x3FFu));  // NaN
  if (ax >= 0x47800000u) {  // >= 65536 before rounding: inf (65520 and above rounds to inf too)
    return uint16_t(sign | 0x7C00u);
  }
  const int e = int(ax >> 23) - 127;
  if (e >= -14) {  // normal range in fp16
    uint32_t man = ax & 0x7FFFFFu;
    uint32_t h = (uint32_t(e + 15) << 10) | (man >> 13);
    const uint32_t rem = man & 0x1FFFu;
    if (rem > 0x1000u || (rem == 0x1000u && (h & 1u))) ++h;  // carries into exponent correctly
    return uint16_t(sign | h);                                  // h == 0x7C00 -> inf
  }
  if (e < -25) return sign;  // below half of the smallest subnormal: +-0
  // Subnormal: value = m * 2^-24 with m = round(full_significand * 2^(e+24-23)).
  const uint32_t full = (ax & 0x7FFFFFu) | 0x800000u;
  const int shift = -e - 1;  // 14..24 : full >> (shift) gives the 2^-24 units... see below
  // full * 2^(e-23) / 2^-24 = full * 2^(e+1) = full >> (-e-1)
  uint32_t m = full >> shift;
  const uint32_t rem = full & ((1u << shift) - 1u);
  const uint32_t half = 1u << (shift - 1);
  if (rem > half || (rem == half && (m & 1u))) ++m;  // may become 0x400 = smallest normal
  return uint16_t(sign | m);
}

/// bfloat16 bits -> fp32 (exact).
DS4_HD inline float bf16_to_f32(uint16_t b) { return f32_from_bits(uint32_t(b) << 16); }

/// fp32 -> bfloat16 bits, round to nearest even; NaN -> quiet NaN (as ggml_compute_fp32_to_bf16).
DS4_HD inline uint16_t f32_to_bf16(float f) {
  uint32_t u = f32_bits(f);
  if ((u & 0x7FFFFFFFu) > 0x7F800000u) return uint16_t((u >> 16) | 64u);
  u += 0x7FFFu + ((u >> 16) & 1u);
  return uint16_t(u >> 16);
}

/// OCP E8M0 scale -> fp32 as DeepSeek's converters and ggml_e8m0_to_fp32 decode it: 2^(e-127);
/// e = 0 -> 2^-127 (subnormal fp32), e = 255 -> +inf (ggml; OCP says NaN — reject 0xFF in files).
DS4_HD inline float e8m0_to_f32(uint8_t e) {
  return f32_from_bits(e == 0 ? 0x00400000u : uint32_t(e) << 23);
}

/// ggml's "half" E8M0 decode used with the doubled E2M1 table kvalues_mxfp4: 2^(e-128);
/// e in {0,1} -> fp32 subnormals 2^-128, 2^-127 (ggml_e8m0_to_fp32_half).
DS4_HD inline float e8m0_to_f32_half(uint8_t e) {
  return f32_from_bits(e < 2 ? (0x00200000u << e) : (uint32_t(e) - 1u) << 23);
}

/// OCP E4M3 ("fn": no inf) -> fp32: bias 7, exp 0 -> man*2^-9, 0x7F/0xFF -> NaN, max 448.
DS4_HD inline float e4m3_to_f32(uint8_t x) {
  const uint32_t sign = uint32_t(x & 0x80u) << 24;
  const uint32_t exp = (x >> 3) & 0xFu;
  const uint32_t man = x & 0x7u;
  if ((x & 0x7Fu) == 0x7Fu) return f32_from_bits(sign | 0x7FC00000u);
  if (exp == 0) {
    // man * 2^-9, exact: build via float multiply of small ints (exact).
    const float v = float(man) * f32_from_bits(0x3B000000u);  // 2^-9
    return sign ? -v : v;
  }
  return f32_from_bits(sign | ((exp - 7u + 127u) << 23) | (man << 20));
}

/// ggml NVFP4 scale decode (ggml_ue4m3_to_fp32): HALF the unsigned E4M3 value (pairs with the
/// doubled table kvalues_mxfp4). 0x00 and 0x7F -> 0; bit 7 is ignored (ggml CPU behaviour; ggml
/// CUDA honours it as a sign, so encoders must never set it).
DS4_HD inline float ue4m3_to_f32_half(uint8_t x) {
  if (x == 0 || x == 0x7F) return 0.0f;
  const uint32_t exp = (x >> 3) & 0xFu;
  const uint32_t man = x & 0x7u;
  if (exp == 0) return float(man) * f32_from_bits(0x3A800000u);  // man * 2^-10
  return f32_from_bits(((exp - 7u + 127u - 1u) << 23) | (man << 20));
}

/// OCP E2M1 code (bit 3 = sign) -> fp32: 0, 0.5, 1, 1.5, 2, 3, 4, 6 and negatives (-0 for code 8).
DS4_HD inline float e2m1_to_f32(uint8_t code) {
  const uint8_t m = code & 7u;
  const float mag = m < 2 ? 0.5f * float(m) : float((m & 1u) + 2u) * f32_from_bits(uint32_t(125 + (m >> 1)) << 23);
  return (code & 8u) ? -mag : mag;
}

/// fp32 -> OCP E4M3 ("fn") byte, round to nearest even, SATURATING: |x| > 448 (and +-inf) gives
/// +-448 (0x7E / 0xFE), as DeepSeek's activation quantizer clamps to +-448 before its cast; NaN
/// gives 0x7F (sign kept). Subnormals (|x| < 2^-6) are multiples of 2^-9.
DS4_HD inline uint8_t f32_to_e4m3(float f) {
  const uint32_t bits = f32_bits(f);
  const uint8_t sign = uint8_t((bits >> 24) & 0x80u);
  if ((bits & 0x7FFFFFFFu) > 0x7F800000u) return uint8_t(sign | 0x7Fu);
  const float a = fabsf(f);
  if (a >= 448.0f) return uint8_t(sign | 0x7Eu);
  if (a < 0.015625f) return uint8_t(sign | uint8_t(rintf(a * 512.0f)));  // 8 -> 0x08 = 2^-6
  int e = int((f32_bits(a) >> 23) & 0xFFu) - 127;                      // -6..8
  float m = rintf(a * f32_from_bits(uint32_t(127 + 3 - e) << 23));      // [8, 16], exact scaling
  if (m == 16.0f) {
    m = 8.0f;
    ++e;
  }
  return uint8_t(sign | uint8_t((e + 7) << 3) | uint8_t(int(m) - 8));  // <= 0x7E since a < 448
}

/// fp32 -> OCP E2M1 code (bit 3 = sign), round to nearest even on the grid {0, .5, 1, 1.5, 2, 3,
/// 4, 6}, SATURATING to +-6; NaN gives 0 (callers must not pass NaN). -0 gives code 8.
DS4_HD inline uint8_t f32_to_e2m1(float f) {
  const uint8_t sign = (f32_bits(f) >> 31) ? 8u : 0u;
  const float a = fabsf(f);
  if (!(a == a)) return 0;
  uint8_t code;
  if (a < 2.0f) {
    code = uint8_t(rintf(a * 2.0f));  // 0..4 (4 = 2.0 = code 4)
  } else if (a < 4.0f) {
    code = uint8_t(2 + int(rintf(a)));  // 2 -> 4, 3 -> 5, 4 -> 6
  } else if (a < 6.0f) {
    code = uint8_t(4 + int(rintf(a * 0.5f)));  // 2 (4.0) -> 6, 3 (6.0) -> 7
  } else {
    code = 7;
  }
  return uint8_t(sign | code);
}

}  // namespace ds4::quant
