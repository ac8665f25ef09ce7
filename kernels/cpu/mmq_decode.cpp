// kernels/cpu/mmq_decode.cpp — the decoded weight form of kernels/cpu/mmq.h (scalar, built without
// SIMD flags: it calls the shared inline decoders of kernels/quant/), the per-token activation
// sums, and the run-time choice of the SIMD tile kernel.
#include <cstdint>
#include <cstring>

#include "ds4/result.h"
#include "kernels/cpu/dot_dispatch.h"
#include "kernels/cpu/mmq.h"
#include "kernels/quant/blocks.h"
#include "kernels/quant/decode.h"
#include "kernels/quant/grids.h"

namespace ds4::cpu {

using namespace ds4::quant;

namespace {

/// Offsets of the signed-weight types (u = w + off must lie in [0, 127] so that a pair of
/// u8 x s8 products stays inside int16 for Q8_1 codes in [-127, 127]; checked below).
constexpr int kOffIq2 = 43, kOffIq1 = 9, kOffMxfp4 = 12, kOffQ4_0 = 8, kOffQ6_K = 32;

constexpr int max_grid_u8(const uint64_t* g, int n) {
  int m = 0;
  for (int i = 0; i < n; ++i)
    for (int j = 0; j < 8; ++j) m = int((g[i] >> (8 * j)) & 0xFF) > m ? int((g[i] >> (8 * j)) & 0xFF) : m;
  return m;
}
static_assert(max_grid_u8(host_tables::iq2xxs_grid, 256) <= kOffIq2 && max_grid_u8(host_tables::iq2xs_grid, 512) <= kOffIq2 &&
                  max_grid_u8(host_tables::iq2s_grid, 1024) <= kOffIq2,
              "IQ2 grid bytes must not exceed the IQ2 offset");
constexpr bool mxfp4_in_range() {
  for (int i = 0; i < 16; ++i) {
    const int v = int(int8_t(host_tables::kvalues_mxfp4_u8[i]));
    if (v < -kOffMxfp4 || v > kOffMxfp4) return false;
  }
  return true;
}
static_assert(mxfp4_in_range(), "MXFP4 values must lie in [-12, 12]");

template <class Block>
Block load_block(const uint8_t* p) {
  Block b;
  std::memcpy(&b, p, sizeof(Block));
  return b;
}

/// Spreads multipliers (m0 for pairs 0..7 = elements 0..15, m1 for pairs 8..15) into g.m[c].
void spread(MmqGroup& g, int c, int m0, int m1) {
  for (int p = 0; p < 8; ++p) {
    g.m[c][p] = int16_t(m0);
    g.m[c][8 + p] = int16_t(m1);
  }
}

/// Chunk c of `g` from 32 signed element values v (the contract's), offset `off`, half multipliers.
void put_chunk(MmqGroup& g, int c, const int* v, int off, int m0, int m1) {
  for (int j = 0; j < 32; ++j) g.u[c][j] = uint8_t(v[j] + off);
  spread(g, c, m0, m1);
  g.corr[2 * c] = int16_t(off * m0);
  g.corr[2 * c + 1] = int16_t(off * m1);
}

/// The IQ2 sign-applied grid values of entry (grid, signs) into v[0..7] (dot_q8_1.h iq2_entry).
void iq2_values(uint64_t grid, uint8_t signs, int* v) {
  for (int j = 0; j < 8; ++j) v[j] = (signs >> j) & 1 ? -grid_u8(grid, j) : grid_u8(grid, j);
}

/// IQ1 folded values 8*grid + sgn of one 8-element sub-group into v[0..7].
void iq1_values(uint64_t grid, bool neg, int* v) {
  for (int j = 0; j < 8; ++j) v[j] = 8 * grid_i8(grid, j) + (neg ? -1 : 1);
}

void decode_super(GgmlType type, const uint8_t* p, MmqGroup& g) {
  switch (type) {
    case GgmlType::Q2_K: {
      const auto b = load_block<BlockQ2_K>(p);
      for (int c = 0; c < 8; ++c) {
        int v[32];
        for (int j = 0; j < 32; ++j) v[j] = q2_k_code(b, 32 * c + j);
        const uint8_t s0 = q2_k_scale(b, 32 * c), s1 = q2_k_scale(b, 32 * c + 16);
        put_chunk(g, c, v, 0, s0 & 0xF, s1 & 0xF);
        g.nmin[2 * c] = int16_t(s0 >> 4);
        g.nmin[2 * c + 1] = int16_t(s1 >> 4);
        g.d[c] = fp16_to_f32(b.d);
        g.dmin[c] = fp16_to_f32(b.dmin);
      }
      return;
    }
    case GgmlType::Q4_K: {
      const auto b = load_block<BlockQ4_K>(p);
      for (int c = 0; c < 8; ++c) {
        int sc, m, v[32];
        q4_k_scale_min(b, c, &sc, &m);
        for (int j = 0; j < 32; ++j) v[j] = q4_k_code(b, c, j);
        put_chunk(g, c, v, 0, 1, 1);
        g.mult[c] = sc;
        g.nmin[2 * c] = g.nmin[2 * c + 1] = int16_t(m);
        g.d[c] = fp16_to_f32(b.d);
        g.dmin[c] = fp16_to_f32(b.dmin);
      }
      return;
    }
    case GgmlType::Q6_K: {
      const auto b = load_block<BlockQ6_K>(p);
      for (int c = 0; c < 8; ++c) {
        int v[32];
        for (int j = 0; j < 32; ++j) v[j] = q6_k_code(b, 32 * c + j);
        put_chunk(g, c, v, kOffQ6_K, q6_k_scale(b, 32 * c), q6_k_scale(b, 32 * c + 16));
        g.d[c] = fp16_to_f32(b.d);
      }
      return;
    }
    case GgmlType::IQ2_XXS: {
      const auto b = load_block<BlockIQ2_XXS>(p);
      for (int c = 0; c < 8; ++c) {
        const uint32_t a0 = uint32_t(b.qs[4 * c]) | (uint32_t(b.qs[4 * c + 1]) << 16);
        const uint32_t a1 = uint32_t(b.qs[4 * c + 2]) | (uint32_t(b.qs[4 * c + 3]) << 16);
        int v[32];
        for (int l = 0; l < 4; ++l)
          iq2_values(iq2xxs_grid(int((a0 >> (8 * l)) & 0xFF)), ksigns_iq2xs(int((a1 >> (7 * l)) & 127)), v + 8 * l);
        put_chunk(g, c, v, kOffIq2, 1, 1);
        g.mult[c] = int32_t(2 * (a1 >> 28) + 1);
        g.d[c] = fp16_to_f32(b.d) * 0.125f;
      }
      return;
    }
    case GgmlType::IQ2_XS: {
      const auto b = load_block<BlockIQ2_XS>(p);
      for (int c = 0; c < 8; ++c) {
        int v[32];
        for (int l = 0; l < 4; ++l) {
          const uint16_t q = b.qs[4 * c + l];
          iq2_values(iq2xs_grid(q & 511), ksigns_iq2xs(q >> 9), v + 8 * l);
        }
        put_chunk(g, c, v, kOffIq2, 2 * (b.scales[c] & 0xF) + 1, 2 * (b.scales[c] >> 4) + 1);
        g.d[c] = fp16_to_f32(b.d) * 0.125f;
      }
      return;
    }
    case GgmlType::IQ2_S: {
      const auto b = load_block<BlockIQ2_S>(p);
      for (int c = 0; c < 8; ++c) {
        int v[32];
        for (int l = 0; l < 4; ++l) iq2_values(iq2s_grid(iq2_s_index(b, c, l)), b.qs[32 + 4 * c + l], v + 8 * l);
        put_chunk(g, c, v, kOffIq2, 2 * (b.scales[c] & 0xF) + 1, 2 * (b.scales[c] >> 4) + 1);
        g.d[c] = fp16_to_f32(b.d) * 0.125f;
      }
      return;
    }
    case GgmlType::IQ1_S: {
      const auto b = load_block<BlockIQ1_S>(p);
      for (int c = 0; c < 8; ++c) {
        const uint16_t qh = b.qh[c];
        int v[32];
        for (int l = 0; l < 4; ++l)
          iq1_values(iq1s_grid(b.qs[4 * c + l] | (((qh >> (3 * l)) & 7) << 8)), (qh & 0x8000) != 0, v + 8 * l);
        put_chunk(g, c, v, kOffIq1, 1, 1);
        g.mult[c] = int32_t(2 * ((qh >> 12) & 7) + 1);
        g.d[c] = fp16_to_f32(b.d) * 0.125f;
      }
      return;
    }
    case GgmlType::IQ1_M: {
      const auto b = load_block<BlockIQ1_M>(p);
      const float d = fp16_to_f32(iq1m_scale_bits(b)) * 0.125f;
      for (int c = 0; c < 8; ++c) {
        int v[32];
        for (int l = 0; l < 4; ++l) iq1_values(iq1s_grid(iq1_m_index(b, c, l)), iq1_m_delta_neg(b, c, l), v + 8 * l);
        put_chunk(g, c, v, kOffIq1, 2 * iq1_m_scale(b, c, 0) + 1, 2 * iq1_m_scale(b, c, 1) + 1);
        g.d[c] = d;
      }
      return;
    }
    default: DS4_CHECK(false);
  }
}

/// Block c (of up to 8) of a 32-element-block type into chunk c of g.
void decode_block32(GgmlType type, const uint8_t* p, MmqGroup& g, int c) {
  int v[32];
  switch (type) {
    case GgmlType::Q8_0: {
      const auto b = load_block<BlockQ8_0>(p);
      auto* ws = reinterpret_cast<int8_t*>(g.m[c]);
      for (int j = 0; j < 32; ++j) {
        ws[j] = b.qs[j];
        g.u[c][j] = uint8_t(b.qs[j] < 0 ? -int(b.qs[j]) : int(b.qs[j]));
      }
      g.d[c] = fp16_to_f32(b.d);
      return;
    }
    case GgmlType::Q4_0: {
      const auto b = load_block<BlockQ4_0>(p);
      for (int j = 0; j < 16; ++j) {
        v[j] = (b.qs[j] & 0xF) - 8;
        v[j + 16] = (b.qs[j] >> 4) - 8;
      }
      put_chunk(g, c, v, kOffQ4_0, 1, 1);
      g.d[c] = fp16_to_f32(b.d);
      return;
    }
    case GgmlType::MXFP4: {
      const auto b = load_block<BlockMXFP4>(p);
      for (int j = 0; j < 32; ++j) v[j] = kvalues_mxfp4(mxfp4_code(b, j));
      put_chunk(g, c, v, kOffMxfp4, 1, 1);
      g.d[c] = e8m0_to_f32_half(b.e);
      return;
    }
    default: DS4_CHECK(false);
  }
}

bool is_block32(GgmlType t) { return t == GgmlType::Q8_0 || t == GgmlType::Q4_0 || t == GgmlType::MXFP4; }

}  // namespace

bool mmq_has_decode(GgmlType type) {
  switch (type) {
    case GgmlType::Q4_0:
    case GgmlType::Q8_0:
    case GgmlType::MXFP4:
    case GgmlType::Q2_K:
    case GgmlType::Q4_K:
    case GgmlType::Q6_K:
    case GgmlType::IQ2_XXS:
    case GgmlType::IQ2_XS:
    case GgmlType::IQ2_S:
    case GgmlType::IQ1_S:
    case GgmlType::IQ1_M: return true;
    default: return false;
  }
}

void mmq_decode_row(GgmlType type, const void* w_row, int64_t n, MmqGroup* out) {
  DS4_CHECK(mmq_has_decode(type) && n % 32 == 0);
  const auto* p = static_cast<const uint8_t*>(w_row);
  const auto* geo = ggml_type_geometry(uint32_t(type));
  if (is_block32(type)) {
    const int64_t nb = n / 32;
    for (int64_t i = 0; i * 8 < nb; ++i) {
      MmqGroup& g = out[i];
      const int64_t cnt = nb - 8 * i < 8 ? nb - 8 * i : 8;
      if (cnt < 8) std::memset(&g, 0, sizeof(MmqGroup));
      for (int c = 0; c < cnt; ++c) decode_block32(type, p + (8 * i + c) * int64_t(geo->block_bytes), g, c);
      mmq_finish_group(g);
    }
    return;
  }
  DS4_CHECK(n % 256 == 0);
  for (int64_t i = 0; i < n / 256; ++i) {
    decode_super(type, p + i * int64_t(geo->block_bytes), out[i]);
    mmq_finish_group(out[i]);
  }
}

void mmq_finish_group(MmqGroup& g) {
  for (int c = 0; c < 8; ++c) {
    g.mh[0][c] = g.m[c][0];
    g.mh[1][c] = g.m[c][8];
  }
  uint32_t u[8][8], m[8][8];
  std::memcpy(u, g.u, sizeof(u));
  std::memcpy(m, g.m, sizeof(m));
  uint32_t ut[8][8], mt[8][8];
  for (int c = 0; c < 8; ++c)
    for (int k = 0; k < 8; ++k) {
      ut[k][c] = u[c][k];
      mt[k][c] = m[c][k];
    }
  std::memcpy(g.u, ut, sizeof(ut));
  std::memcpy(g.m, mt, sizeof(mt));
}

void mmq_token_sums(const uint8_t* xq_row, int64_t n, float* da_row, int16_t* hs_row, uint8_t* qt_row) {
  const int64_t nc = n / 32, nc8 = (nc + 7) / 8 * 8;
  for (int64_t b = 0; b < nc8; ++b) {
    uint8_t* qt = qt_row + (b / 8) * 256 + (b % 8) * 4;
    if (b >= nc) {
      da_row[b] = 0.0f;
      hs_row[2 * b] = hs_row[2 * b + 1] = 0;
      for (int k = 0; k < 8; ++k) std::memset(qt + 32 * k, 0, 4);
      continue;
    }
    const auto blk = load_block<BlockQ8_1>(xq_row + b * int64_t(sizeof(BlockQ8_1)));
    for (int k = 0; k < 8; ++k) std::memcpy(qt + 32 * k, blk.qs + 4 * k, 4);
    da_row[b] = fp16_to_f32(blk.d);
    for (int h = 0; h < 2; ++h) {
      int s = 0;
      for (int j = 0; j < 16; ++j) s += blk.qs[16 * h + j];
      hs_row[2 * b + h] = int16_t(s);
    }
  }
}

MmqFn family_mmq(DotBackend b, GgmlType type) {
  if (!mmq_has_decode(type)) return nullptr;
  switch (b) {
    case DotBackend::Avx2: return avx2::mmq(type);
#ifdef DS4_HAVE_AVXVNNI_KERNELS
    case DotBackend::AvxVnni: return avx_vnni::mmq(type);
#endif
#ifdef DS4_HAVE_AVX512VNNI_KERNELS
    case DotBackend::Avx512Vnni: return avx512_vnni::mmq(type);
#endif
    default: return nullptr;
  }
}

MmqFn simd_mmq(GgmlType type) { return family_mmq(selected_backend(), type); }

namespace {
/// The SIMD decoder of family b for type, or nullptr.
MmqDecodeFn family_decoder(DotBackend b, GgmlType type) {
  switch (b) {
    case DotBackend::Avx2: return avx2::mmq_decoder(type);
#ifdef DS4_HAVE_AVXVNNI_KERNELS
    case DotBackend::AvxVnni: return avx_vnni::mmq_decoder(type);
#endif
#ifdef DS4_HAVE_AVX512VNNI_KERNELS
    case DotBackend::Avx512Vnni: return avx512_vnni::mmq_decoder(type);
#endif
    default: return nullptr;
  }
}
void scalar_decoder_q4_0(const void* w, int64_t n, MmqGroup* o) { mmq_decode_row(GgmlType::Q4_0, w, n, o); }
void scalar_decoder_q4_k(const void* w, int64_t n, MmqGroup* o) { mmq_decode_row(GgmlType::Q4_K, w, n, o); }
void scalar_decoder_q6_k(const void* w, int64_t n, MmqGroup* o) { mmq_decode_row(GgmlType::Q6_K, w, n, o); }
void scalar_decoder_iq2_s(const void* w, int64_t n, MmqGroup* o) { mmq_decode_row(GgmlType::IQ2_S, w, n, o); }
}  // namespace

MmqDecodeFn mmq_decoder(GgmlType type) { return family_mmq_decoder(selected_backend(), type); }

MmqDecodeFn family_mmq_decoder(DotBackend b, GgmlType type) {
  if (const MmqDecodeFn f = family_decoder(b, type)) return f;
  switch (type) {
    case GgmlType::Q4_0: return scalar_decoder_q4_0;
    case GgmlType::Q4_K: return scalar_decoder_q4_k;
    case GgmlType::Q6_K: return scalar_decoder_q6_k;
    case GgmlType::IQ2_S: return scalar_decoder_iq2_s;
    default: return nullptr;
  }
}

int64_t mmq_min_tokens(GgmlType type) {
  // Measured single-thread (256 x 2048 hot, tokens 4..64, min of 9 runs; bench/README.md issue 19
  // prefill): from these token counts decoding once beats the per-token kernels (which decode
  // grids, signs and scales for every token): IQ2_XXS / IQ2_XS / IQ1_S 1.2-1.4x at 8, 2.3-3.9x at
  // 64; IQ1_M, Q8_0, MXFP4 1.3-1.6x at 16, 1.9-2.4x at 64; Q2_K (a fast per-token kernel) 0.9x at
  // 16, 1.2x at 64. Re-measured after the multi-token kernels took several tokens per pass
  // (`bench_cpu_kernels --benchmark_filter=mmq_vs_rows`, 512 x 2048 hot, CPU time per-token /
  // multi-token, Zen 4, 2 rounds): MXFP4 1.4-2.1x and IQ1_M 2.3-2.5x already at 8 tokens (so 8
  // now); Q8_0 1.0-1.1x at 8, IQ2_XXS / IQ1_S 1.2-1.5x at 4, IQ2_XS 1.0-1.1x at 4, Q2_K 0.7-1.0x
  // at 16 (unchanged: gains under 1.5x are left to a measurement on other CPUs).
  // The scalar-decoded types have only the scalar per-token dot: any batch pays.
  if (family_decoder(selected_backend(), type) == nullptr) return 2;
  switch (type) {
    case GgmlType::IQ2_XXS:
    case GgmlType::IQ2_XS:
    case GgmlType::IQ1_S:
    case GgmlType::MXFP4:
    case GgmlType::IQ1_M: return 8;
    case GgmlType::Q2_K: return 32;
    default: return 16;
  }
}

}  // namespace ds4::cpu
