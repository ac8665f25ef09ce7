// kernels/quant/dot_f32.h — THE FP32 DOT ORDER of the numerics contract (DS4_HD: the CPU reference
// and the CUDA kernels compile this one definition, so both produce the same bits; DESIGN.md
// "Numerics contract", kernels/NUMERICS.md).
//
// Order (32 lanes, the shape of one CUDA warp per output):
// - lane l (0..31) accumulates, in ascending i, every i < n with i % 32 == l, as
//   acc_l = fmaf(a[i], b[i], acc_l) (one fused multiply-add, rounded once), from acc_l = +0.0f;
//   zero padding of a partial last chunk is exact (fmaf(0, 0, acc) == acc: acc is never -0);
// - then the butterfly: for off = 16, 8, 4, 2, 1: acc_l = acc_l + acc_{l+off} for l < off;
//   the result is acc_0. (A warp: lane = i % 32, __fmaf_rn, then __shfl_xor_sync 16..1 — the xor
//   butterfly leaves lane 0 with exactly these sums.)
// SIMD CPU versions (kernels/cpu/dot_f32.cpp: AVX2+FMA with 4 ymm = 32 lanes, AVX-512 with 2 zmm)
// give the same bits.
#pragma once

#include <cmath>
#include <cstdint>

#include "kernels/quant/scalar_formats.h"  // DS4_HD

namespace ds4::quant {

/// Number of accumulator lanes of the FP32 dot order.
inline constexpr int kDotF32Lanes = 32;

/// Butterfly of the 32 lane sums (off = 16, 8, 4, 2, 1: acc[l] += acc[l + off] for l < off);
/// destroys `acc`, returns acc[0].
DS4_HD inline float dot_f32_butterfly(float* acc) {
  for (int off = kDotF32Lanes / 2; off >= 1; off /= 2)
    for (int l = 0; l < off; ++l) acc[l] = acc[l] + acc[l + off];
  return acc[0];
}

/// The scalar reference: sum_i a[i] * b[i] over i < n in the 32-lane FMA order above (n >= 0).
DS4_HD inline float dot_f32_ref(const float* a, const float* b, int64_t n) {
  float acc[kDotF32Lanes];
  for (int l = 0; l < kDotF32Lanes; ++l) acc[l] = 0.0f;
  for (int64_t i = 0; i < n; ++i) {
    const int l = static_cast<int>(i % kDotF32Lanes);
#ifdef __CUDA_ARCH__
    acc[l] = __fmaf_rn(a[i], b[i], acc[l]);
#else
    acc[l] = std::fma(a[i], b[i], acc[l]);
#endif
  }
  return dot_f32_butterfly(acc);
}

}  // namespace ds4::quant
