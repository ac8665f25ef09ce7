// kernels/cpu/dot_f32.cpp — the FP32 dot product of the numerics contract (kernels/quant/dot_f32.h:
// 32 lanes i % 32, one FMA per element, then the 16..1 butterfly): the scalar reference
// quant::dot_f32_ref, an AVX2+FMA version (4 ymm accumulators = lanes 0..31) and an AVX-512F
// version (2 zmm), all bit-identical. The family follows the CPU kernel policy
// (cpu_features.h selected_backend: Avx512Vnni -> AVX-512, Avx2/AvxVnni -> AVX2+FMA, Scalar -> the
// reference, whose std::fma is the library's correctly rounded fma on a CPU without FMA).
// A partial last chunk is zero-padded by masked loads: fma(0, 0, acc) == acc exactly.
#include <immintrin.h>

#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/ops.h"
#include "kernels/quant/dot_f32.h"

namespace ds4::cpu {
namespace {

// ---- AVX2 + FMA ----------------------------------------------------------------------------

/// Mask for _mm256_maskload_ps: the first clamp(r, 0, 8) lanes.
__attribute__((target("avx2,fma"))) inline __m256i tail_mask8(int64_t r) {
  const __m256i iota = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  const int k = r < 0 ? 0 : (r > 8 ? 8 : static_cast<int>(r));
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(k), iota);
}

/// The butterfly over 8 lanes of one ymm (off = 4, 2, 1), lane 0 returned.
__attribute__((target("avx2,fma"))) inline float butterfly8(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));  // off 4
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));                                          // off 2
  s = _mm_add_ss(s, _mm_shuffle_ps(s, s, 1));                                      // off 1
  return _mm_cvtss_f32(s);
}

/// The butterfly of 32 lanes held as c0 = lanes 0..7, c1 = 8..15, c2 = 16..23, c3 = 24..31.
__attribute__((target("avx2,fma"))) inline float butterfly32(__m256 c0, __m256 c1, __m256 c2, __m256 c3) {
  c0 = _mm256_add_ps(c0, c2);  // off 16
  c1 = _mm256_add_ps(c1, c3);
  c0 = _mm256_add_ps(c0, c1);  // off 8
  return butterfly8(c0);
}

/// out0 = dot(s, p0), out1 = dot(s, p1) in the contract's order (fma is commutative in a*b).
__attribute__((target("avx2,fma"))) void dot_shared2_avx2(const float* s, const float* p0, const float* p1,
                                                          int64_t n, float* out0, float* out1) {
  __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0, b0 = a0, b1 = a0, b2 = a0, b3 = a0;
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    const __m256 s0 = _mm256_loadu_ps(s + i), s1 = _mm256_loadu_ps(s + i + 8);
    const __m256 s2 = _mm256_loadu_ps(s + i + 16), s3 = _mm256_loadu_ps(s + i + 24);
    a0 = _mm256_fmadd_ps(s0, _mm256_loadu_ps(p0 + i), a0);
    a1 = _mm256_fmadd_ps(s1, _mm256_loadu_ps(p0 + i + 8), a1);
    a2 = _mm256_fmadd_ps(s2, _mm256_loadu_ps(p0 + i + 16), a2);
    a3 = _mm256_fmadd_ps(s3, _mm256_loadu_ps(p0 + i + 24), a3);
    b0 = _mm256_fmadd_ps(s0, _mm256_loadu_ps(p1 + i), b0);
    b1 = _mm256_fmadd_ps(s1, _mm256_loadu_ps(p1 + i + 8), b1);
    b2 = _mm256_fmadd_ps(s2, _mm256_loadu_ps(p1 + i + 16), b2);
    b3 = _mm256_fmadd_ps(s3, _mm256_loadu_ps(p1 + i + 24), b3);
  }
  if (i < n) {
    const int64_t r = n - i;
    __m256i m[4];
    for (int k = 0; k < 4; ++k) m[k] = tail_mask8(r - 8 * k);
    __m256 sv[4];
    for (int k = 0; k < 4; ++k) sv[k] = _mm256_maskload_ps(s + i + 8 * k, m[k]);
    a0 = _mm256_fmadd_ps(sv[0], _mm256_maskload_ps(p0 + i, m[0]), a0);
    a1 = _mm256_fmadd_ps(sv[1], _mm256_maskload_ps(p0 + i + 8, m[1]), a1);
    a2 = _mm256_fmadd_ps(sv[2], _mm256_maskload_ps(p0 + i + 16, m[2]), a2);
    a3 = _mm256_fmadd_ps(sv[3], _mm256_maskload_ps(p0 + i + 24, m[3]), a3);
    b0 = _mm256_fmadd_ps(sv[0], _mm256_maskload_ps(p1 + i, m[0]), b0);
    b1 = _mm256_fmadd_ps(sv[1], _mm256_maskload_ps(p1 + i + 8, m[1]), b1);
    b2 = _mm256_fmadd_ps(sv[2], _mm256_maskload_ps(p1 + i + 16, m[2]), b2);
    b3 = _mm256_fmadd_ps(sv[3], _mm256_maskload_ps(p1 + i + 24, m[3]), b3);
  }
  *out0 = butterfly32(a0, a1, a2, a3);
  *out1 = butterfly32(b0, b1, b2, b3);
}

__attribute__((target("avx2,fma"))) float dot_f32_avx2(const float* a, const float* b, int64_t n) {
  __m256 c0 = _mm256_setzero_ps(), c1 = c0, c2 = c0, c3 = c0;
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    c0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), c0);
    c1 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 8), _mm256_loadu_ps(b + i + 8), c1);
    c2 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 16), _mm256_loadu_ps(b + i + 16), c2);
    c3 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 24), _mm256_loadu_ps(b + i + 24), c3);
  }
  if (i < n) {
    const int64_t r = n - i;
    __m256i m0 = tail_mask8(r), m1 = tail_mask8(r - 8), m2 = tail_mask8(r - 16), m3 = tail_mask8(r - 24);
    c0 = _mm256_fmadd_ps(_mm256_maskload_ps(a + i, m0), _mm256_maskload_ps(b + i, m0), c0);
    c1 = _mm256_fmadd_ps(_mm256_maskload_ps(a + i + 8, m1), _mm256_maskload_ps(b + i + 8, m1), c1);
    c2 = _mm256_fmadd_ps(_mm256_maskload_ps(a + i + 16, m2), _mm256_maskload_ps(b + i + 16, m2), c2);
    c3 = _mm256_fmadd_ps(_mm256_maskload_ps(a + i + 24, m3), _mm256_maskload_ps(b + i + 24, m3), c3);
  }
  return butterfly32(c0, c1, c2, c3);
}

// ---- AVX-512F ------------------------------------------------------------------------------

/// The butterfly of 32 lanes held as z0 = lanes 0..15, z1 = 16..31.
__attribute__((target("avx512f"))) inline float butterfly32_zmm(__m512 z0, __m512 z1) {
  // (Through memory: GCC 12's zmm->ymm extract/cast intrinsics warn -Wuninitialized under a
  // target attribute.)
  alignas(64) float t[16];
  _mm512_store_ps(t, _mm512_add_ps(z0, z1));                                           // off 16
  const __m256 v = _mm256_add_ps(_mm256_load_ps(t), _mm256_load_ps(t + 8));            // off 8
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));  // off 4
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));                                          // off 2
  s = _mm_add_ss(s, _mm_shuffle_ps(s, s, 1));                                      // off 1
  return _mm_cvtss_f32(s);
}

/// Opmask of the first clamp(r, 0, 16) lanes.
inline __mmask16 tail_mask16(int64_t r) {
  return r <= 0 ? __mmask16(0) : (r >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << r) - 1u));
}

/// out[k] = dot(s, p[k]) for k < K (K <= 4) in the contract's order.
template <int K>
__attribute__((target("avx512f"))) void dot_shared_avx512(const float* s, const float* const* p, int64_t n,
                                                          float* out) {
  __m512 lo[K], hi[K];
  for (int k = 0; k < K; ++k) lo[k] = hi[k] = _mm512_setzero_ps();
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    const __m512 s0 = _mm512_loadu_ps(s + i), s1 = _mm512_loadu_ps(s + i + 16);
    for (int k = 0; k < K; ++k) {
      lo[k] = _mm512_fmadd_ps(s0, _mm512_loadu_ps(p[k] + i), lo[k]);
      hi[k] = _mm512_fmadd_ps(s1, _mm512_loadu_ps(p[k] + i + 16), hi[k]);
    }
  }
  if (i < n) {
    const __mmask16 m0 = tail_mask16(n - i), m1 = tail_mask16(n - i - 16);
    const __m512 s0 = _mm512_maskz_loadu_ps(m0, s + i), s1 = _mm512_maskz_loadu_ps(m1, s + i + 16);
    for (int k = 0; k < K; ++k) {
      lo[k] = _mm512_fmadd_ps(s0, _mm512_maskz_loadu_ps(m0, p[k] + i), lo[k]);
      hi[k] = _mm512_fmadd_ps(s1, _mm512_maskz_loadu_ps(m1, p[k] + i + 16), hi[k]);
    }
  }
  for (int k = 0; k < K; ++k) out[k] = butterfly32_zmm(lo[k], hi[k]);
}

enum class Family { Scalar, Avx2, Avx512 };

Family family() {
  switch (selected_backend()) {
    case DotBackend::Avx512Vnni: return Family::Avx512;
    case DotBackend::Avx2:
    case DotBackend::AvxVnni: return Family::Avx2;
    case DotBackend::Scalar: break;
  }
  return Family::Scalar;
}

}  // namespace

float dot_f32(const float* a, const float* b, int64_t n) {
  switch (family()) {
    case Family::Avx512: {
      float r;
      dot_shared_avx512<1>(a, &b, n, &r);
      return r;
    }
    case Family::Avx2: return dot_f32_avx2(a, b, n);
    case Family::Scalar: break;
  }
  return quant::dot_f32_ref(a, b, n);
}

void dot_f32_rows4(const float* const* w, const float* x, int64_t n, float* out) {
  switch (family()) {
    case Family::Avx512: return dot_shared_avx512<4>(x, w, n, out);
    case Family::Avx2:
      dot_shared2_avx2(x, w[0], w[1], n, &out[0], &out[1]);
      return dot_shared2_avx2(x, w[2], w[3], n, &out[2], &out[3]);
    case Family::Scalar: break;
  }
  for (int k = 0; k < 4; ++k) out[k] = quant::dot_f32_ref(w[k], x, n);
}

void dot_f32_x4(const float* w, const float* const* x, int64_t n, float* out) {
  switch (family()) {
    case Family::Avx512: return dot_shared_avx512<4>(w, x, n, out);
    case Family::Avx2:
      dot_shared2_avx2(w, x[0], x[1], n, &out[0], &out[1]);
      return dot_shared2_avx2(w, x[2], x[3], n, &out[2], &out[3]);
    case Family::Scalar: break;
  }
  for (int k = 0; k < 4; ++k) out[k] = quant::dot_f32_ref(w, x[k], n);
}

}  // namespace ds4::cpu
