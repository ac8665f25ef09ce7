// kernels/quant/quantize_q8.h — the Q8_1 activation quantizer contract (DS4_HD: CPU and CUDA
// must produce identical blocks from identical floats).
//
// A block holding a NaN or an infinity gets the fp16 NaN scale 0x7E00 and all-zero codes (s = NaN),
// so every dot with it is NaN, as the F32 path's would be (a corrupted weight must not vanish in
// q8 mode: validate/run agreement, tests/frontend/validate_agrees_test.cpp).
// Per block of 32 finite floats x[0..31] (DS4 contract; cf. ggml quantize_q8_1 and
// quant-formats.md §5.2 recipe):
//   amax = max_j |x[j]|                                      (order-free)
//   d32  = amax / 127.0f                                     (IEEE fp32 division, RN)
//   dh   = fp16(d32)   (RN-even; clamped to the largest finite fp16 65504 if d32 overflows)
//   df   = float(dh)   -- THE scale a consumer reads; q is made consistent with it:
//   q[j] = df == 0 ? 0 : clamp(roundf(x[j] / df), -127, 127)   (IEEE division; roundf = half
//          away from zero; the clamp matters only when dh rounded below d32)
//   s    = fp16(df * float(sum_j q[j]))   (sum is an exact int; one fp32 rounding, then RN-even)
// So x[j] ~= df * q[j] with |error| <= df/2 (plus amax*2^-12 at a clamped extreme), and d*q uses
// exactly the stored d. CUDA mirrors: __fdiv_rn for both divisions, __float2half_rn, roundf, no
// fast-math. The dot contract (dot_q8_1.h) never uses s; it is informational (s ~= sum x).
#pragma once

#include <cstdint>

#include "kernels/quant/blocks.h"

namespace ds4::quant {

/// fp16 scale of a Q8_1 block whose absolute maximum is `amax` (see contract above).
DS4_HD inline uint16_t q8_1_scale_bits(float amax) {
  const float d32 = amax / 127.0f;
  const uint16_t h = f32_to_fp16(d32);
  return (h & 0x7FFFu) == 0x7C00u ? uint16_t(0x7BFFu) : h;  // clamp +inf to 65504
}

/// Q8_1 code of x for the decoded scale df (df > 0): clamp(roundf(x / df), -127, 127).
DS4_HD inline int8_t q8_code(float x, float df) {
  float q = roundf(x / df);
  if (q > 127.0f) q = 127.0f;
  if (q < -127.0f) q = -127.0f;
  return int8_t(q);
}

/// Quantizes 32 floats to one Q8_1 block (the contract above; non-finite input: NaN scale).
DS4_HD inline void quantize_block_q8_1(const float* x, BlockQ8_1& out) {
  float amax = 0.0f;
  for (int j = 0; j < 32; ++j) {
    const float a = fabsf(x[j]);
    amax = (a > amax || a != a) ? a : amax;  // a NaN sticks (no later a > NaN)
  }
  if (!(amax <= 3.40282347e+38f)) {  // NaN or +inf
    for (int j = 0; j < 32; ++j) out.qs[j] = 0;
    out.d = uint16_t(0x7E00u);
    out.s = uint16_t(0x7E00u);
    return;
  }
  const uint16_t dh = q8_1_scale_bits(amax);
  const float df = fp16_to_f32(dh);
  int sum = 0;
  for (int j = 0; j < 32; ++j) {
    const int8_t q = df == 0.0f ? int8_t(0) : q8_code(x[j], df);
    out.qs[j] = q;
    sum += q;
  }
  out.d = dh;
  out.s = f32_to_fp16(df * float(sum));
}

}  // namespace ds4::quant
