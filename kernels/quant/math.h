// kernels/quant/math.h — THE TRANSCENDENTAL FUNCTIONS of the numerics contract (DS4_HD: the CPU
// reference and the CUDA kernels compile this one implementation, so both produce the same bits;
// DESIGN.md "Numerics contract").
//
// Method (our own, classic): every function takes an FP32 argument, evaluates in IEEE double with
// round-to-nearest and no fused multiply-add (-ffp-contract=off on the host, --fmad=false for CUDA
// files that use it), and rounds the result to FP32 once. Only +, -, * and / are used, which
// IEEE 754 makes bit-reproducible on every conforming machine.
// - exp: x = k ln2 + r, k = round(x log2e) (the 1.5*2^52 shift: round to nearest even by two
//   exact adds), r by Cody-Waite with a two-part ln2 (the high part has 32 significant bits, so
//   k*ln2_hi is exact for |k| < 2^21); e^r by its Taylor series to r^9 (|r| <= 0.35: truncation
//   < 7e-12 relative); times 2^k built from the exponent bits.
// - log: u = m 2^e with m in [sqrt(1/2), sqrt(2)); ln m = 2 atanh(s), s = (m-1)/(m+1), by the
//   odd series to s^21 (|s| <= 0.172: truncation < 1e-17); + e ln2.
// - log1p: u = 1 + x in double; log1p(x) = ln(u) * (x / (u - 1)) (D. Goldberg, "What every
//   computer scientist should know about floating-point arithmetic", 1991, Theorem 4), x when u == 1.
// - sin/cos: k = round(a 2/pi) (the same shift), r = a - k pi/2 by a three-part pi/2 (fdlibm's
//   split; exact products for |k| < 2^20, i.e. |a| < 1.6e6, which covers RoPE angles pos*freq
//   with pos < 1.6M); Taylor series of sin to r^15 and cos to r^16 on |r| <= pi/4 (truncation
//   < 2e-14), then the quadrant k mod 4.
// - sqrt: IEEE 754 square root, correctly rounded by definition (std::sqrt / __fsqrt_rn), so both
//   backends agree without an own implementation.
// Accuracy vs the correctly rounded FP32 result: the double evaluation is accurate to ~1e-11
// relative (exp) and ~1e-14 (the others), so the FP32 result is correctly rounded except when the
// exact value lies that close to a rounding boundary (then 1 ulp); tests/quant/test_math.cpp checks
// <= 1 ulp vs libm in double and >= 99 % exactly rounded.
#pragma once

#include <cstdint>

#include "kernels/quant/scalar_formats.h"

namespace ds4::quant {

namespace math_detail {

DS4_HD inline uint64_t f64_bits(double d) {
#ifdef __CUDA_ARCH__
  return static_cast<uint64_t>(__double_as_longlong(d));
#else
  uint64_t u;
  std::memcpy(&u, &d, 8);
  return u;
#endif
}

DS4_HD inline double f64_from_bits(uint64_t u) {
#ifdef __CUDA_ARCH__
  return __longlong_as_double(static_cast<long long>(u));
#else
  double d;
  std::memcpy(&d, &u, 8);
  return d;
#endif
}

/// Round-to-nearest-even of |t| < 2^51 by the 1.5*2^52 shift (exact IEEE adds, no library call).
DS4_HD inline double round_shift(double t) {
  const double shift = 6755399441055744.0;  // 1.5 * 2^52
  return (t + shift) - shift;
}

/// e^x in double for a float argument in [-104, 89] (see the file comment). Branch-free: the
/// integer k is read from the low mantissa bits of the shifted value (no float-to-int
/// conversion), so loops over it vectorize.
DS4_HD inline double exp_d(double x) {
  const double log2e = 1.4426950408889634;
  const double ln2_hi = 6.93147180369123816490e-01;  // fdlibm ln2_hi (32 significant bits)
  const double ln2_lo = 1.90821492927058770002e-10;
  const double shift = 6755399441055744.0;  // 1.5 * 2^52: t's low mantissa bits hold round(x log2e)
  const double t = x * log2e + shift;
  const double k = t - shift;
  const int64_t ki = static_cast<int64_t>(f64_bits(t) - f64_bits(shift));
  const double r = (x - k * ln2_hi) - k * ln2_lo;  // |r| <= 0.3466
  // Taylor series to r^9/9! (truncation < 7e-12 relative: the FP32 rounding is wrong only when the
  // exact value lies within 7e-12 relative of a rounding boundary), Horner.
  double p = 1.0 / 362880.0;
  p = p * r + 1.0 / 40320.0;
  p = p * r + 1.0 / 5040.0;
  p = p * r + 1.0 / 720.0;
  p = p * r + 1.0 / 120.0;
  p = p * r + 1.0 / 24.0;
  p = p * r + 1.0 / 6.0;
  p = p * r + 0.5;
  p = p * r + 1.0;
  p = p * r + 1.0;
  return p * f64_from_bits(static_cast<uint64_t>(ki + 1023) << 52);
}

/// ln(u) for a positive finite normal double u.
DS4_HD inline double log_d(double u) {
  const uint64_t b = f64_bits(u);
  int e = static_cast<int>((b >> 52) & 0x7ff) - 1023;
  double m = f64_from_bits((b & 0x000fffffffffffffull) | 0x3ff0000000000000ull);  // [1, 2)
  if (m > 1.4142135623730951) {
    m = m * 0.5;
    e += 1;
  }
  const double s = (m - 1.0) / (m + 1.0), s2 = s * s;
  double p = 1.0 / 21.0;
  p = p * s2 + 1.0 / 19.0;
  p = p * s2 + 1.0 / 17.0;
  p = p * s2 + 1.0 / 15.0;
  p = p * s2 + 1.0 / 13.0;
  p = p * s2 + 1.0 / 11.0;
  p = p * s2 + 1.0 / 9.0;
  p = p * s2 + 1.0 / 7.0;
  p = p * s2 + 1.0 / 5.0;
  p = p * s2 + 1.0 / 3.0;
  p = p * s2 + 1.0;
  const double ln2_hi = 6.93147180369123816490e-01, ln2_lo = 1.90821492927058770002e-10;
  const double de = static_cast<double>(e);
  return de * ln2_hi + (de * ln2_lo + 2.0 * s * p);
}

}  // namespace math_detail

/// e^x rounded to FP32 (0 below -104, +inf above 89, NaN for NaN). Branch-free (selects), so
/// element-wise loops vectorize; clamping to [-104, 89] changes no result (e^-104 rounds to 0 and
/// e^89 overflows to +inf in FP32).
DS4_HD inline float exp_f32(float x) {
  const float xc = x < -104.0f ? -104.0f : (x > 89.0f ? 89.0f : x);  // NaN passes through
  const float r = static_cast<float>(math_detail::exp_d(static_cast<double>(xc)));
  return x == x ? r : x;
}

/// ln(x) rounded to FP32 (x > 0; 0 -> -inf, negative or NaN -> NaN, +inf -> +inf).
DS4_HD inline float log_f32(float x) {
  if (!(x > 0.0f)) return x == 0.0f ? f32_from_bits(0xff800000u) : f32_from_bits(0x7fc00000u);
  if (x == f32_from_bits(0x7f800000u)) return x;
  return static_cast<float>(math_detail::log_d(static_cast<double>(x)));  // FP32 subnormals are double normals
}

/// ln(1 + x) rounded to FP32 (x > -1; -1 -> -inf; below -1 or NaN -> NaN).
DS4_HD inline float log1p_f32(float x) {
  if (!(x >= -1.0f)) return f32_from_bits(0x7fc00000u);
  if (x == -1.0f) return f32_from_bits(0xff800000u);
  if (x == f32_from_bits(0x7f800000u)) return x;
  const double xd = static_cast<double>(x), u = 1.0 + xd;
  if (u == 1.0) return x;
  return static_cast<float>(math_detail::log_d(u) * (xd / (u - 1.0)));
}

/// Correctly rounded FP32 square root (IEEE 754).
DS4_HD inline float sqrt_f32(float x) {
#ifdef __CUDA_ARCH__
  return __fsqrt_rn(x);
#else
  return std::sqrt(x);
#endif
}

/// sin(a) and cos(a) rounded to FP32, for |a| < 1.6e6 (the RoPE angle range; checked by callers'
/// contracts, not here: larger |a| lose accuracy but stay deterministic).
DS4_HD inline void sincos_f32(float a, float* s, float* c) {
  const double x = static_cast<double>(a);
  const double two_over_pi = 6.36619772367581382433e-01;
  const double pio2_1 = 1.57079632673412561417e+00;   // fdlibm: first 33 bits of pi/2
  const double pio2_2 = 6.07710050630396597660e-11;   // next 33 bits
  const double pio2_2t = 2.02226624879595063154e-21;  // pi/2 - (pio2_1 + pio2_2)
  const double k = math_detail::round_shift(x * two_over_pi);
  const double r = ((x - k * pio2_1) - k * pio2_2) - k * pio2_2t;  // |r| <= pi/4 (+ rounding)
  const double r2 = r * r;
  // sin r = r (1 - r^2/3! + ... + r^14/15!), cos r = 1 - r^2/2! + ... + r^16/16! (truncation
  // < 2e-14 resp. 1e-15 on |r| <= pi/4).
  double ps = -1.0 / 1307674368000.0;
  ps = ps * r2 + 1.0 / 6227020800.0;
  ps = ps * r2 - 1.0 / 39916800.0;
  ps = ps * r2 + 1.0 / 362880.0;
  ps = ps * r2 - 1.0 / 5040.0;
  ps = ps * r2 + 1.0 / 120.0;
  ps = ps * r2 - 1.0 / 6.0;
  ps = ps * r2 + 1.0;
  const double sr = r * ps;
  double pc = 1.0 / 20922789888000.0;
  pc = pc * r2 - 1.0 / 87178291200.0;
  pc = pc * r2 + 1.0 / 479001600.0;
  pc = pc * r2 - 1.0 / 3628800.0;
  pc = pc * r2 + 1.0 / 40320.0;
  pc = pc * r2 - 1.0 / 720.0;
  pc = pc * r2 + 1.0 / 24.0;
  pc = pc * r2 - 0.5;
  pc = pc * r2 + 1.0;
  const double cr = pc;
  const int q = static_cast<int>(static_cast<int64_t>(k) & 3);
  double sv, cv;
  if (q == 0) {
    sv = sr;
    cv = cr;
  } else if (q == 1) {
    sv = cr;
    cv = -sr;
  } else if (q == 2) {
    sv = -sr;
    cv = -cr;
  } else {
    sv = -cr;
    cv = sr;
  }
  *s = static_cast<float>(sv);
  *c = static_cast<float>(cv);
}

/// 1 / (1 + e^-x) in FP32 (exp_f32, then one FP32 add and divide).
DS4_HD inline float sigmoid_f32(float x) { return 1.0f / (1.0f + exp_f32(-x)); }

/// x / (1 + e^-x) in FP32.
DS4_HD inline float silu_f32(float x) { return x / (1.0f + exp_f32(-x)); }

}  // namespace ds4::quant
