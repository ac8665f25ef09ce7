// kernels/cpu/matmul.cpp — the matmul op (kernels/device.h Device::matmul): exact row decode +
// dot_f32, or Q8_1 activations + the dot_q8_1.h contract (multi-row SIMD kernels of
// kernels/cpu/dot_dispatch.h where the CPU has them: the same bits as vec_dot_q8_1 per row).
#include <algorithm>

#include "ds4/result.h"
#include "kernels/cpu/dot_dispatch.h"
#include "kernels/cpu/ops.h"
#include "kernels/cpu/quant_ref.h"

namespace ds4::cpu {

void matmul_quantize_prepare(int64_t n, int64_t in, bool sums, MatmulScratch& s) {
  DS4_CHECK(in % 32 == 0);
  const int64_t qb = in / 32 * 36, nc8 = (in / 32 + 7) / 8 * 8;
  if (s.xq.size() < static_cast<size_t>(n * qb)) s.xq.resize(static_cast<size_t>(n * qb));
  s.sums = sums;
  if (!sums) return;
  if (s.da.size() < static_cast<size_t>(n * nc8)) s.da.resize(static_cast<size_t>(n * nc8));
  if (s.hs.size() < static_cast<size_t>(2 * n * nc8)) s.hs.resize(static_cast<size_t>(2 * n * nc8));
  if (s.qt.size() < static_cast<size_t>(32 * n * nc8)) s.qt.resize(static_cast<size_t>(32 * n * nc8));
}

void matmul_quantize_rows(const F32Rows& x, int64_t in, MatmulScratch& s, int64_t t0, int64_t t1) {
  const int64_t qb = in / 32 * 36, nc8 = (in / 32 + 7) / 8 * 8;
  for (int64_t t = t0; t < t1; ++t) {
    uint8_t* q = s.xq.data() + t * qb;
    quantize_row_q8_1(x.row(t), q, in);
    if (s.sums) mmq_token_sums(q, in, s.da.data() + t * nc8, s.hs.data() + 2 * t * nc8, s.qt.data() + 32 * t * nc8);
  }
}

void matmul_quantize(const F32Rows& x, int64_t n, int64_t in, MatmulScratch& s) {
  matmul_quantize_prepare(n, in, false, s);
  matmul_quantize_rows(x, in, s, 0, n);
}

MmqTokens matmul_tokens(const MatmulScratch& s, int64_t in) {
  DS4_CHECK(s.sums);
  return {s.xq.data(), in / 32 * 36, s.da.data(), s.hs.data(), (in / 32 + 7) / 8 * 8, s.qt.data()};
}

bool matmul_uses_mmq(GgmlType type, int64_t n) { return simd_mmq(type) != nullptr && n >= mmq_min_tokens(type); }

namespace {

/// Rows [r0, r1) for all n tokens by the multi-token kernel `fn`: blocks of kBlock rows decoded
/// once into a per-thread buffer, then tiles of kTile tokens pass over every decoded row (the
/// tile's activations stay in L1, the block's decoded rows in L2).
void matmul_rows_mmq(MmqFn fn, MmqDecodeFn decode, const WRows& w, const MmqTokens& tok, int64_t n, const F32Rows& y, int64_t r0,
                     int64_t r1) {
  // Rows in blocks of kBlock decoded once; tokens in tiles whose transposed codes (32 bytes per
  // chunk and token) stay within kTileBytes, so that a tile stays in L1 while the block's rows pass
  // over it (the decoded rows come from L2 instead: a quarter of the bytes or less per dot), of 16
  // tokens at most and at least 4 in the AVX-512 family (its widest token pass), 8 in the others
  // (two-token passes: 4 was 4-6 % slower there at 4096 columns). With mmq_x86.inc's register-held
  // lanes, against 16-token tiles and lanes in memory, bench_cpu_kernels mmq/ on Zen 4, 1 thread
  // hot: AVX-512 family +6-25 %, AVX2 family -2..+5 % (bench/README.md, issue 19).
  constexpr int64_t kBlock = 16, kTileBytes = 16384;
  const int64_t nc = w.in / 32, ng = (nc + 7) / 8;
  const int64_t min_tile = selected_backend() == DotBackend::Avx512Vnni ? 4 : 8;
  const int64_t kTile = std::clamp<int64_t>(kTileBytes / (32 * 8 * ng) / 4 * 4, min_tile, 16);
  thread_local std::vector<MmqGroup> dec;
  if (dec.size() < static_cast<size_t>(kBlock * ng)) dec.resize(static_cast<size_t>(kBlock * ng));
  for (int64_t a = r0; a < r1; a += kBlock) {
    const int64_t m = std::min(r1, a + kBlock) - a;
    for (int64_t k = 0; k < m; ++k) decode(w.row(a + k), w.in, dec.data() + k * ng);
    for (int64_t t = 0; t < n; t += kTile) {
      const int64_t te = std::min(n, t + kTile);
      for (int64_t k = 0; k < m; ++k) fn(dec.data() + k * ng, nc, tok, t, te, y.row(t) + a + k, y.ld);
    }
  }
}

/// The f32 branch of matmul_rows.
void matmul_rows_f32(const WRows& w, const F32Rows& x, int64_t n, const F32Rows& y, int64_t r0, int64_t r1) {
  const int64_t in = w.in;
  // F32 path, in blocks of up to 16 weight rows held in cache while every token passes; 4 tokens
  // per pass share each weight load (x4; in the AVX-512 family two rows per pass, rows2, so the
  // tokens' activation loads are shared too), fewer than 4 take 4 rows per pass (rows4). Types with a
  // fused decode + dot here (has_fused_dot_f32: F32/F16/BF16/Q8_0/MXFP4/NVFP4/NVFP4_S2/Q2_K/
  // IQ2_XXS/IQ2_XS/IQ1_S/IQ1_M in every SIMD family, F8_E4M3_R128 on AVX-512) are read in place
  // (dot_f32_wide.cpp, dot_f32_superblocks.inc); other types (Q4_0, Q4_K, Q6_K, IQ2_S) are
  // decoded once per block into a per-thread buffer. The results of a pass go to a small local
  // tile and are stored row-contiguously after it. Every y[t][r] is dot_f32(decode(W[r]), x[t]),
  // bit for bit, whatever n.
  constexpr int64_t kBlock = 16;
  thread_local std::vector<float> rows;
  const bool fused = has_fused_dot_f32(w.type);
  const GgmlType wt = fused ? w.type : GgmlType::F32;
  const bool rows2 = has_rows2_f32_x4(wt);
  for (int64_t a = r0; a < r1; a += kBlock) {
    const int64_t m = std::min(r1, a + kBlock) - a;
    const void* wr[kBlock];
    if (fused) {
      for (int64_t k = 0; k < m; ++k) wr[k] = w.row(a + k);
    } else {
      if (rows.size() < static_cast<size_t>(kBlock * in)) rows.resize(static_cast<size_t>(kBlock * in));
      for (int64_t k = 0; k < m; ++k) {
        dequantize_row(w.type, w.row(a + k), rows.data() + k * in, in);
        wr[k] = rows.data() + k * in;
      }
    }
    float tile[4][kBlock];
    int64_t t = 0;
    for (; t + 4 <= n; t += 4) {
      const float* xs[4] = {x.row(t), x.row(t + 1), x.row(t + 2), x.row(t + 3)};
      int64_t k = 0;
      if (rows2) {  // two rows per pass: the tokens' activation loads shared by both
        for (; k + 2 <= m; k += 2) {
          float o[8];
          dot_rows2_f32_x4(wt, wr + k, xs, in, o);
          for (int q = 0; q < 4; ++q) {
            tile[q][k] = o[q];
            tile[q][k + 1] = o[4 + q];
          }
        }
      }
      for (; k < m; ++k) {
        float o[4];
        dot_row_f32_x4(wt, wr[k], xs, in, o);
        for (int q = 0; q < 4; ++q) tile[q][k] = o[q];
      }
      for (int q = 0; q < 4; ++q) std::copy_n(tile[q], m, y.row(t + q) + a);
    }
    for (; t < n; ++t) {
      int64_t k = 0;
      for (; k + 4 <= m; k += 4) dot_rows4_f32(wt, wr + k, x.row(t), in, tile[0] + k);
      for (; k < m; ++k) tile[0][k] = dot_row_f32(wt, wr[k], x.row(t), in);
      std::copy_n(tile[0], m, y.row(t) + a);
    }
  }
}

}  // namespace

void matmul_rows(const WRows& w, const F32Rows& x, const uint8_t* xq, int64_t n, bool q8, const F32Rows& y,
                 int64_t r0, int64_t r1, const MmqTokens* tok) {
  if (q8) {
    matmul_rows_q8_path(w, xq, n, y, r0, r1, tok, tok != nullptr && matmul_uses_mmq(w.type, n));
    return;
  }
  matmul_rows_f32(w, x, n, y, r0, r1);
}

bool matmul_rows_q8_path(const WRows& w, const uint8_t* xq, int64_t n, const F32Rows& y, int64_t r0, int64_t r1,
                         const MmqTokens* tok, bool mmq) {
  const int64_t in = w.in, qb = in / 32 * 36;
  if (mmq) {
    const MmqFn fn = simd_mmq(w.type);
    if (tok == nullptr || fn == nullptr) return false;
    matmul_rows_mmq(fn, mmq_decoder(w.type), w, *tok, n, y, r0, r1);
    return true;
  }
  if (RowsDotFn rows_dot = simd_rows_dot(w.type)) {
    constexpr int64_t kMax = 16;
    float tmp[kMax];
    for (int64_t a = r0; a < r1; a += kMax) {
      const int64_t b = std::min(r1, a + kMax);
      for (int64_t t = 0; t < n; ++t) {
        rows_dot(w.row(a), int64_t(w.row_bytes), b - a, xq + t * qb, in, tmp);
        for (int64_t r = a; r < b; ++r) y.row(t)[r] = tmp[r - a];
      }
    }
    return true;
  }
  for (int64_t r = r0; r < r1; ++r)
    for (int64_t t = 0; t < n; ++t) y.row(t)[r] = vec_dot_q8_1(w.type, w.row(r), xq + t * qb, in);
  return true;
}

}  // namespace ds4::cpu
