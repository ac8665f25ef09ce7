// kernels/cpu/dot_f32.cpp — the FP32 dot product of the numerics contract (see ops.h dot_f32):
// a scalar loop and an AVX version of the same order (separate multiply and add, no FMA), so the
// two are bit-identical.
#include <immintrin.h>

#include "kernels/cpu/ops.h"

namespace ds4::cpu {
namespace {

__attribute__((target("avx"))) float dot_f32_avx(const float* a, const float* b, int64_t n) {
  __m256 acc = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) acc = _mm256_add_ps(acc, _mm256_mul_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i)));
  alignas(32) float s[8];
  _mm256_store_ps(s, acc);
  float r = ((s[0] + s[4]) + (s[1] + s[5])) + ((s[2] + s[6]) + (s[3] + s[7]));
  for (; i < n; ++i) r += a[i] * b[i];
  return r;
}

__attribute__((target("avx"))) void dot_f32_x4_avx(const float* w, const float* const* x, int64_t n, float* out) {
  __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 wv = _mm256_loadu_ps(w + i);
    a0 = _mm256_add_ps(a0, _mm256_mul_ps(wv, _mm256_loadu_ps(x[0] + i)));
    a1 = _mm256_add_ps(a1, _mm256_mul_ps(wv, _mm256_loadu_ps(x[1] + i)));
    a2 = _mm256_add_ps(a2, _mm256_mul_ps(wv, _mm256_loadu_ps(x[2] + i)));
    a3 = _mm256_add_ps(a3, _mm256_mul_ps(wv, _mm256_loadu_ps(x[3] + i)));
  }
  const __m256 acc[4] = {a0, a1, a2, a3};
  for (int k = 0; k < 4; ++k) {
    alignas(32) float s[8];
    _mm256_store_ps(s, acc[k]);
    float r = ((s[0] + s[4]) + (s[1] + s[5])) + ((s[2] + s[6]) + (s[3] + s[7]));
    for (int64_t j = i; j < n; ++j) r += w[j] * x[k][j];
    out[k] = r;
  }
}

__attribute__((target("avx"))) void dot_f32_rows4_avx(const float* const* w, const float* x, int64_t n,
                                                     float* out) {
  __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 xv = _mm256_loadu_ps(x + i);
    a0 = _mm256_add_ps(a0, _mm256_mul_ps(_mm256_loadu_ps(w[0] + i), xv));
    a1 = _mm256_add_ps(a1, _mm256_mul_ps(_mm256_loadu_ps(w[1] + i), xv));
    a2 = _mm256_add_ps(a2, _mm256_mul_ps(_mm256_loadu_ps(w[2] + i), xv));
    a3 = _mm256_add_ps(a3, _mm256_mul_ps(_mm256_loadu_ps(w[3] + i), xv));
  }
  const __m256 acc[4] = {a0, a1, a2, a3};
  for (int k = 0; k < 4; ++k) {
    alignas(32) float s[8];
    _mm256_store_ps(s, acc[k]);
    float r = ((s[0] + s[4]) + (s[1] + s[5])) + ((s[2] + s[6]) + (s[3] + s[7]));
    for (int64_t j = i; j < n; ++j) r += w[k][j] * x[j];
    out[k] = r;
  }
}

float dot_f32_scalar(const float* a, const float* b, int64_t n) {
  float s[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int k = 0; k < 8; ++k) s[k] += a[i + k] * b[i + k];
  float r = ((s[0] + s[4]) + (s[1] + s[5])) + ((s[2] + s[6]) + (s[3] + s[7]));
  for (; i < n; ++i) r += a[i] * b[i];
  return r;
}

const bool kHaveAvx = __builtin_cpu_supports("avx");

}  // namespace

float dot_f32(const float* a, const float* b, int64_t n) {
  return kHaveAvx ? dot_f32_avx(a, b, n) : dot_f32_scalar(a, b, n);
}

void dot_f32_rows4(const float* const* w, const float* x, int64_t n, float* out) {
  if (kHaveAvx) return dot_f32_rows4_avx(w, x, n, out);
  for (int k = 0; k < 4; ++k) out[k] = dot_f32_scalar(w[k], x, n);
}

void dot_f32_x4(const float* w, const float* const* x, int64_t n, float* out) {
  if (kHaveAvx) return dot_f32_x4_avx(w, x, n, out);
  for (int k = 0; k < 4; ++k) out[k] = dot_f32_scalar(w, x[k], n);
}

}  // namespace ds4::cpu
