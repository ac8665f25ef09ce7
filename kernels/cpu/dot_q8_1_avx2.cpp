// kernels/cpu/dot_q8_1_avx2.cpp — AVX2 row-dot kernels (weights x Q8_1 activations) returning the
// same float bits as the scalar reference of kernels/quant/dot_q8_1.h:
//  * integer sums per 32-element chunk are exact (maddubs/madd; all partial sums stay far below
//    the int16/int32 limits for Q8_1 codes in [-127, 127], which is what quantize_row_q8_1 makes);
//  * the float epilogue of eight consecutive chunks is done in one 8-wide vector with the same
//    operations in the same order (mul/sub, never FMA; -ffp-contract=off is global);
//  * the 32 contract lanes live in four 8-wide vectors: chunk b adds into lane b % 32, in order;
//  * the butterfly 16, 8, 4, 2, 1 is the contract's.
// A row whose chunk count is not a multiple of 8 (32-element types only) ends with one group read
// from a zero-padded copy whose extra partials are masked to +0; adding +0 leaves a lane's bits
// unchanged (a lane starts at +0 and so can never be -0).
//
// This unit is compiled with -mavx2 -mfma -mf16c: it must only be entered after run-time detection
// (dot_dispatch.cpp). It deliberately calls no inline function of the shared headers and uses no
// std templates, so no AVX2-compiled copy of a vague-linkage function can replace the scalar one
// at link time; it reads the shared tables (grids.h host_tables) and block layouts only.
// Technique (sign trick for signed int8 x int8 with maddubs, nibble -> int8 look-up by pshufb, grid
// look-ups as 64-bit loads) is the usual one of ggml-org/llama.cpp ggml-cpu/arch/x86/quants.c; the
// code is written anew here. Own choices: grid look-ups as AVX2 gathers of four 64-bit entries,
// IQ2 sign patterns computed (7-bit index + parity), IQ1 delta folded into an 8*grid+-1 table,
// unsigned (offset) weights for MXFP4 and IQ1 with the offset term taken from activation sums
// shared by all rows, multi-row passes (Q8_0/MXFP4: 4 rows share the activation loads; the
// 256-element types decode activation scales and half sums once per row chunk), multipliers
// spread by one pshufb per chunk, and software prefetch (all measured in bench/README.md).
#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "kernels/cpu/dot_dispatch.h"
#include "kernels/quant/blocks.h"
#include "kernels/quant/grids.h"

namespace ds4::cpu {

namespace {

using ds4::quant::BlockIQ1_M;
using ds4::quant::BlockIQ1_S;
using ds4::quant::BlockIQ2_XS;
using ds4::quant::BlockIQ2_XXS;
using ds4::quant::BlockMXFP4;
using ds4::quant::BlockQ2_K;
using ds4::quant::BlockQ8_0;
using ds4::quant::BlockQ8_1;
namespace tables = ds4::quant::host_tables;

constexpr int64_t kActBytes = sizeof(BlockQ8_1);  // 36: d (fp16), s (fp16, unused), qs[32]

/// ksigns_iq2xs[s] == s | (parity(s) << 7) for every s (what ksigns_bytes computes).
constexpr bool ksigns_is_parity() {
  for (int i = 0; i < 128; ++i) {
    int p = 0;
    for (int j = 0; j < 7; ++j) p ^= (i >> j) & 1;
    if (tables::ksigns_iq2xs[i] != (i | (p << 7))) return false;
  }
  return true;
}
static_assert(ksigns_is_parity(), "ksigns_iq2xs is not the 7-bit value plus its parity bit");

/// Bits of ggml's E8M0 "half" decode 2^(e-128) for every e (as quant::e8m0_to_f32_half).
struct E8m0Bits {
  uint32_t v[256] = {};
  constexpr E8m0Bits() {
    for (uint32_t e = 0; e < 256; ++e) v[e] = e < 2 ? (0x00200000u << e) : (e - 1u) << 23;
  }
};
constexpr E8m0Bits kE8m0Bits;

/// MXFP4 values shifted to unsigned bytes: kvalues_mxfp4[code] + kMxfp4Offset (all in [0, 24]).
/// sum (w+12)*q - 12*sum q is the chunk's exact integer sum, and the unsigned form feeds maddubs
/// directly (no sign fix-up per row; the 12*sum q term is shared by all rows of a pass).
constexpr int kMxfp4Offset = 12;
struct Mxfp4Shifted {
  uint8_t v[16] = {};
  constexpr Mxfp4Shifted() {
    for (int i = 0; i < 16; ++i) v[i] = uint8_t(int(int8_t(tables::kvalues_mxfp4_u8[i])) + kMxfp4Offset);
  }
  constexpr bool in_range() const {
    for (int i = 0; i < 16; ++i)
      if (int(int8_t(tables::kvalues_mxfp4_u8[i])) + kMxfp4Offset < 0 || v[i] > 2 * kMxfp4Offset) return false;
    return true;
  }
};
constexpr Mxfp4Shifted kMxfp4Shifted;
static_assert(kMxfp4Shifted.in_range(), "MXFP4 values must lie in [-12, 12] for the shifted form");

/// vpshufb controls that spread the 16 bytes b[0..15] of a 128-bit lane into int16 per chunk g:
/// low 128 bits = b[2g] (x8), high 128 bits = b[2g+1] (x8), zero-extended (0x80 selects zero).
struct PairSpread {
  alignas(32) uint8_t v[8][32] = {};
  constexpr PairSpread() {
    for (int g = 0; g < 8; ++g)
      for (int i = 0; i < 16; ++i) {
        v[g][i] = (i % 2) ? 0x80 : uint8_t(2 * g);
        v[g][16 + i] = (i % 2) ? 0x80 : uint8_t(2 * g + 1);
      }
  }
};
constexpr PairSpread kPairSpread;

/// IQ1 sub-group weights with the delta folded in and shifted to unsigned bytes: entry i
/// (0..2047) = bytes 8*grid_j + 1 + kIq1Offset of iq1s_grid[i], entry 2048 + i = 8*grid_j - 1 +
/// kIq1Offset (8*grid+-1 is in {-9,-7,-1,1,7,9}, so the bytes are in [0, 18]). Summing
/// (8*grid + sgn + 9)*q over a sub-group and subtracting 9*sum q equals the contract's
/// 8*sum grid*q + sgn*sum q exactly; the unsigned form feeds maddubs without sign fix-ups.
constexpr int kIq1Offset = 9;
struct Iq1Weights {
  uint64_t v[4096] = {};
  constexpr Iq1Weights() {
    for (int i = 0; i < 4096; ++i) {
      const uint64_t g = tables::iq1s_grid[i & 2047];
      const int sgn = i < 2048 ? 1 : -1;
      uint64_t e = 0;
      for (int j = 0; j < 8; ++j) {
        const int gj = int(int8_t(uint8_t(g >> (8 * j))));
        e |= uint64_t(uint8_t(8 * gj + sgn + kIq1Offset)) << (8 * j);
      }
      v[i] = e;
    }
  }
};
constexpr Iq1Weights kIq1Weights;
constexpr bool iq1_grid_in_range() {
  for (int i = 0; i < 2048; ++i)
    for (int j = 0; j < 8; ++j) {
      const int gj = int(int8_t(uint8_t(tables::iq1s_grid[i] >> (8 * j))));
      if (8 * gj - 1 + kIq1Offset < 0 || 8 * gj + 1 + kIq1Offset > 2 * kIq1Offset) return false;
    }
  return true;
}
static_assert(iq1_grid_in_range(), "IQ1 grid values must be -1, 0 or 1 for the shifted table");

inline uint16_t load_u16(const uint8_t* p) {
  uint16_t v;
  std::memcpy(&v, p, 2);
  return v;
}
inline uint32_t load_u32(const uint8_t* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

/// fp16 bits -> fp32 (F16C; exact for every finite value and infinity, as fp16_to_f32).
inline float half_to_f32(uint16_t h) { return _cvtsh_ss(h); }

/// int16 weights for chunk g from 16 weight bytes b[0..15] broadcast to both lanes (`bb`):
/// [b[2g] x8 | b[2g+1] x8], i.e. the multipliers of the chunk's two 16-element halves.
inline __m256i pair_spread(__m256i bb, int g) {
  return _mm256_shuffle_epi8(bb, _mm256_load_si256(reinterpret_cast<const __m256i*>(kPairSpread.v[g])));
}

/// ksigns_iq2xs[s] for the 7-bit values s in every byte of `s7`: s | (parity(s) << 7), parity
/// from a 16-entry nibble table (checked against the shared table by kKsignsIsParity).
inline __m256i ksigns_bytes(__m256i s7) {
  const __m256i par = _mm256_setr_epi8(0, -128, -128, 0, -128, 0, 0, -128, -128, 0, 0, -128, 0, -128, -128, 0,  //
                                       0, -128, -128, 0, -128, 0, 0, -128, -128, 0, 0, -128, 0, -128, -128, 0);
  const __m256i nib = _mm256_set1_epi8(0x0F);
  const __m256i lo = _mm256_and_si256(s7, nib), hi = _mm256_and_si256(_mm256_srli_epi16(s7, 4), nib);
  return _mm256_or_si256(s7, _mm256_xor_si256(_mm256_shuffle_epi8(par, lo), _mm256_shuffle_epi8(par, hi)));
}

/// +1 / -1 bytes of four 8-element entries from their 8-bit sign patterns (byte l of the dword at
/// `ks4` = entry l; bit j set = element j negative): qword l = the signs of entry l. The dword is
/// broadcast straight from memory (a load, no shuffle-port work).
inline __m256i sign_vec(const uint32_t* ks4) {
  const __m256i spread = _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1,  //
                                          2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3);
  const __m256i bit = _mm256_set1_epi64x(int64_t(0x8040201008040201u));
  const __m256i b = _mm256_castps_si256(_mm256_broadcast_ss(reinterpret_cast<const float*>(ks4)));
  const __m256i x = _mm256_shuffle_epi8(b, spread);
  return _mm256_or_si256(_mm256_cmpeq_epi8(_mm256_and_si256(x, bit), bit), _mm256_set1_epi8(1));
}

/// fp32 scales of the eight Q8_1 blocks starting at `ap`.
inline __m256 act_scales8(const uint8_t* ap) {
  alignas(16) uint16_t d[8];
  for (int k = 0; k < 8; ++k) d[k] = load_u16(ap + k * kActBytes);
  return _mm256_cvtph_ps(_mm_load_si128(reinterpret_cast<const __m128i*>(d)));
}

/// The 32 int8 codes of Q8_1 block k after `ap`.
inline __m256i act_codes(const uint8_t* ap, int k) {
  return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(ap + k * kActBytes + 4));
}

/// Pairwise products of signed int8 w and q as int16: (w[2i]*q[2i] + w[2i+1]*q[2i+1]).
/// Exact for w in [-128, 127], q in [-127, 127] (|pair| <= 32512).
inline __m256i mul_pairs_i8(__m256i w, __m256i q) {
  return _mm256_maddubs_epi16(_mm256_sign_epi8(w, w), _mm256_sign_epi8(q, w));
}

/// [sum of s[0], ..., sum of s[7]] for eight vectors of int32.
inline __m256i hsum8(const __m256i* s) {
  const __m256i a = _mm256_hadd_epi32(s[0], s[1]);
  const __m256i b = _mm256_hadd_epi32(s[2], s[3]);
  const __m256i c = _mm256_hadd_epi32(s[4], s[5]);
  const __m256i d = _mm256_hadd_epi32(s[6], s[7]);
  const __m256i ab = _mm256_hadd_epi32(a, b);  // [S0..S3 low halves | S0..S3 high halves]
  const __m256i cd = _mm256_hadd_epi32(c, d);
  return _mm256_add_epi32(_mm256_permute2x128_si256(ab, cd, 0x20), _mm256_permute2x128_si256(ab, cd, 0x31));
}

/// The contract's 32 lanes as four 8-wide vectors (lanes 8v..8v+7 in v[v]).
struct Lanes {
  __m256 v[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps()};
  /// Adds the partials of chunks 8*group .. 8*group+7 into their lanes.
  void add(int64_t group, __m256 p) { v[group & 3] = _mm256_add_ps(v[group & 3], p); }
  /// Butterfly 16, 8 (vector), then 4, 2, 1 (scalar), as lane_reduce32.
  float finish() {
    const __m256 a = _mm256_add_ps(v[0], v[2]);  // off 16: lanes 0..7 += 16..23
    const __m256 b = _mm256_add_ps(v[1], v[3]);  //         lanes 8..15 += 24..31
    const __m256 c = _mm256_add_ps(a, b);        // off 8
    alignas(32) float lane[8];
    _mm256_store_ps(lane, c);
    for (int off = 4; off > 0; off >>= 1)
      for (int l = 0; l < off; ++l) lane[l] = lane[l] + lane[l + off];
    return lane[0];
  }
};

// ---- 32-element block types: one call = 8 consecutive blocks (= 8 chunks). ----

/// Q8_0: P = (d*da) * float(sum w*q), for R rows (row r's 8 blocks at w[r]) sharing the
/// activation codes and scales; p[r] = row r's eight partials.
template <int R>
inline void q8_0_group(const uint8_t* const* w, const uint8_t* ap, __m256* p) {
  const __m256 da = act_scales8(ap);
  __m256i q[8];
  for (int k = 0; k < 8; ++k) q[k] = act_codes(ap, k);
  for (int r = 0; r < R; ++r) {
    __m256i s[8];
    alignas(16) uint16_t dw[8];
    for (int k = 0; k < 8; ++k) {
      const uint8_t* blk = w[r] + k * int64_t(sizeof(BlockQ8_0));
      dw[k] = load_u16(blk);
      const __m256i wv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 2));
      s[k] = _mm256_madd_epi16(mul_pairs_i8(wv, q[k]), _mm256_set1_epi16(1));
    }
    const __m256 d = _mm256_cvtph_ps(_mm_load_si128(reinterpret_cast<const __m128i*>(dw)));
    p[r] = _mm256_mul_ps(_mm256_mul_ps(d, da), _mm256_cvtepi32_ps(hsum8(s)));
  }
}

/// MXFP4: P = (e8m0_half(e)*da) * float(sum kvalues[code]*q), for R rows sharing the activations.
/// Two blocks share one vector: the low nibbles of blocks k, k+1 (elements 0..15 of each) fill
/// one 256-bit vector and their high nibbles (elements 16..31) another, each multiplied by the
/// matching activation halves. Weights enter as kvalues+12 (unsigned, kMxfp4Shifted) and the
/// shared term 12*(q pair sums) is subtracted in int16: every int16 stays below 2*2*24*127 = 12192
/// in magnitude and the int32 chunk sum is exactly sum kvalues*q.
template <int R>
inline void mxfp4_group(const uint8_t* const* w, const uint8_t* ap, __m256* out) {
  const __m256i table = _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(kMxfp4Shifted.v)));
  const __m256i nib = _mm256_set1_epi8(0x0F), ones16 = _mm256_set1_epi16(1), ones8 = _mm256_set1_epi8(1);
  constexpr int64_t kB = sizeof(BlockMXFP4);
  const __m256 da = act_scales8(ap);
  __m256i qlo[4], qhi[4], qoff[4];
  for (int k = 0; k < 8; k += 2) {
    const uint8_t* a0 = ap + k * kActBytes;
    qlo[k / 2] = _mm256_loadu2_m128i(reinterpret_cast<const __m128i*>(a0 + kActBytes + 4),
                                     reinterpret_cast<const __m128i*>(a0 + 4));
    qhi[k / 2] = _mm256_loadu2_m128i(reinterpret_cast<const __m128i*>(a0 + kActBytes + 20),
                                     reinterpret_cast<const __m128i*>(a0 + 20));
    // 12 * (q[2i] + q[2i+1] + q[16+2i] + q[16+2i+1]) as int16, pairs laid out as the products.
    const __m256i qs = _mm256_add_epi16(_mm256_maddubs_epi16(ones8, qlo[k / 2]), _mm256_maddubs_epi16(ones8, qhi[k / 2]));
    qoff[k / 2] = _mm256_mullo_epi16(qs, _mm256_set1_epi16(kMxfp4Offset));
  }
  for (int r = 0; r < R; ++r) {
    __m256i s[4];
    alignas(32) uint32_t e[8];
    for (int k = 0; k < 8; k += 2) {
      const uint8_t* b0 = w[r] + k * kB;
      e[k] = kE8m0Bits.v[b0[0]];
      e[k + 1] = kE8m0Bits.v[b0[kB]];
      const __m256i x = _mm256_loadu2_m128i(reinterpret_cast<const __m128i*>(b0 + kB + 1),
                                            reinterpret_cast<const __m128i*>(b0 + 1));
      const __m256i wlo = _mm256_shuffle_epi8(table, _mm256_and_si256(x, nib));
      const __m256i whi = _mm256_shuffle_epi8(table, _mm256_and_si256(_mm256_srli_epi16(x, 4), nib));
      const __m256i p = _mm256_add_epi16(_mm256_maddubs_epi16(wlo, qlo[k / 2]), _mm256_maddubs_epi16(whi, qhi[k / 2]));
      s[k / 2] = _mm256_madd_epi16(_mm256_sub_epi16(p, qoff[k / 2]), ones16);  // [block k: 4 x int32 | block k+1]
    }
    // hadd x3 -> [I0, I2, I4, I6 | I1, I3, I5, I7]; then back to chunk order.
    const __m256i h = _mm256_hadd_epi32(_mm256_hadd_epi32(s[0], s[1]), _mm256_hadd_epi32(s[2], s[3]));
    const __m256i i = _mm256_permutevar8x32_epi32(h, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
    const __m256 d = _mm256_castsi256_ps(_mm256_load_si256(reinterpret_cast<const __m256i*>(e)));
    out[r] = _mm256_mul_ps(_mm256_mul_ps(d, da), _mm256_cvtepi32_ps(i));
  }
}

/// Distance (bytes) at which the row loops prefetch weights: single-thread DRAM reads are latency
/// bound and the hardware prefetchers alone left MXFP4 at ~4.4 GB/s cold vs ~9.5 with this
/// (bench_cpu_kernels, bench/README.md; 2 KiB beat 0.5, 1 and 4 KiB there). Prefetching past
/// the row end is harmless (a hint, never a fault).
constexpr int kPrefetchAhead = 2048;

/// Groups (of 8 blocks) that a multi-row pass also prefetches ahead within each of its own rows
/// (on top of the next pass's rows): 2 measured best, 4 alike or worse, 8 worse (MXFP4 cold,
/// bench/README.md, issue 8).
constexpr int kLeadGroups = 2;

/// Prefetches `bytes` bytes at `p` (one hint per 64 bytes; consecutive calls over a contiguous
/// stream touch every cache line).
inline void prefetch_stream(const uint8_t* p, int bytes) {
  for (int o = 0; o < bytes; o += 64) _mm_prefetch(reinterpret_cast<const char*>(p + o), _MM_HINT_T0);
}
/// Prefetches the `bytes` weight bytes that lie kPrefetchAhead after `p`.
inline void prefetch_ahead(const uint8_t* p, int bytes) { prefetch_stream(p + kPrefetchAhead, bytes); }

/// Rows loop for the 32-element types: R rows at once (row r at wp + r*stride); Group<R>
/// computes chunks b..b+7 of every row from their blocks; out[r] = row r's result. Each row is its
/// own contract accumulation (Lanes), so the bits do not depend on R. Prefetch: one row alone
/// looks kPrefetchAhead bytes ahead; with R interleaved rows a fixed distance would land in the
/// rows being read, so each row prefetches the same position of the next group of R rows, and
/// also kLeadGroups groups ahead of itself (its first kLeadGroups up front): the first pass of a
/// row chunk has no earlier pass that prefetched it, and measured, the own-row lead helped on
/// every pass, not only the first (MXFP4 2-thread cold; bench/README.md, issue 8).
template <int kBlockBytes, int R, void (*Group)(const uint8_t* const*, const uint8_t*, __m256*)>
void rows_blocks32(const uint8_t* wp, int64_t stride, const uint8_t* ap, int64_t n, float* out) {
  const int64_t nb = n / 32;
  Lanes acc[R];
  const uint8_t* w[R];
  __m256 p[R];
  int64_t b = 0;
  constexpr int kLead = kLeadGroups * 8 * kBlockBytes;
  if (R > 1)
    for (int r = 0; r < R; ++r) prefetch_stream(wp + r * stride, kLead);
  for (; b + 8 <= nb; b += 8) {
    for (int r = 0; r < R; ++r) {
      w[r] = wp + r * stride + b * kBlockBytes;
      prefetch_stream(w[r] + (R > 1 ? R * stride : kPrefetchAhead), 8 * kBlockBytes);
      if (R > 1) prefetch_stream(w[r] + kLead, 8 * kBlockBytes);
    }
    Group(w, ap + b * kActBytes, p);
    for (int r = 0; r < R; ++r) acc[r].add(b / 8, p[r]);
  }
  if (b < nb) {
    const int64_t rest = nb - b;
    alignas(32) uint8_t wbuf[R][8 * kBlockBytes] = {};
    alignas(32) uint8_t abuf[8 * kActBytes] = {};
    for (int r = 0; r < R; ++r) {
      std::memcpy(wbuf[r], wp + r * stride + b * kBlockBytes, size_t(rest * kBlockBytes));
      w[r] = wbuf[r];
    }
    std::memcpy(abuf, ap + b * kActBytes, size_t(rest * kActBytes));
    const __m256i idx = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    const __m256 keep = _mm256_castsi256_ps(_mm256_cmpgt_epi32(_mm256_set1_epi32(int(rest)), idx));
    Group(w, abuf, p);
    for (int r = 0; r < R; ++r) acc[r].add(b / 8, _mm256_and_ps(p[r], keep));
  }
  for (int r = 0; r < R; ++r) out[r] = acc[r].finish();
}

/// Row kernel (RowDotFn) from the one-row instance of a rows loop.
template <void (*Rows1)(const uint8_t*, int64_t, const uint8_t*, int64_t, float*)>
float row_from_rows(const void* w, const void* a, int64_t n) {
  float out;
  Rows1(static_cast<const uint8_t*>(w), 0, static_cast<const uint8_t*>(a), n, &out);
  return out;
}

/// Multi-row kernel (RowsDotFn): groups of kRows rows through RowsN, the remainder one by one.
template <int kRows, void (*RowsN)(const uint8_t*, int64_t, const uint8_t*, int64_t, float*),
          void (*Rows1)(const uint8_t*, int64_t, const uint8_t*, int64_t, float*)>
void multi_rows(const void* w, int64_t stride, int64_t rows, const void* a, int64_t n, float* out) {
  const auto* wp = static_cast<const uint8_t*>(w);
  const auto* ap = static_cast<const uint8_t*>(a);
  int64_t r = 0;
  for (; r + kRows <= rows; r += kRows) RowsN(wp + r * stride, stride, ap, n, out + r);
  for (; r < rows; ++r) Rows1(wp + r * stride, stride, ap, n, out + r);
}

constexpr int kRows32 = 4;  // rows per pass of the 32-element types
template <int R>
void rows_q8_0(const uint8_t* w, int64_t s, const uint8_t* a, int64_t n, float* o) {
  rows_blocks32<int(sizeof(BlockQ8_0)), R, q8_0_group<R>>(w, s, a, n, o);
}
template <int R>
void rows_mxfp4(const uint8_t* w, int64_t s, const uint8_t* a, int64_t n, float* o) {
  rows_blocks32<int(sizeof(BlockMXFP4)), R, mxfp4_group<R>>(w, s, a, n, o);
}
float row_q8_0(const void* w, const void* a, int64_t n) { return row_from_rows<rows_q8_0<1>>(w, a, n); }
float row_mxfp4(const void* w, const void* a, int64_t n) { return row_from_rows<rows_mxfp4<1>>(w, a, n); }

// ---- 256-element super-block types: one super-block = 8 chunks = one lane vector. ----

/// Sums of the 16-element halves of `nb` Q8_1 blocks at `ap`: out[2b + h] = sum of codes
/// 16h..16h+15 of block b (int16, |sum| <= 16*127). Computed once per matvec chunk and shared by
/// all its rows.
inline void act_half_sums(const uint8_t* ap, int64_t nb, int16_t* out) {
  const __m256i ones8 = _mm256_set1_epi8(1), ones16 = _mm256_set1_epi16(1);
  int64_t b = 0;
  for (; b + 4 <= nb; b += 4) {
    __m256i t[4];
    for (int k = 0; k < 4; ++k)  // [4-element sums of half 0 | of half 1]
      t[k] = _mm256_madd_epi16(_mm256_maddubs_epi16(ones8, act_codes(ap + b * kActBytes, k)), ones16);
    // [c0 h0, c1 h0, c2 h0, c3 h0 | c0 h1, c1 h1, c2 h1, c3 h1]
    const __m256i h = _mm256_hadd_epi32(_mm256_hadd_epi32(t[0], t[1]), _mm256_hadd_epi32(t[2], t[3]));
    const __m128i lo = _mm256_castsi256_si128(h), hi = _mm256_extracti128_si256(h, 1);
    const __m128i v = _mm_packs_epi32(_mm_unpacklo_epi32(lo, hi), _mm_unpackhi_epi32(lo, hi));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + 2 * b), v);
  }
  for (; b < nb; ++b)
    for (int h = 0; h < 2; ++h) {
      int s = 0;
      for (int j = 0; j < 16; ++j) s += int8_t(ap[b * kActBytes + 4 + 16 * h + j]);
      out[2 * b + h] = int16_t(s);
    }
}

/// Q2_K: P = da * ((d*float(I1)) - (dmin*float(I2))), I1 = sum_k (sc_k&15)*sum code*q,
/// I2 = sum_k (sc_k>>4)*sum q over the two 16-element sub-blocks k of the chunk. The per-half
/// int16 multipliers of chunk g come from one byte shuffle of the scale nibbles; I2 of all eight
/// chunks is one madd of the sixteen min nibbles with the activation half sums `hs` (16 int16 of
/// this super-block, act_half_sums; pairs 2g, 2g+1 = chunk g).
inline __m256 q2_k_super(const uint8_t* blk, const uint8_t* ap, const int16_t* hs, __m256 da) {
  const uint8_t* qs = blk + offsetof(BlockQ2_K, qs);
  const __m256i q2[2] = {_mm256_loadu_si256(reinterpret_cast<const __m256i*>(qs)),
                         _mm256_loadu_si256(reinterpret_cast<const __m256i*>(qs + 32))};
  const __m256i three = _mm256_set1_epi8(3), nib = _mm256_set1_epi8(0x0F);
  const __m128i sc128 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + offsetof(BlockQ2_K, scales)));
  const __m256i sc_lo = _mm256_and_si256(_mm256_broadcastsi128_si256(sc128), nib);
  __m256i s1[8];
  for (int g = 0; g < 8; ++g) {
    const int j = g % 4;
    const __m256i code = _mm256_and_si256(_mm256_srli_epi16(q2[g / 4], 2 * j), three);
    s1[g] = _mm256_madd_epi16(_mm256_maddubs_epi16(code, act_codes(ap, g)), pair_spread(sc_lo, g));
  }
  const __m256i mins = _mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16(sc128, 4), _mm_set1_epi8(0x0F)));
  const __m256i i2 = _mm256_madd_epi16(mins, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(hs)));
  const __m256 d = _mm256_set1_ps(half_to_f32(load_u16(blk + offsetof(BlockQ2_K, d))));
  const __m256 dmin = _mm256_set1_ps(half_to_f32(load_u16(blk + offsetof(BlockQ2_K, dmin))));
  const __m256 t = _mm256_sub_ps(_mm256_mul_ps(d, _mm256_cvtepi32_ps(hsum8(s1))),
                                 _mm256_mul_ps(dmin, _mm256_cvtepi32_ps(i2)));
  return _mm256_mul_ps(da, t);
}

/// IQ2 / IQ1 epilogue: P = ((d*0.125f)*da) * float(I), I = the eight chunk sums, da = their
/// activation scales.
inline __m256 iq_epilogue(float d, __m256 da, __m256i i) {
  const __m256 dd = _mm256_set1_ps(d * 0.125f);
  return _mm256_mul_ps(_mm256_mul_ps(dd, da), _mm256_cvtepi32_ps(i));
}

/// 2x+1 for every int32 (IQ scale codes s -> odd multiplier 2s+1).
inline __m256i odd32(__m256i x) { return _mm256_or_si256(_mm256_slli_epi32(x, 1), _mm256_set1_epi32(1)); }

/// 16 bytes [2*lo(b0)+1, 2*hi(b0)+1, 2*lo(b1)+1, ...] of the 4-bit scale pairs in 8 bytes at p
/// (chunk g's half multipliers at bytes 2g, 2g+1), broadcast to both lanes for pair_spread.
inline __m256i odd_nibble_pairs(const uint8_t* p) {
  const __m128i x = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)), nib = _mm_set1_epi8(0x0F);
  const __m128i v = _mm_unpacklo_epi8(_mm_and_si128(x, nib), _mm_and_si128(_mm_srli_epi16(x, 4), nib));
  return _mm256_broadcastsi128_si256(_mm_or_si128(_mm_add_epi8(v, v), _mm_set1_epi8(1)));
}

/// IQ2_XXS: I = (2s+1) * sum grid*sign*q over the chunk (the multiplier is applied to the eight
/// exact chunk sums at once: the same int32 product). The 32 sign patterns of the super-block are
/// computed in one vector (ksigns_bytes) instead of 32 table look-ups.
inline __m256 iq2_xxs_super(const uint8_t* blk, const uint8_t* ap, const int16_t* hs, __m256 da) {
  const uint64_t* grid = tables::iq2xxs_grid;
  const uint8_t* qs = blk + 2;
  const __m256i ones16 = _mm256_set1_epi16(1);
  // a1 (second 32-bit word of chunk g) = the odd dwords of qs[0..63].
  const __m256i odd = _mm256_setr_epi32(1, 3, 5, 7, 1, 3, 5, 7);
  const __m256i v0 = _mm256_permutevar8x32_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(qs)), odd);
  const __m256i v1 = _mm256_permutevar8x32_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(qs + 32)), odd);
  const __m256i a1 = _mm256_blend_epi32(v0, v1, 0xF0);
  const __m256i mult = odd32(_mm256_srli_epi32(a1, 28));
  // Byte l of lane g = 7-bit sign index l of chunk g (bits 7l..7l+6 of a1), then its pattern.
  const __m256i m7 = _mm256_set1_epi32(127);
  const __m256i i01 = _mm256_or_si256(_mm256_and_si256(a1, m7), _mm256_slli_epi32(_mm256_and_si256(_mm256_srli_epi32(a1, 7), m7), 8));
  const __m256i i23 = _mm256_or_si256(_mm256_slli_epi32(_mm256_and_si256(_mm256_srli_epi32(a1, 14), m7), 16),
                                      _mm256_slli_epi32(_mm256_and_si256(_mm256_srli_epi32(a1, 21), m7), 24));
  alignas(32) uint32_t ks[8];
  _mm256_store_si256(reinterpret_cast<__m256i*>(ks), ksigns_bytes(_mm256_or_si256(i01, i23)));
  __m256i s[8];
  for (int g = 0; g < 8; ++g) {
    const __m128i i4 = _mm_cvtepu8_epi32(_mm_cvtsi32_si128(int(load_u32(qs + 8 * g))));  // grid index bytes
    const __m256i w = _mm256_i32gather_epi64(reinterpret_cast<const long long*>(grid), i4, 8);
    s[g] = _mm256_madd_epi16(_mm256_maddubs_epi16(w, _mm256_sign_epi8(act_codes(ap, g), sign_vec(ks + g))), ones16);
  }
  return iq_epilogue(half_to_f32(load_u16(blk)), da, _mm256_mullo_epi32(hsum8(s), mult));
}

/// IQ2_XS: I = sum_h (2s_h+1) * sum over 16-element half h of grid*sign*q. Sign patterns of the
/// 32 entries (index bits 9..15) computed in one vector.
inline __m256 iq2_xs_super(const uint8_t* blk, const uint8_t* ap, const int16_t* hs, __m256 da) {
  const uint64_t* grid = tables::iq2xs_grid;
  const uint8_t* qs = blk + offsetof(BlockIQ2_XS, qs);
  const __m256i mult = odd_nibble_pairs(blk + offsetof(BlockIQ2_XS, scales));
  const __m256i e0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(qs));       // entries 0..15
  const __m256i e1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(qs + 32));  // entries 16..31
  // packus interleaves the 128-bit lanes: [0..7, 16..23 | 8..15, 24..31]; 0xD8 restores entry order.
  const __m256i s7 = _mm256_permute4x64_epi64(
      _mm256_packus_epi16(_mm256_srli_epi16(e0, 9), _mm256_srli_epi16(e1, 9)), 0xD8);
  alignas(32) uint32_t ks[8];
  _mm256_store_si256(reinterpret_cast<__m256i*>(ks), ksigns_bytes(s7));
  __m256i s[8];
  for (int g = 0; g < 8; ++g) {
    const __m128i e4 = _mm_cvtepu16_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(qs + 8 * g)));
    const __m256i w = _mm256_i32gather_epi64(reinterpret_cast<const long long*>(grid), _mm_and_si128(e4, _mm_set1_epi32(511)), 8);
    const __m256i p = _mm256_maddubs_epi16(w, _mm256_sign_epi8(act_codes(ap, g), sign_vec(ks + g)));
    s[g] = _mm256_madd_epi16(p, pair_spread(mult, g));
  }
  return iq_epilogue(half_to_f32(load_u16(blk)), da, hsum8(s));
}

/// IQ1 weights (kIq1Weights) of four consecutive 12-bit indices (bit 11 = negative delta)
/// stored as uint16 at `idx`.
inline __m256i iq1_weights4(const uint16_t* idx) {
  const __m128i i4 = _mm_cvtepu16_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(idx)));
  return _mm256_i32gather_epi64(reinterpret_cast<const long long*>(kIq1Weights.v), i4, 8);
}

/// IQ1_S: I = (2s+1) * sum_l (8*sum grid*q + sgn*sum q) (multiplier applied to the chunk sums).
/// The 32 kIq1Weights indices qs[4g+l] | ((qh[g] >> 3l) & 7) << 8 | (qh[g] >> 15) << 11 are formed
/// in vectors.
inline __m256 iq1_s_super(const uint8_t* blk, const uint8_t* ap, const int16_t* hs, __m256 da) {
  const uint8_t* qs = blk + offsetof(BlockIQ1_S, qs);
  const uint8_t* qhp = blk + offsetof(BlockIQ1_S, qh);
  const __m128i qh8 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(qhp));
  const __m256i qh32 = _mm256_cvtepu16_epi32(qh8);  // lane g = qh[g]
  const __m256i shifts = _mm256_setr_epi32(0, 3, 6, 9, 0, 3, 6, 9), seven = _mm256_set1_epi32(7);
  const __m256i ones16 = _mm256_set1_epi16(1);
  const auto* table = reinterpret_cast<const long long*>(kIq1Weights.v);
  __m256i s[8];
  for (int v = 0; v < 4; ++v) {  // chunks 2v, 2v+1: their eight indices as int32, gathered 4 at a time
    const __m256i sel = _mm256_setr_epi32(2 * v, 2 * v, 2 * v, 2 * v, 2 * v + 1, 2 * v + 1, 2 * v + 1, 2 * v + 1);
    const __m256i h = _mm256_permutevar8x32_epi32(qh32, sel);
    const __m256i hi = _mm256_and_si256(_mm256_srlv_epi32(h, shifts), seven);
    const __m256i neg = _mm256_and_si256(_mm256_srli_epi32(h, 4), _mm256_set1_epi32(0x800));  // qh bit 15 -> 11
    const __m256i lo = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(qs + 8 * v)));
    const __m256i i32 = _mm256_or_si256(_mm256_or_si256(lo, neg), _mm256_slli_epi32(hi, 8));
    const __m256i w0 = _mm256_i32gather_epi64(table, _mm256_castsi256_si128(i32), 8);
    const __m256i w1 = _mm256_i32gather_epi64(table, _mm256_extracti128_si256(i32, 1), 8);
    s[2 * v] = _mm256_madd_epi16(_mm256_maddubs_epi16(w0, act_codes(ap, 2 * v)), ones16);
    s[2 * v + 1] = _mm256_madd_epi16(_mm256_maddubs_epi16(w1, act_codes(ap, 2 * v + 1)), ones16);
  }
  // Chunk sums of q (pairs of half sums) times the table offset 9 = (x << 3) + x.
  const __m256i qsum = _mm256_madd_epi16(_mm256_load_si256(reinterpret_cast<const __m256i*>(hs)), ones16);
  const __m256i t = _mm256_sub_epi32(hsum8(s), _mm256_add_epi32(_mm256_slli_epi32(qsum, 3), qsum));
  const __m256i mult = odd32(_mm256_cvtepu16_epi32(_mm_and_si128(_mm_srli_epi16(qh8, 12), _mm_set1_epi16(7))));
  return iq_epilogue(half_to_f32(load_u16(blk + offsetof(BlockIQ1_S, d))), da, _mm256_mullo_epi32(t, mult));
}

/// IQ1_M: I = sum_h (2s_h+1) * sum_{l in h} (8*sum grid*q + sgn_l*sum q). Entry i = 4g+l takes the
/// nibble i%2 of qh[i/2]: bits 0..2 = grid index bits 8..10, bit 3 = delta sign; the 32
/// kIq1Weights indices are formed in vectors.
inline __m256 iq1_m_super(const uint8_t* blk, const uint8_t* ap, const int16_t* hs, __m256 da) {
  const uint8_t* qs = blk + offsetof(BlockIQ1_M, qs);
  const uint8_t* qhp = blk + offsetof(BlockIQ1_M, qh);
  const uint8_t* scp = blk + offsetof(BlockIQ1_M, scales);
  uint16_t sw[4];
  for (int i = 0; i < 4; ++i) sw[i] = load_u16(scp + 2 * i);
  // fp16 super-scale spread over the top nibbles of the four scale words (as iq1m_scale_bits).
  const uint16_t dbits =
      uint16_t((sw[0] >> 12) | ((sw[1] >> 8) & 0x00F0) | ((sw[2] >> 4) & 0x0F00) | (sw[3] & 0xF000));
  // Half multipliers 2s_h+1 of chunk g at bytes 2g, 2g+1 (3-bit fields of sw[g/2] >> 6*(g%2)).
  alignas(16) uint8_t m[16];
  for (int g = 0; g < 8; ++g) {
    const uint32_t sc = uint32_t(sw[g / 2]) >> (6 * (g % 2));
    m[2 * g] = uint8_t(2 * (sc & 7) + 1);
    m[2 * g + 1] = uint8_t(2 * ((sc >> 3) & 7) + 1);
  }
  const __m256i mult = _mm256_broadcastsi128_si256(_mm_load_si128(reinterpret_cast<const __m128i*>(m)));
  // Nibbles of qh in entry order.
  const __m128i qh = _mm_loadu_si128(reinterpret_cast<const __m128i*>(qhp)), nib = _mm_set1_epi8(0x0F);
  const __m128i qlo = _mm_and_si128(qh, nib), qhi = _mm_and_si128(_mm_srli_epi16(qh, 4), nib);
  const __m256i n = _mm256_set_m128i(_mm_unpackhi_epi8(qlo, qhi), _mm_unpacklo_epi8(qlo, qhi));
  const __m256i q = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(qs));
  // Bytes -> uint16 kIq1Weights index = qs | nibble << 8 (bit 11 = delta sign): unpack within
  // 128-bit lanes gives entries [0..7, 16..23] and [8..15, 24..31]; stored accordingly.
  alignas(32) uint16_t idx[32];
  const __m256i ia = _mm256_unpacklo_epi8(q, n), ib = _mm256_unpackhi_epi8(q, n);
  _mm256_store_si256(reinterpret_cast<__m256i*>(idx), _mm256_permute2x128_si256(ia, ib, 0x20));
  _mm256_store_si256(reinterpret_cast<__m256i*>(idx + 16), _mm256_permute2x128_si256(ia, ib, 0x31));
  __m256i s[8];
  for (int g = 0; g < 8; ++g)
    s[g] = _mm256_madd_epi16(_mm256_maddubs_epi16(iq1_weights4(idx + 4 * g), act_codes(ap, g)), pair_spread(mult, g));
  // 9 * sum_h m_h * (sum q over half h) of every chunk: multipliers [m_g0, m_g1] against half sums.
  const __m256i mq = _mm256_madd_epi16(_mm256_cvtepu8_epi16(_mm_load_si128(reinterpret_cast<const __m128i*>(m))),
                                       _mm256_load_si256(reinterpret_cast<const __m256i*>(hs)));
  const __m256i i = _mm256_sub_epi32(hsum8(s), _mm256_add_epi32(_mm256_slli_epi32(mq, 3), mq));
  return iq_epilogue(half_to_f32(dbits), da, i);
}

/// Longest dot (chunks of 32) whose activation scales and half sums the rows kernels keep on the
/// stack; longer rows compute them per super-block.
constexpr int64_t kMaxChunks = 512;

/// fp32 scales of the `nb` (multiple of 8) Q8_1 blocks at `ap`.
inline void act_scales_all(const uint8_t* ap, int64_t nb, float* da) {
  for (int64_t b = 0; b < nb; b += 8) _mm256_store_ps(da + b, act_scales8(ap + b * kActBytes));
}

/// Super-block kernel of a 256-element type: (block, its 8 Q8_1 blocks, their 16 half sums, their
/// 8 scales) -> the eight chunk partials.
using SuperFn = __m256 (*)(const uint8_t*, const uint8_t*, const int16_t*, __m256);

/// Rows kernel (RowsDotFn) for the 256-element types: super-block i of a row covers chunks
/// 8i..8i+7 (= lane group i % 4). The activation scales (and half sums when kHalfSums) are
/// computed once for all rows of the call.
template <int kBlockBytes, SuperFn Super, bool kHalfSums>
void rows_blocks256(const void* w, int64_t stride, int64_t rows, const void* a, int64_t n, float* out) {
  const auto* wp = static_cast<const uint8_t*>(w);
  const auto* ap = static_cast<const uint8_t*>(a);
  const int64_t nsb = n / 256;
  if (n / 32 > kMaxChunks) {  // long rows: per super-block
    for (int64_t r = 0; r < rows; ++r) {
      const uint8_t* row = wp + r * stride;
      Lanes acc;
      for (int64_t i = 0; i < nsb; ++i) {
        prefetch_ahead(row + i * kBlockBytes, kBlockBytes);
        const uint8_t* a8 = ap + i * 8 * kActBytes;
        alignas(32) int16_t hs[16];
        if (kHalfSums) act_half_sums(a8, 8, hs);
        acc.add(i, Super(row + i * kBlockBytes, a8, hs, act_scales8(a8)));
      }
      out[r] = acc.finish();
    }
    return;
  }
  alignas(32) float da[kMaxChunks];
  alignas(32) int16_t hs[kHalfSums ? 2 * kMaxChunks : 16];
  act_scales_all(ap, n / 32, da);
  if (kHalfSums) act_half_sums(ap, n / 32, hs);
  for (int64_t r = 0; r < rows; ++r) {
    const uint8_t* row = wp + r * stride;
    Lanes acc;
    for (int64_t i = 0; i < nsb; ++i) {
      prefetch_ahead(row + i * kBlockBytes, kBlockBytes);
      acc.add(i, Super(row + i * kBlockBytes, ap + i * 8 * kActBytes, kHalfSums ? hs + 16 * i : hs,
                       _mm256_load_ps(da + 8 * i)));
    }
    out[r] = acc.finish();
  }
}

/// Row kernel (RowDotFn) = the rows kernel on one row.
template <void (*Rows)(const void*, int64_t, int64_t, const void*, int64_t, float*)>
float one_row(const void* w, const void* a, int64_t n) {
  float out;
  Rows(w, 0, 1, a, n, &out);
  return out;
}

constexpr auto rows_q2_k = rows_blocks256<int(sizeof(BlockQ2_K)), q2_k_super, true>;
constexpr auto rows_iq2_xxs = rows_blocks256<int(sizeof(BlockIQ2_XXS)), iq2_xxs_super, false>;
constexpr auto rows_iq2_xs = rows_blocks256<int(sizeof(BlockIQ2_XS)), iq2_xs_super, false>;
constexpr auto rows_iq1_s = rows_blocks256<int(sizeof(BlockIQ1_S)), iq1_s_super, true>;
constexpr auto rows_iq1_m = rows_blocks256<int(sizeof(BlockIQ1_M)), iq1_m_super, true>;

}  // namespace

RowDotFn avx2::row_dot(GgmlType type) {
  switch (type) {
    case GgmlType::Q8_0: return row_q8_0;
    case GgmlType::MXFP4: return row_mxfp4;
    case GgmlType::Q2_K: return one_row<rows_q2_k>;
    case GgmlType::IQ2_XXS: return one_row<rows_iq2_xxs>;
    case GgmlType::IQ2_XS: return one_row<rows_iq2_xs>;
    case GgmlType::IQ1_S: return one_row<rows_iq1_s>;
    case GgmlType::IQ1_M: return one_row<rows_iq1_m>;
    default: return nullptr;
  }
}

RowsDotFn avx2::rows_dot(GgmlType type) {
  switch (type) {
    case GgmlType::Q8_0: return multi_rows<kRows32, rows_q8_0<kRows32>, rows_q8_0<1>>;
    case GgmlType::MXFP4: return multi_rows<kRows32, rows_mxfp4<kRows32>, rows_mxfp4<1>>;
    case GgmlType::Q2_K: return rows_q2_k;
    case GgmlType::IQ2_XXS: return rows_iq2_xxs;
    case GgmlType::IQ2_XS: return rows_iq2_xs;
    case GgmlType::IQ1_S: return rows_iq1_s;
    case GgmlType::IQ1_M: return rows_iq1_m;
    default: return nullptr;
  }
}

}  // namespace ds4::cpu
