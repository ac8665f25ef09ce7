// kernels/quant/act_qdq.h — activation quantize-dequantize (QDQ) of DeepSeek's reference QAT path
// (REF inference/kernel.py act_quant / fp4_act_quant and model.py rotate_activation;
// ../shared/reference/dsv4-architecture.md §3, ../shared/fixtures/dsv4-tiny/README.md "qat"):
// - FP8 E4M3 per block of B consecutive values: amax = max(|x|, 1e-4), s = 2^ceil(log2(amax / 448))
//   (ue8m0), q = e4m3_rne(clamp(x / s, +-448)), x <- q * s;
// - FP4 E2M1 per block of 32: amax = max(|x|, 6 * 2^-126), s = 2^ceil(log2(amax / 6)),
//   q = e2m1_rne(clamp(x / s, +-6)), x <- q * s (ties to the even code, as RNE on the 1-bit mantissa);
// - the normalized Walsh-Hadamard transform over n = 2^k values (Sylvester order), then * n^-1/2.
// Every step is exact except the division amax / 448 (one rounding; the power-of-two ceiling is
// exact on its result), x / s and q * s being exact power-of-two scalings; the Hadamard butterflies
// add in a fixed order. Shared by CPU and CUDA (DS4_HD).
#pragma once

#include <cmath>
#include <cstdint>

#include "kernels/quant/scalar_formats.h"

namespace ds4::quant {

/// 2^ceil(log2(v)) for finite v > 0, exact (frexp: v = m 2^k, m in [0.5, 1)).
DS4_HD inline float pow2_ceil(float v) {
  int k = 0;
  const float m = std::frexp(v, &k);
  return std::ldexp(1.0f, m == 0.5f ? k - 1 : k);
}

/// Round |v| <= 448 to the nearest E4M3 (fn) value, ties to even (normal steps 2^(E-3), subnormal
/// step 2^-9). The sign is kept (also for zero).
DS4_HD inline float e4m3_round(float v) {
  const float a = std::fabs(v);
  if (a == 0.0f) return v;
  float step;
  if (a < 0.015625f) {  // below 2^-6: subnormal grid
    step = 0.001953125f;  // 2^-9
  } else {
    int k = 0;
    std::frexp(a, &k);               // a = m 2^k, m in [0.5, 1) -> exponent k - 1
    step = std::ldexp(1.0f, k - 4);  // 3 mantissa bits
  }
  float r = std::nearbyint(a / step) * step;
  if (r > 448.0f) r = 448.0f;
  return std::copysign(r, v);
}

/// Round |v| <= 6 to the nearest E2M1 value {0, .5, 1, 1.5, 2, 3, 4, 6}, ties to the even code.
DS4_HD inline float e2m1_round(float v) {
  const float a = std::fabs(v);
  const float step = a < 2.0f ? 0.5f : a < 4.0f ? 1.0f : 2.0f;
  float r = std::nearbyint(a / step) * step;
  if (r > 6.0f) r = 6.0f;
  return std::copysign(r, v);
}

/// FP8 E4M3 QDQ of x[0..n) in blocks of `block` (n % block == 0), ue8m0 scales, in place.
DS4_HD inline void qdq_fp8_e4m3(float* x, int64_t n, int64_t block) {
  for (int64_t b = 0; b < n; b += block) {
    float amax = 0.0f;
    for (int64_t i = b; i < b + block; ++i) amax = std::fmax(amax, std::fabs(x[i]));
    const float s = pow2_ceil(std::fmax(amax, 1e-4f) / 448.0f);
    for (int64_t i = b; i < b + block; ++i) {
      float q = x[i] / s;
      q = std::fmin(std::fmax(q, -448.0f), 448.0f);
      x[i] = e4m3_round(q) * s;
    }
  }
}

/// FP4 E2M1 QDQ of x[0..n) in blocks of `block` (n % block == 0), ue8m0 scales, in place.
DS4_HD inline void qdq_fp4_e2m1(float* x, int64_t n, int64_t block) {
  for (int64_t b = 0; b < n; b += block) {
    float amax = 0.0f;
    for (int64_t i = b; i < b + block; ++i) amax = std::fmax(amax, std::fabs(x[i]));
    const float s = pow2_ceil(std::fmax(amax, 6.0f * 1.1754943508222875e-38f) / 6.0f);  // 6 * 2^-126
    for (int64_t i = b; i < b + block; ++i) {
      float q = x[i] / s;
      q = std::fmin(std::fmax(q, -6.0f), 6.0f);
      x[i] = e2m1_round(q) * s;
    }
  }
}

/// Normalized Walsh-Hadamard transform of x[0..n), n a power of two, in place: butterflies with
/// strides 1, 2, 4, ... (Sylvester order, the matrix H_n of fast_hadamard_transform), then each
/// value times float(1 / sqrt(n)).
DS4_HD inline void hadamard_normalized(float* x, int64_t n) {
  for (int64_t h = 1; h < n; h *= 2)
    for (int64_t i = 0; i < n; i += 2 * h)
      for (int64_t j = i; j < i + h; ++j) {
        const float a = x[j], b = x[j + h];
        x[j] = a + b;
        x[j + h] = a - b;
      }
  const float s = static_cast<float>(1.0 / std::sqrt(static_cast<double>(n)));
  for (int64_t i = 0; i < n; ++i) x[i] = x[i] * s;
}

}  // namespace ds4::quant
