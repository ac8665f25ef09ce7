// kernels/cpu/quantize_q8_avx2.cpp — AVX2 + F16C quantize_row_q8_1 (the contract of
// kernels/quant/quantize_q8.h, the same bytes as the scalar quantize_block_q8_1: checked by
// tests/cpu_simd/test_mmq.cpp). Built with -mavx2 -mfma -mf16c (the *_avx2.cpp rule of
// kernels/CMakeLists.txt); entered only when the AVX2 family is selected (cpu_features.h). Calls no
// inline function of the shared headers (an AVX2 copy must not replace the scalar one at link time):
// a block holding a NaN or infinity is left to the caller's scalar path.
//   amax: max of |x| (order-free); d32 = amax / 127.0f; dh = F16C RN-even conversion, +inf
//   clamped to 65504; df = float(dh); q = clamp(roundf(x / df), -127, 127) with roundf (half away
//   from zero) as trunc + (|v - trunc| >= 0.5 ? sign : 0) (v - trunc(v) is exact); s = fp16(df * sum q).
#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "kernels/cpu/quant_ref.h"

namespace ds4::cpu::avx2 {

/// Quantizes one block of 32 floats into the 36 bytes at `dst`; false (nothing written) when the
/// block holds a NaN or an infinity.
bool quantize_block_q8_1(const float* x, uint8_t* dst) {
  const __m256 sign = _mm256_set1_ps(-0.0f);
  __m256 v[4], mx = _mm256_setzero_ps();
  for (int k = 0; k < 4; ++k) {
    v[k] = _mm256_loadu_ps(x + 8 * k);
    mx = _mm256_max_ps(mx, _mm256_andnot_ps(sign, v[k]));
  }
  // Non-finite anywhere: |x| > FLT_MAX or unordered (NaN) -> scalar path.
  __m256 bad = _mm256_setzero_ps();
  for (int k = 0; k < 4; ++k)
    bad = _mm256_or_ps(bad, _mm256_cmp_ps(_mm256_andnot_ps(sign, v[k]), _mm256_set1_ps(3.40282347e+38f), _CMP_NLE_UQ));
  if (_mm256_movemask_ps(bad) != 0) return false;
  __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(mx), _mm256_extractf128_ps(mx, 1));
  m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
  m4 = _mm_max_ss(m4, _mm_shuffle_ps(m4, m4, 1));
  const float amax = _mm_cvtss_f32(m4);
  const float d32 = amax / 127.0f;
  uint16_t dh = uint16_t(_mm_extract_epi16(_mm_cvtps_ph(_mm_set_ss(d32), _MM_FROUND_TO_NEAREST_INT), 0));
  if ((dh & 0x7FFFu) == 0x7C00u) dh = 0x7BFFu;
  const float df = _cvtsh_ss(dh);
  alignas(32) int8_t q[32];
  int sum = 0;
  if (df == 0.0f) {
    std::memset(q, 0, 32);
  } else {
    const __m256 dv = _mm256_set1_ps(df), half = _mm256_set1_ps(0.5f), one = _mm256_set1_ps(1.0f);
    const __m256 hi = _mm256_set1_ps(127.0f), lo = _mm256_set1_ps(-127.0f);
    __m256i qi[4];
    for (int k = 0; k < 4; ++k) {
      const __m256 r = _mm256_div_ps(v[k], dv);
      const __m256 t = _mm256_round_ps(r, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
      const __m256 frac = _mm256_andnot_ps(sign, _mm256_sub_ps(r, t));
      const __m256 step = _mm256_or_ps(_mm256_and_ps(r, sign), one);  // +-1 with r's sign
      __m256 qf = _mm256_add_ps(t, _mm256_and_ps(_mm256_cmp_ps(frac, half, _CMP_GE_OQ), step));
      qf = _mm256_max_ps(_mm256_min_ps(qf, hi), lo);
      qi[k] = _mm256_cvttps_epi32(qf);
    }
    // int32 -> int8 (no saturation: |q| <= 127), restoring element order across the 128-bit lanes.
    const __m256i p01 = _mm256_packs_epi32(qi[0], qi[1]), p23 = _mm256_packs_epi32(qi[2], qi[3]);
    const __m256i p = _mm256_permutevar8x32_epi32(_mm256_packs_epi16(p01, p23), _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
    _mm256_store_si256(reinterpret_cast<__m256i*>(q), p);
    const __m256i s16 = _mm256_maddubs_epi16(_mm256_set1_epi8(1), p);
    const __m256i s32 = _mm256_madd_epi16(s16, _mm256_set1_epi16(1));
    __m128i s4 = _mm_add_epi32(_mm256_castsi256_si128(s32), _mm256_extracti128_si256(s32, 1));
    s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, 0x4E));
    s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, 0xB1));
    sum = _mm_cvtsi128_si32(s4);
  }
  const uint16_t s = uint16_t(_mm_extract_epi16(_mm_cvtps_ph(_mm_set_ss(df * float(sum)), _MM_FROUND_TO_NEAREST_INT), 0));
  std::memcpy(dst, &dh, 2);
  std::memcpy(dst + 2, &s, 2);
  std::memcpy(dst + 4, q, 32);
  return true;
}

}  // namespace ds4::cpu::avx2
