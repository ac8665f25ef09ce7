// kernels/cpu/dot_f32_wide.cpp — fused decode + dot_f32 for F32, F16, BF16, Q8_0, MXFP4, NVFP4,
// NVFP4_S2 and the super-block types Q2_K, IQ2_XXS, IQ2_XS, IQ1_S, IQ1_M (loaders in
// dot_f32_superblocks.inc) weight rows (AVX2 and AVX-512; F8_E4M3_R128 on AVX-512 only) with FP32
// activations:
// dot_f32(decode(w_row), x) bit for bit (kernels/quant/dot_f32.h order) without decoding the row
// to a buffer. F16 -> F32 by F16C / AVX-512F vcvtph2ps, BF16 -> F32 by a 16-bit
// left shift; both conversions are exact (IEEE 754 binary16 and bfloat16 values are all FP32
// values), so the products and the FMA order are those of dot_f32 on the decoded row. The last
// partial 32-element chunk is copied into zeroed buffers (zero padding is exact: fma(0, 0, acc)).
// Family choice as dot_f32.cpp (cpu_features.h selected_backend); the scalar path decodes into a
// thread-local row and calls quant::dot_f32_ref.
// GCC 12's avx512fintrin.h builds its pass-through operands from _mm512_undefined_*(), which
// -W(maybe-)uninitialized flags once inlined into a target("avx512f") function (a false positive).
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include <cstring>
#include <vector>

#include "ds4/result.h"
#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/ops.h"
#include "kernels/cpu/quant_ref.h"
#include "kernels/quant/blocks.h"
#include "kernels/quant/decode.h"
#include "kernels/quant/dot_f32.h"
#include "kernels/quant/grids.h"

namespace ds4::cpu {
namespace {

constexpr int kL = quant::kDotF32Lanes;

#define DS4_T2 __attribute__((target("avx2,fma,f16c")))
// The AVX-512 family is used only where AVX2, FMA and F16C are usable too (cpu_features.cpp).
#define DS4_T5 __attribute__((target("avx512f,avx2,fma,f16c")))

// ---- weight loaders: 8 (ymm, kY) or 16 (zmm) FP32 values from element offset i of a row -------
struct LoadF32 {
  static constexpr int kBlock = 1;
  static constexpr int kSize = 4;
  static constexpr bool kY = true;
  DS4_T2 static __m256 y(const uint8_t* r, int64_t i) { return _mm256_loadu_ps(reinterpret_cast<const float*>(r) + i); }
  DS4_T2 static void y4(const uint8_t* r, int64_t i, __m256* v) {
    for (int j = 0; j < 4; ++j) v[j] = y(r, i + 8 * j);
  }
  DS4_T5 static __m512 z(const uint8_t* r, int64_t i) { return _mm512_loadu_ps(reinterpret_cast<const float*>(r) + i); }
};
struct LoadF16 {
  static constexpr int kBlock = 1;
  static constexpr int kSize = 2;
  static constexpr bool kY = true;
  DS4_T2 static __m256 y(const uint8_t* r, int64_t i) {
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(r + 2 * i)));
  }
  DS4_T2 static void y4(const uint8_t* r, int64_t i, __m256* v) {
    for (int j = 0; j < 4; ++j) v[j] = y(r, i + 8 * j);
  }
  DS4_T5 static __m512 z(const uint8_t* r, int64_t i) { return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(r + 2 * i))); }
};
struct LoadBF16 {
  static constexpr int kBlock = 1;
  static constexpr int kSize = 2;
  static constexpr bool kY = true;
  DS4_T2 static __m256 y(const uint8_t* r, int64_t i) {
    const __m256i u = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(r + 2 * i)));
    return _mm256_castsi256_ps(_mm256_slli_epi32(u, 16));
  }
  DS4_T2 static void y4(const uint8_t* r, int64_t i, __m256* v) {
    for (int j = 0; j < 4; ++j) v[j] = y(r, i + 8 * j);
  }
  DS4_T5 static __m512 z(const uint8_t* r, int64_t i) {
    const __m512i u = _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(r + 2 * i)));
    return _mm512_castsi512_ps(_mm512_slli_epi32(u, 16));
  }
};

// Block types (i is a multiple of 16 (zmm) or 32 (ymm, kY), blocks hold 32, 64, 128 or 256
// elements, so a row never has a partial chunk). Each value is the scalar decode's
// (kernels/quant/decode.h): an exact integer/grid value converted to FP32, times the block scale,
// rounded once.
struct LoadQ8_0 {  // float(qs[j]) * fp16(d)
  static constexpr int kBlock = 32;
  static constexpr int kSize = 0;
  static constexpr bool kY = true;
  /// ymm: the block's 32 values (i % 32 == 0) as four vectors: int8 -> int32 -> FP32 (exact),
  /// times the scale (F16C: exact, as fp16_to_f32; a NaN scale gives the same quiet NaN product).
  DS4_T2 static void y4(const uint8_t* r, int64_t i, __m256* v) {
    const auto* b = reinterpret_cast<const quant::BlockQ8_0*>(r) + i / 32;
    uint16_t dh;
    std::memcpy(&dh, &b->d, 2);
    const __m256 d = _mm256_set1_ps(_cvtsh_ss(dh));
    for (int j = 0; j < 4; ++j)
      v[j] = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(b->qs + 8 * j)))), d);
  }
  /// zmm: the block's 32 values (i % 32 == 0) as two vectors, the scale converted once by F16C
  /// (per 16 values by the scalar fp16_to_f32 before: 10.3 -> 18-19 GB per CPU-second, one token,
  /// Zen 4, bench/README.md).
  static constexpr bool kZ2 = true;
  DS4_T5 static void z2(const uint8_t* r, int64_t i, __m512* v) {
    const auto* b = reinterpret_cast<const quant::BlockQ8_0*>(r) + i / 32;
    uint16_t dh;
    std::memcpy(&dh, &b->d, 2);
    const __m512 d = _mm512_set1_ps(_cvtsh_ss(dh));
    for (int j = 0; j < 2; ++j)
      v[j] = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b->qs + 16 * j)))), d);
  }
};
struct LoadMXFP4 {  // float(kvalues_mxfp4[code]) * 2^(e-128); elements 0..15 low nibbles, 16..31 high
  static constexpr int kBlock = 32;
  static constexpr int kSize = 0;
  static constexpr bool kY = true;
  /// ymm: the block's 32 values (i % 32 == 0) as four vectors: the int8 values of all 32 codes by
  /// two pshufb of the 16-entry table, sign-extended and converted (exact), times the scale.
  DS4_T2 static void y4(const uint8_t* r, int64_t i, __m256* v) {
    const auto* b = reinterpret_cast<const quant::BlockMXFP4*>(r) + i / 32;
    const __m128i table = _mm_loadu_si128(reinterpret_cast<const __m128i*>(quant::host_tables::kvalues_mxfp4_u8));
    const __m128i x = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b->qs)), nib = _mm_set1_epi8(0x0F);
    const __m128i lo = _mm_shuffle_epi8(table, _mm_and_si128(x, nib));                    // elements 0..15
    const __m128i hi = _mm_shuffle_epi8(table, _mm_and_si128(_mm_srli_epi16(x, 4), nib));  // elements 16..31
    const uint32_t e = b->e, bits = e < 2 ? 0x00200000u << e : (e - 1u) << 23;  // e8m0_to_f32_half
    float dv;
    std::memcpy(&dv, &bits, 4);
    const __m256 d = _mm256_set1_ps(dv);
    v[0] = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(lo)), d);
    v[1] = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(lo, 8))), d);
    v[2] = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(hi)), d);
    v[3] = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(hi, 8))), d);
  }
  /// zmm: the block's 32 values (i % 32 == 0) as two vectors: the 16 table values as FP32 in one
  /// register (exact int8 -> FP32), low / high nibbles looked up by vpermps, the scale computed
  /// once (per 16 values, with a guarded static table, before: 3.9 -> 7 GB per CPU-second, one
  /// token, Zen 4, bench/README.md).
  static constexpr bool kZ2 = true;
  DS4_T5 static void z2(const uint8_t* r, int64_t i, __m512* v) {
    const auto* b = reinterpret_cast<const quant::BlockMXFP4*>(r) + i / 32;
    const __m512 table = _mm512_cvtepi32_ps(
        _mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(quant::host_tables::kvalues_mxfp4_u8))));
    const __m512i c = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b->qs)));
    const uint32_t e = b->e, bits = e < 2 ? 0x00200000u << e : (e - 1u) << 23;  // e8m0_to_f32_half
    float dv;
    std::memcpy(&dv, &bits, 4);
    const __m512 d = _mm512_set1_ps(dv);
    v[0] = _mm512_mul_ps(_mm512_permutexvar_ps(_mm512_and_si512(c, _mm512_set1_epi32(0xF)), table), d);
    v[1] = _mm512_mul_ps(_mm512_permutexvar_ps(_mm512_srli_epi32(c, 4), table), d);
  }
};
struct LoadF8R128 {  // e4m3(qs[j]) * 2^(e-127)
  static constexpr int kBlock = 128;
  static constexpr int kSize = 0;
  static constexpr bool kY = false;
  DS4_T5 static __m512 z(const uint8_t* r, int64_t i) {
    const auto* b = reinterpret_cast<const quant::BlockF8R128*>(r) + i / 128;
    const __m512i u = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b->qs + i % 128)));
    const __m512i em = _mm512_and_si512(u, _mm512_set1_epi32(0x7F));
    const __m512i sign = _mm512_slli_epi32(_mm512_and_si512(u, _mm512_set1_epi32(0x80)), 24);
    // normal: (exp << 23 | man << 20) + (120 << 23); exp 0: man * 2^-9 (exact); 0x7F: NaN.
    __m512i bits = _mm512_add_epi32(_mm512_slli_epi32(em, 20), _mm512_set1_epi32(120 << 23));
    const __m512 sub = _mm512_mul_ps(_mm512_cvtepi32_ps(em), _mm512_set1_ps(quant::f32_from_bits(0x3B000000u)));
    bits = _mm512_mask_mov_epi32(bits, _mm512_cmplt_epi32_mask(em, _mm512_set1_epi32(8)), _mm512_castps_si512(sub));
    bits = _mm512_mask_mov_epi32(bits, _mm512_cmpeq_epi32_mask(em, _mm512_set1_epi32(0x7F)), _mm512_set1_epi32(0x7FC00000));
    const __m512 v = _mm512_castsi512_ps(_mm512_or_si512(bits, sign));
    return _mm512_mul_ps(v, _mm512_set1_ps(quant::e8m0_to_f32(b->e)));
  }
};

template <bool kS2>
struct LoadNVFP4Base {  // NVFP4: d[4] | qs[32] (36 bytes); NVFP4_S2: s2 (f32 bits) | the NVFP4 block (40 bytes)
  static constexpr int kBlock = 64;
  static constexpr int kSize = 0;
  static constexpr bool kY = true;
  static constexpr bool kZ2 = true;
  static constexpr int kBytes = kS2 ? 40 : 36;
  /// Chunk i (i % 32 == 0) = sub-blocks 2h, 2h+1 of its block (h = (i % 64) / 32): codes[k] (k = 0,
  /// 1) the 16 int8 table values of sub-block 2h + k in element order (byte j low nibble = element
  /// j, high nibble = element j + 8: unpacklo / unpackhi of the two nibble vectors), sc[k] its
  /// scale ue4m3_to_f32_half(d[2h + k]); *s2 the tensor scale (NVFP4_S2).
  DS4_T2 static void chunk(const uint8_t* r, int64_t i, __m128i* codes, float* sc, float* s2) {
    const uint8_t* b = r + (i / 64) * kBytes;
    if constexpr (kS2) {
      uint32_t u;
      std::memcpy(&u, b, 4);
      *s2 = quant::f32_from_bits(u);
      b += 4;
    }
    const int h = int(i % 64) / 32;
    const __m128i table = _mm_loadu_si128(reinterpret_cast<const __m128i*>(quant::host_tables::kvalues_mxfp4_u8));
    const __m128i x = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b + 4 + 16 * h)), nib = _mm_set1_epi8(0x0F);
    const __m128i lo = _mm_and_si128(x, nib), hi = _mm_and_si128(_mm_srli_epi16(x, 4), nib);
    codes[0] = _mm_shuffle_epi8(table, _mm_unpacklo_epi64(lo, hi));
    codes[1] = _mm_shuffle_epi8(table, _mm_unpackhi_epi64(lo, hi));
    for (int k = 0; k < 2; ++k) sc[k] = quant::ue4m3_to_f32_half(b[2 * h + k]);
  }
  /// decode_nvfp4: float(kvalues[code]) * scale (one rounding); decode_nvfp4_s2: that times s2.
  DS4_T2 static void y4(const uint8_t* r, int64_t i, __m256* v) {
    __m128i c[2];
    float sc[2], s2 = 0.0f;
    chunk(r, i, c, sc, &s2);
    for (int j = 0; j < 4; ++j) {
      const __m128i q = (j & 1) ? _mm_srli_si128(c[j / 2], 8) : c[j / 2];
      v[j] = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(q)), _mm256_set1_ps(sc[j / 2]));
      if constexpr (kS2) v[j] = _mm256_mul_ps(v[j], _mm256_set1_ps(s2));
    }
  }
  DS4_T5 static void z2(const uint8_t* r, int64_t i, __m512* v) {
    __m128i c[2];
    float sc[2], s2 = 0.0f;
    chunk(r, i, c, sc, &s2);
    for (int k = 0; k < 2; ++k) {
      v[k] = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(c[k])), _mm512_set1_ps(sc[k]));
      if constexpr (kS2) v[k] = _mm512_mul_ps(v[k], _mm512_set1_ps(s2));
    }
  }
  DS4_T5 static __m512 z(const uint8_t* r, int64_t i) {
    __m512 v[2];
    z2(r, i - i % 32, v);
    return v[(i % 32) / 16];
  }
};
using LoadNVFP4 = LoadNVFP4Base<false>;
using LoadNVFP4S2 = LoadNVFP4Base<true>;

#include "kernels/cpu/dot_f32_superblocks.inc"

/// The 32 values of chunk i (i % 32 == 0) as two zmm: the loader's z2 where it has one (one
/// decode of the group's scales), else two z calls.
template <class L>
DS4_T5 inline void z32(const uint8_t* r, int64_t i, __m512* v) {
  if constexpr (requires { L::kZ2; }) {
    L::z2(r, i, v);
  } else {
    v[0] = L::z(r, i);
    v[1] = L::z(r, i + 16);
  }
}

DS4_T2 inline float butterfly_y(const __m256* c) {  // lanes 0..31 in c[0..3]
  const __m256 a = _mm256_add_ps(_mm256_add_ps(c[0], c[2]), _mm256_add_ps(c[1], c[3]));  // off 16, 8
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));        // off 4
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));                                                // off 2
  s = _mm_add_ss(s, _mm_shuffle_ps(s, s, 1));                                            // off 1
  return _mm_cvtss_f32(s);
}
// Note: (c0 + c2) + (c1 + c3) is the butterfly's off 16 (lanes l and l + 16) then off 8.

DS4_T5 inline float butterfly_z(__m512 lo, __m512 hi) {  // lanes 0..15 in lo, 16..31 in hi
  alignas(64) float t[16];
  _mm512_store_ps(t, _mm512_add_ps(lo, hi));                                          // off 16
  const __m256 v = _mm256_add_ps(_mm256_load_ps(t), _mm256_load_ps(t + 8));           // off 8
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));      // off 4
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));                                              // off 2
  s = _mm_add_ss(s, _mm_shuffle_ps(s, s, 1));                                          // off 1
  return _mm_cvtss_f32(s);
}

/// The zero-padded last chunk: weights [i, n) into wbuf, each x[k] [i, n) into xbuf[k].
template <class L, int K>
void pad_tail(const uint8_t* w, const float* const* x, int64_t i, int64_t n, uint8_t* wbuf, float (*xbuf)[kL]) {
  std::memset(wbuf, 0, kL * L::kSize);
  std::memcpy(wbuf, w + i * L::kSize, size_t(n - i) * L::kSize);
  for (int k = 0; k < K; ++k) {
    std::memset(xbuf[k], 0, sizeof(xbuf[k]));
    std::memcpy(xbuf[k], x[k] + i, size_t(n - i) * sizeof(float));
  }
}

/// Software prefetch for the one-token row passes (decode reads every weight from DRAM; without it
/// the fused f32 kernels read Q8_0 / MXFP4 at about half the q8 kernels' rate, single-thread DRAM
/// reads being latency bound): the bytes of chunk i (kL elements) of row `r`, kPrefetchF32 bytes
/// ahead, into L1. `bb` = bytes per L::kBlock elements of the row. Past the row end it touches the
/// next row (a hint, never a fault).
constexpr int64_t kPrefetchF32 = 2048;
template <class L>
inline void prefetch_chunk(const uint8_t* r, int64_t i, int64_t bb) {
  const int64_t cb = bb * kL / L::kBlock;  // bytes of one chunk (>= 1 cache line's worth or less)
  const uint8_t* p = r + i * bb / L::kBlock + kPrefetchF32;
  for (int64_t o = 0; o < cb; o += 64) __builtin_prefetch(p + o, 0, 3);
}

// ---- AVX2 + FMA + F16C ----------------------------------------------------------------------

/// out[k] = dot(decode(w), x[k]) for k < K (K <= 2).
template <class L, int K>
DS4_T2 void shared_w_y(const uint8_t* w, const float* const* x, int64_t n, float* out) {
  __m256 acc[K][4];
  for (int k = 0; k < K; ++k)
    for (int j = 0; j < 4; ++j) acc[k][j] = _mm256_setzero_ps();
  auto chunk = [&](const uint8_t* wr, int64_t wi, const float* const* xp) DS4_T2 {
    __m256 wv[4];
    L::y4(wr, wi, wv);
    #pragma GCC unroll 4  // keep the K accumulators in registers (a rolled loop spills them)
    for (int k = 0; k < K; ++k)
      for (int j = 0; j < 4; ++j) acc[k][j] = _mm256_fmadd_ps(wv[j], _mm256_loadu_ps(xp[k] + 8 * j), acc[k][j]);
  };
  int64_t i = 0;
  for (; i + kL <= n; i += kL) {
    const float* xp[K];
    for (int k = 0; k < K; ++k) xp[k] = x[k] + i;
    chunk(w, i, xp);
  }
  if constexpr (L::kBlock == 1) {
    if (i < n) {
      alignas(32) uint8_t wbuf[kL * 4];
      alignas(32) float xbuf[K][kL];
      pad_tail<L, K>(w, x, i, n, wbuf, xbuf);
      const float* xp[K];
      for (int k = 0; k < K; ++k) xp[k] = xbuf[k];
      chunk(wbuf, 0, xp);
    }
  }
  for (int k = 0; k < K; ++k) out[k] = butterfly_y(acc[k]);
}

/// out[k] = dot(decode(w[k]), x) for k < K (K <= 2).
template <class L, int K>
DS4_T2 void shared_x_y(const uint8_t* const* w, const float* x, int64_t n, float* out, int64_t bb) {
  __m256 acc[K][4];
  for (int k = 0; k < K; ++k)
    for (int j = 0; j < 4; ++j) acc[k][j] = _mm256_setzero_ps();
  auto chunk = [&](const uint8_t* const* wr, int64_t wi, const float* xp) DS4_T2 {
    __m256 xv[4];
    for (int j = 0; j < 4; ++j) xv[j] = _mm256_loadu_ps(xp + 8 * j);
    #pragma GCC unroll 4  // keep the K accumulators in registers (a rolled loop spills them)
    for (int k = 0; k < K; ++k) {
      __m256 wv[4];
      L::y4(wr[k], wi, wv);
      for (int j = 0; j < 4; ++j) acc[k][j] = _mm256_fmadd_ps(wv[j], xv[j], acc[k][j]);
    }
  };
  int64_t i = 0;
  for (; i + kL <= n; i += kL) {
    for (int k = 0; k < K; ++k) prefetch_chunk<L>(w[k], i, bb);
    chunk(w, i, x + i);
  }
  if constexpr (L::kBlock == 1) {
    if (i < n) {
      alignas(32) uint8_t wbuf[K][kL * 4];
      alignas(32) float xbuf[1][kL];
      const uint8_t* wp[K];
      for (int k = 0; k < K; ++k) {
        pad_tail<L, 1>(w[k], &x, i, n, wbuf[k], xbuf);
        wp[k] = wbuf[k];
      }
      chunk(wp, 0, xbuf[0]);
    }
  }
  for (int k = 0; k < K; ++k) out[k] = butterfly_y(acc[k]);
}

// ---- AVX-512F -------------------------------------------------------------------------------

/// out[r * K + k] = dot(decode(w[r]), x[k]) for r < R, k < K (R * K <= 8): each chunk's weight
/// vectors decoded once for the K tokens and its activation vectors loaded once for the R rows
/// (two rows: prefill was bound by those loads, eight per chunk per row). Every output's FMA
/// sequence and butterfly are the same whatever R and K, so are its bits.
template <class L, int R, int K>
DS4_T5 void shared_wx_z(const uint8_t* const* w, const float* const* x, int64_t n, float* out) {
  __m512 lo[R][K], hi[R][K];
  for (int r = 0; r < R; ++r)
    for (int k = 0; k < K; ++k) lo[r][k] = hi[r][k] = _mm512_setzero_ps();
  auto chunk = [&](const uint8_t* const* wr, int64_t wi, const float* const* xp) DS4_T5 {
    __m512 wv[R][2];
    for (int r = 0; r < R; ++r) z32<L>(wr[r], wi, wv[r]);
    #pragma GCC unroll 4  // keep the R x K accumulators in registers (a rolled loop spills them)
    for (int k = 0; k < K; ++k) {
      const __m512 x0 = _mm512_loadu_ps(xp[k]), x1 = _mm512_loadu_ps(xp[k] + 16);
      for (int r = 0; r < R; ++r) {
        lo[r][k] = _mm512_fmadd_ps(wv[r][0], x0, lo[r][k]);
        hi[r][k] = _mm512_fmadd_ps(wv[r][1], x1, hi[r][k]);
      }
    }
  };
  int64_t i = 0;
  for (; i + kL <= n; i += kL) {
    const float* xp[K];
    for (int k = 0; k < K; ++k) xp[k] = x[k] + i;
    chunk(w, i, xp);
  }
  if (i < n) {
    if constexpr (L::kBlock == 1) {
      alignas(64) uint8_t wbuf[R][kL * 4];
      alignas(64) float xbuf[K][kL];
      const uint8_t* wp[R];
      for (int r = 0; r < R; ++r) {
        pad_tail<L, K>(w[r], x, i, n, wbuf[r], xbuf);
        wp[r] = wbuf[r];
      }
      const float* xp[K];
      for (int k = 0; k < K; ++k) xp[k] = xbuf[k];
      chunk(wp, 0, xp);
    }
  }
  for (int r = 0; r < R; ++r)
    for (int k = 0; k < K; ++k) out[r * K + k] = butterfly_z(lo[r][k], hi[r][k]);
}

/// out[k] = dot(decode(w), x[k]) for k < K (K <= 4): shared_wx_z on one row.
template <class L, int K>
DS4_T5 void shared_w_z(const uint8_t* w, const float* const* x, int64_t n, float* out) {
  const uint8_t* const rows[1] = {w};
  shared_wx_z<L, 1, K>(rows, x, n, out);
}

/// out[k] = dot(decode(w[k]), x) for k < K (K <= 4).
template <class L, int K>
DS4_T5 void shared_x_z(const uint8_t* const* w, const float* x, int64_t n, float* out, int64_t bb) {
  __m512 lo[K], hi[K];
  for (int k = 0; k < K; ++k) lo[k] = hi[k] = _mm512_setzero_ps();
  auto chunk = [&](const uint8_t* const* wr, int64_t wi, const float* xp) DS4_T5 {
    const __m512 x0 = _mm512_loadu_ps(xp), x1 = _mm512_loadu_ps(xp + 16);
    #pragma GCC unroll 4  // keep the K accumulators in registers (a rolled loop spills them)
    for (int k = 0; k < K; ++k) {
      __m512 wv[2];
      z32<L>(wr[k], wi, wv);
      lo[k] = _mm512_fmadd_ps(wv[0], x0, lo[k]);
      hi[k] = _mm512_fmadd_ps(wv[1], x1, hi[k]);
    }
  };
  int64_t i = 0;
  for (; i + kL <= n; i += kL) {
    for (int k = 0; k < K; ++k) prefetch_chunk<L>(w[k], i, bb);
    chunk(w, i, x + i);
  }
  if (i < n) {
    if constexpr (L::kBlock == 1) {
      alignas(64) uint8_t wbuf[K][kL * 4];
      alignas(64) float xbuf[1][kL];
      const uint8_t* wp[K];
      for (int k = 0; k < K; ++k) {
        pad_tail<L, 1>(w[k], &x, i, n, wbuf[k], xbuf);
        wp[k] = wbuf[k];
      }
      chunk(wp, 0, xbuf[0]);
    }
  }
  for (int k = 0; k < K; ++k) out[k] = butterfly_z(lo[k], hi[k]);
}

enum class Fam { Scalar, Avx2, Avx512 };

Fam fam() {
  switch (selected_backend()) {
    case DotBackend::Avx512Vnni: return Fam::Avx512;
    case DotBackend::Avx2:
    case DotBackend::AvxVnni: return Fam::Avx2;
    case DotBackend::Scalar: break;
  }
  return Fam::Scalar;
}

/// Scalar: decode (exact) into a thread-local row, then the reference order.
const float* decoded(GgmlType type, const void* w, int64_t n, int slot) {
  if (type == GgmlType::F32) return static_cast<const float*>(w);
  thread_local std::vector<float> buf[4];
  if (buf[slot].size() < size_t(n)) buf[slot].resize(size_t(n));
  dequantize_row(type, w, buf[slot].data(), n);
  return buf[slot].data();
}

template <class L>
void x4_with(Fam f, const uint8_t* w, const float* const* x, int64_t n, float* out) {
  if constexpr (L::kY) {
    if (f != Fam::Avx512) {
      shared_w_y<L, 2>(w, x, n, out);
      return shared_w_y<L, 2>(w, x + 2, n, out + 2);
    }
  }
  shared_w_z<L, 4>(w, x, n, out);
}

template <class L>
void rows4_with(Fam f, const uint8_t* const* w, const float* x, int64_t n, float* out, int64_t bb) {
  if constexpr (L::kY) {
    if (f != Fam::Avx512) {
      shared_x_y<L, 2>(w, x, n, out, bb);
      return shared_x_y<L, 2>(w + 2, x, n, out + 2, bb);
    }
  }
  shared_x_z<L, 4>(w, x, n, out, bb);
}

template <class L>
float one_with(Fam f, const uint8_t* w, const float* x, int64_t n) {
  float r;
  if constexpr (L::kY) {
    if (f != Fam::Avx512) {
      shared_w_y<L, 1>(w, &x, n, &r);
      return r;
    }
  }
  shared_w_z<L, 1>(w, &x, n, &r);
  return r;
}

/// The in-place family for `type` under family f, or Scalar when the row must be decoded first.
Fam fused_family(GgmlType type, Fam f) {
  switch (type) {
    case GgmlType::F32:
    case GgmlType::F16:
    case GgmlType::BF16: return f;
    case GgmlType::Q8_0:
    case GgmlType::MXFP4:
    case GgmlType::Q2_K:
    case GgmlType::IQ2_XXS:
    case GgmlType::IQ2_XS:
    case GgmlType::IQ1_S:
    case GgmlType::IQ1_M:
    case GgmlType::NVFP4:
    case GgmlType::NVFP4_S2: return f;
    case GgmlType::F8_E4M3_R128: return f == Fam::Avx512 ? f : Fam::Scalar;
    default: return Fam::Scalar;
  }
}

/// Calls fn.template operator()<Loader>() for the loader of `type` (a fused type).
template <class Fn>
auto with_loader(GgmlType type, Fn&& fn) {
  switch (type) {
    case GgmlType::F16: return fn(LoadF16{});
    case GgmlType::BF16: return fn(LoadBF16{});
    case GgmlType::Q8_0: return fn(LoadQ8_0{});
    case GgmlType::MXFP4: return fn(LoadMXFP4{});
    case GgmlType::F8_E4M3_R128: return fn(LoadF8R128{});
    case GgmlType::Q2_K: return fn(LoadQ2_K{});
    case GgmlType::IQ2_XXS: return fn(LoadIQ2_XXS{});
    case GgmlType::IQ2_XS: return fn(LoadIQ2_XS{});
    case GgmlType::IQ1_S: return fn(LoadIQ1_S{});
    case GgmlType::IQ1_M: return fn(LoadIQ1_M{});
    case GgmlType::NVFP4: return fn(LoadNVFP4{});
    case GgmlType::NVFP4_S2: return fn(LoadNVFP4S2{});
    default: return fn(LoadF32{});
  }
}

}  // namespace

bool has_fused_dot_f32(GgmlType type) { return fused_family(type, fam()) != Fam::Scalar; }

bool can_dot_row_f32(GgmlType type) {
  return fused_family(type, Fam::Avx512) != Fam::Scalar;
}

float dot_row_f32(GgmlType type, const void* w_row, const float* x, int64_t n) {
  DS4_CHECK(can_dot_row_f32(type));
  const Fam f = fused_family(type, fam());
  const auto* w = static_cast<const uint8_t*>(w_row);
  if (f != Fam::Scalar) return with_loader(type, [&](auto l) { return one_with<decltype(l)>(f, w, x, n); });
  return quant::dot_f32_ref(decoded(type, w_row, n, 0), x, n);
}

void dot_row_f32_x4(GgmlType type, const void* w_row, const float* const* x, int64_t n, float* out) {
  DS4_CHECK(can_dot_row_f32(type));
  const Fam f = fused_family(type, fam());
  const auto* w = static_cast<const uint8_t*>(w_row);
  if (f != Fam::Scalar) return with_loader(type, [&](auto l) { x4_with<decltype(l)>(f, w, x, n, out); });
  const float* wd = decoded(type, w_row, n, 0);
  if (fam() != Fam::Scalar) return dot_f32_x4(wd, x, n, out);
  for (int k = 0; k < 4; ++k) out[k] = quant::dot_f32_ref(wd, x[k], n);
}

bool has_rows2_f32_x4(GgmlType type) { return fused_family(type, fam()) == Fam::Avx512; }

void dot_rows2_f32_x4(GgmlType type, const void* const* w_rows, const float* const* x, int64_t n, float* out) {
  if (!has_rows2_f32_x4(type)) {
    for (int r = 0; r < 2; ++r) dot_row_f32_x4(type, w_rows[r], x, n, out + 4 * r);
    return;
  }
  const auto* const* w = reinterpret_cast<const uint8_t* const*>(w_rows);
  with_loader(type, [&](auto l) { shared_wx_z<decltype(l), 2, 4>(w, x, n, out); });
}

void dot_rows4_f32(GgmlType type, const void* const* w_rows, const float* x, int64_t n, float* out) {
  DS4_CHECK(can_dot_row_f32(type));
  const Fam f = fused_family(type, fam());
  const auto* const* w = reinterpret_cast<const uint8_t* const*>(w_rows);
  if (f != Fam::Scalar)
    return with_loader(type, [&](auto l) {
      using L = decltype(l);
      rows4_with<L>(f, w, x, n, out, row_bytes(type, L::kBlock));
    });
  for (int k = 0; k < 4; ++k) out[k] = quant::dot_f32_ref(decoded(type, w_rows[k], n, k), x, n);
}

}  // namespace ds4::cpu
