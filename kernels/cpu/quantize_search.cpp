// kernels/cpu/quantize_search.cpp — see quantize_search.h.
#include "kernels/cpu/quantize_search.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "kernels/quant/blocks.h"
#include "kernels/quant/decode.h"
#include "kernels/quant/grids.h"

namespace ds4::cpu {

using namespace ds4::quant;

namespace {

template <class Block>
void store(void* dst, int64_t i, const Block& b) {
  std::memcpy(static_cast<uint8_t*>(dst) + i * int64_t(sizeof(Block)), &b, sizeof(Block));
}

float abs_max(const float* x, int n) {
  float amax = 0.0f;
  for (int j = 0; j < n; ++j) amax = std::max(amax, std::fabs(x[j]));
  return amax;
}

/// fp16-stored scale for `v` and its decoded float (clamped to the finite fp16 range).
uint16_t scale_fp16(float v, float* decoded) {
  uint16_t h = f32_to_fp16(v);
  if ((h & 0x7FFF) == 0x7C00) h = uint16_t((h & 0x8000) | 0x7BFF);
  *decoded = fp16_to_f32(h);
  return h;
}

// ---------------------------------------------------------------- Q2_K
void quantize_q2_k_block(const float* x, BlockQ2_K& b) {
  float scale_k[16], min_k[16];
  for (int k = 0; k < 16; ++k) {
    // Q2_K can only represent [-dmin*m, 3*d*sc - dmin*m] with m >= 0, so the range must include
    // 0 from below (mn <= 0) but not from above.
    float mn = 0.0f, mx = -std::numeric_limits<float>::infinity();
    for (int i = 0; i < 16; ++i) {
      mn = std::min(mn, x[16 * k + i]);
      mx = std::max(mx, x[16 * k + i]);
    }
    scale_k[k] = (mx - mn) / 3.0f;
    min_k[k] = -mn;
  }
  float df, dmf;
  b.d = scale_fp16(*std::max_element(scale_k, scale_k + 16) / 15.0f, &df);
  b.dmin = scale_fp16(*std::max_element(min_k, min_k + 16) / 15.0f, &dmf);
  std::memset(b.qs, 0, sizeof b.qs);
  for (int k = 0; k < 16; ++k) {
    const int m0 = dmf > 0.0f ? std::clamp(int(std::lround(min_k[k] / dmf)), 0, 15) : 0;
    float best_err = std::numeric_limits<float>::infinity();
    int best_sc = 0, best_m = 0;
    uint8_t best_q[16] = {};
    for (int m = std::max(0, m0 - 1); m <= std::min(15, m0 + 1); ++m) {
      const float ml = dmf * float(m);
      for (int sc = 0; sc < 16; ++sc) {
        const float dl = df * float(sc);
        float err = 0.0f;
        uint8_t q[16];
        for (int i = 0; i < 16; ++i) {
          const float v = x[16 * k + i];
          int qi = dl > 0.0f ? std::clamp(int(std::lround((v + ml) / dl)), 0, 3) : 0;
          q[i] = uint8_t(qi);
          const float r = v - (dl * float(qi) - ml);
          err += r * r;
        }
        if (err < best_err) {
          best_err = err;
          best_sc = sc;
          best_m = m;
          std::memcpy(best_q, q, 16);
        }
      }
    }
    b.scales[k] = uint8_t(best_sc | (best_m << 4));
    for (int i = 0; i < 16; ++i) {
      const int e = 16 * k + i, h = e / 128, j = (e % 128) / 32, l = e % 32;
      b.qs[32 * h + l] = uint8_t(b.qs[32 * h + l] | (best_q[i] << (2 * j)));
    }
  }
}

// ---------------------------------------------------------------- IQ2 (XXS, XS)
/// An IQ2 grid as floats with per-entry sum of squares (built once per grid).
struct Iq2Grid {
  int n = 0;
  std::vector<float> g;   // n x 8
  std::vector<float> g2;  // sum_j g_j^2
  explicit Iq2Grid(uint64_t (*grid_at)(int), int count) : n(count), g(size_t(count) * 8), g2(size_t(count)) {
    for (int i = 0; i < n; ++i) {
      float s = 0.0f;
      for (int j = 0; j < 8; ++j) {
        const float v = float(grid_u8(grid_at(i), j));
        g[size_t(i) * 8 + size_t(j)] = v;
        s += v * v;
      }
      g2[size_t(i)] = s;
    }
  }
};

const Iq2Grid& grid_xxs() {
  static const Iq2Grid g(iq2xxs_grid, 256);
  return g;
}
const Iq2Grid& grid_xs() {
  static const Iq2Grid g(iq2xs_grid, 512);
  return g;
}

/// Scale-independent terms of one 8-value entry against every grid entry: with a = |x|,
/// err(db, i) = A - 2*db*dot_i + db^2*g2_i (+ 4*db*minp_i when x has an odd number of negative
/// values: the ksigns parity rule forces one sign flip; the cheapest is the smallest a_j*g_j).
struct Iq2Entry {
  float a2 = 0.0f;
  bool odd = false;
  int neg = 0;
  std::vector<float> dot, minp;
  std::vector<int> flip;
  void prepare(const float* x, const Iq2Grid& grid) {
    float a[8];
    int nneg = 0;
    neg = 0;
    a2 = 0.0f;
    for (int j = 0; j < 8; ++j) {
      a[j] = std::fabs(x[j]);
      a2 += a[j] * a[j];
      if (x[j] < 0.0f) {
        neg |= 1 << j;
        ++nneg;
      }
    }
    odd = (nneg & 1) != 0;
    dot.assign(size_t(grid.n), 0.0f);
    minp.assign(size_t(grid.n), 0.0f);
    flip.assign(size_t(grid.n), 0);
    for (int i = 0; i < grid.n; ++i) {
      const float* gi = &grid.g[size_t(i) * 8];
      float d = 0.0f, mp = std::numeric_limits<float>::infinity();
      int fj = 0;
      for (int j = 0; j < 8; ++j) {
        const float p = a[j] * gi[j];
        d += p;
        if (p < mp) {
          mp = p;
          fj = j;
        }
      }
      dot[size_t(i)] = d;
      minp[size_t(i)] = mp;
      flip[size_t(i)] = fj;
    }
  }
  /// Best entry at scale db: returns its squared error, writes grid index and 7-bit sign index.
  float best(const Iq2Grid& grid, float db, int* idx, int* sign7) const {
    float best_err = std::numeric_limits<float>::infinity();
    int bi = 0;
    for (int i = 0; i < grid.n; ++i) {
      float err = a2 - 2.0f * db * dot[size_t(i)] + db * db * grid.g2[size_t(i)];
      if (odd) err += 4.0f * db * minp[size_t(i)];
      if (err < best_err) {
        best_err = err;
        bi = i;
      }
    }
    int pattern = neg;
    if (odd) pattern ^= 1 << flip[size_t(bi)];  // now an even number of sign bits
    *idx = bi;
    *sign7 = pattern & 127;  // ksigns_iq2xs restores bit 7 from the parity
    return best_err;
  }
};

/// Best 4-bit scale for `len` (16 or 32) values encoded as len/8 entries.
int iq2_search(const float* x, int len, float df, const Iq2Grid& grid, int* idx, int* sign7) {
  Iq2Entry e[4];
  for (int l = 0; l < len / 8; ++l) e[l].prepare(x + 8 * l, grid);
  float best = std::numeric_limits<float>::infinity();
  int best_s = 0;
  for (int s = 0; s < 16; ++s) {
    const float db = iq2_scale(df, s);
    float err = 0.0f;
    int ti[4], ts[4];
    for (int l = 0; l < len / 8; ++l) err += e[l].best(grid, db, &ti[l], &ts[l]);
    if (err < best) {
      best = err;
      best_s = s;
      std::copy(ti, ti + len / 8, idx);
      std::copy(ts, ts + len / 8, sign7);
    }
  }
  return best_s;
}

void quantize_iq2_xxs_block(const float* x, BlockIQ2_XXS& b) {
  float df;
  b.d = scale_fp16(abs_max(x, 256) / (43.0f * 31.0f / 8.0f), &df);
  for (int g = 0; g < 8; ++g) {
    int idx[4] = {}, sign7[4] = {};
    const int s = df > 0.0f ? iq2_search(x + 32 * g, 32, df, grid_xxs(), idx, sign7) : 0;
    uint32_t a0 = 0, a1 = uint32_t(s) << 28;
    for (int l = 0; l < 4; ++l) {
      a0 |= uint32_t(idx[l]) << (8 * l);
      a1 |= uint32_t(sign7[l]) << (7 * l);
    }
    b.qs[4 * g] = uint16_t(a0 & 0xFFFF);
    b.qs[4 * g + 1] = uint16_t(a0 >> 16);
    b.qs[4 * g + 2] = uint16_t(a1 & 0xFFFF);
    b.qs[4 * g + 3] = uint16_t(a1 >> 16);
  }
}

void quantize_iq2_xs_block(const float* x, BlockIQ2_XS& b) {
  float df;
  b.d = scale_fp16(abs_max(x, 256) / (43.0f * 31.0f / 8.0f), &df);
  for (int g = 0; g < 8; ++g) {
    int s[2] = {0, 0};
    for (int h = 0; h < 2; ++h) {
      int idx[2] = {}, sign7[2] = {};
      if (df > 0.0f) s[h] = iq2_search(x + 32 * g + 16 * h, 16, df, grid_xs(), idx, sign7);
      for (int l = 0; l < 2; ++l) b.qs[4 * g + 2 * h + l] = uint16_t(idx[l] | (sign7[l] << 9));
    }
    b.scales[g] = uint8_t(s[0] | (s[1] << 4));
  }
}

// ---------------------------------------------------------------- IQ1 (S, M)
/// iq1s_grid as floats with per-entry sums (built once).
struct Iq1Grid {
  std::vector<float> g;       // 2048 x 8, values in {-1, 0, 1}
  std::vector<float> g1, g2;  // sum_j g_j, sum_j g_j^2
  Iq1Grid() : g(2048 * 8), g1(2048), g2(2048) {
    for (int i = 0; i < 2048; ++i) {
      float s1 = 0.0f, s2 = 0.0f;
      for (int j = 0; j < 8; ++j) {
        const float v = float(grid_i8(iq1s_grid(i), j));
        g[size_t(i) * 8 + size_t(j)] = v;
        s1 += v;
        s2 += v * v;
      }
      g1[size_t(i)] = s1;
      g2[size_t(i)] = s2;
    }
  }
};

const Iq1Grid& iq1_grid() {
  static const Iq1Grid g;
  return g;
}

/// Scale-independent terms of 8 values against every iq1s_grid entry:
/// err(dl, delta, i) = X2 - 2*dl*(dot_i + delta*Sx) + dl^2*(g2_i + 2*delta*g1_i + 8*delta^2).
struct Iq1Entry {
  float x2 = 0.0f, sx = 0.0f;
  std::vector<float> dot;
  void prepare(const float* x) {
    const Iq1Grid& grid = iq1_grid();
    x2 = sx = 0.0f;
    for (int j = 0; j < 8; ++j) {
      x2 += x[j] * x[j];
      sx += x[j];
    }
    dot.assign(2048, 0.0f);
    for (int i = 0; i < 2048; ++i) {
      const float* gi = &grid.g[size_t(i) * 8];
      float d = 0.0f;
      for (int j = 0; j < 8; ++j) d += x[j] * gi[j];
      dot[size_t(i)] = d;
    }
  }
  /// Best entry for dl*(grid + delta): returns the squared error, writes the index.
  float best(float dl, float delta, int* idx) const {
    const Iq1Grid& grid = iq1_grid();
    const float c = 8.0f * delta * delta;
    float best_err = std::numeric_limits<float>::infinity();
    int bi = 0;
    for (int i = 0; i < 2048; ++i) {
      const float err = dl * dl * (grid.g2[size_t(i)] + 2.0f * delta * grid.g1[size_t(i)] + c) -
                        2.0f * dl * (dot[size_t(i)] + delta * sx);
      if (err < best_err) {
        best_err = err;
        bi = i;
      }
    }
    *idx = bi;
    return best_err + x2;
  }
};

void quantize_iq1_s_block(const float* x, BlockIQ1_S& b) {
  float df;
  b.d = scale_fp16(abs_max(x, 256) / (15.0f * 1.125f), &df);
  for (int g = 0; g < 8; ++g) {
    Iq1Entry e[4];
    if (df > 0.0f)
      for (int l = 0; l < 4; ++l) e[l].prepare(x + 32 * g + 8 * l);
    float best = std::numeric_limits<float>::infinity();
    int best_idx[4] = {}, best_s = 0;
    bool best_neg = false;
    for (int neg = 0; neg < 2 && df > 0.0f; ++neg) {
      for (int s = 0; s < 8; ++s) {
        const float dl = df * float(2 * s + 1);
        float err = 0.0f;
        int idx[4];
        for (int l = 0; l < 4; ++l) err += e[l].best(dl, neg ? -kIQ1Delta : kIQ1Delta, &idx[l]);
        if (err < best) {
          best = err;
          best_s = s;
          best_neg = neg != 0;
          std::copy(idx, idx + 4, best_idx);
        }
      }
    }
    uint16_t qh = uint16_t((best_s << 12) | (best_neg ? 0x8000 : 0));
    for (int l = 0; l < 4; ++l) {
      b.qs[4 * g + l] = uint8_t(best_idx[l] & 0xFF);
      qh = uint16_t(qh | (((best_idx[l] >> 8) & 7) << (3 * l)));
    }
    b.qh[g] = qh;
  }
}

void quantize_iq1_m_block(const float* x, BlockIQ1_M& b) {
  float df;
  const uint16_t dh = scale_fp16(abs_max(x, 256) / (15.0f * 1.125f), &df);
  uint16_t sc[4] = {0, 0, 0, 0};
  for (int g = 0; g < 8; ++g) {
    int scale[2] = {0, 0};
    uint8_t nib[4] = {0, 0, 0, 0};
    for (int h = 0; h < 2; ++h) {
      Iq1Entry e[2];
      if (df > 0.0f)
        for (int l = 0; l < 2; ++l) e[l].prepare(x + 32 * g + 16 * h + 8 * l);
      float best = std::numeric_limits<float>::infinity();
      for (int s = 0; s < 8 && df > 0.0f; ++s) {
        const float dl = df * float(2 * s + 1);
        float err = 0.0f;
        uint8_t cand_nib[2];
        int cand_idx[2];
        for (int l = 0; l < 2; ++l) {
          int ip, in;
          const float ep = e[l].best(dl, kIQ1Delta, &ip);
          const float en = e[l].best(dl, -kIQ1Delta, &in);
          const bool use_neg = en < ep;
          cand_idx[l] = use_neg ? in : ip;
          cand_nib[l] = uint8_t(((cand_idx[l] >> 8) & 7) | (use_neg ? 8 : 0));
          err += use_neg ? en : ep;
        }
        if (err < best) {
          best = err;
          scale[h] = s;
          for (int l = 0; l < 2; ++l) {
            b.qs[4 * g + 2 * h + l] = uint8_t(cand_idx[l] & 0xFF);
            nib[2 * h + l] = cand_nib[l];
          }
        }
      }
      if (!(df > 0.0f))
        for (int l = 0; l < 2; ++l) b.qs[4 * g + 2 * h + l] = 0;
    }
    b.qh[2 * g] = uint8_t(nib[0] | (nib[1] << 4));
    b.qh[2 * g + 1] = uint8_t(nib[2] | (nib[3] << 4));
    sc[g / 2] = uint16_t(sc[g / 2] | ((scale[0] | (scale[1] << 3)) << (6 * (g % 2))));
  }
  // Spread the fp16 super-scale over the top nibbles (inverse of iq1m_scale_bits).
  for (int k = 0; k < 4; ++k) {
    sc[k] = uint16_t(sc[k] | (((dh >> (4 * k)) & 0xF) << 12));
    b.scales[2 * k] = uint8_t(sc[k] & 0xFF);
    b.scales[2 * k + 1] = uint8_t(sc[k] >> 8);
  }
}

template <class Block, void (*Quant)(const float*, Block&)>
void quantize_rows(const float* src, void* dst, int64_t n) {
  for (int64_t i = 0; i < n / 256; ++i) {
    Block b;
    std::memset(&b, 0, sizeof b);
    Quant(src + 256 * i, b);
    store(dst, i, b);
  }
}

}  // namespace

void quantize_row_q2_k_search(const float* src, void* dst, int64_t n) {
  quantize_rows<BlockQ2_K, quantize_q2_k_block>(src, dst, n);
}
void quantize_row_iq2_xxs_search(const float* src, void* dst, int64_t n) {
  quantize_rows<BlockIQ2_XXS, quantize_iq2_xxs_block>(src, dst, n);
}
void quantize_row_iq2_xs_search(const float* src, void* dst, int64_t n) {
  quantize_rows<BlockIQ2_XS, quantize_iq2_xs_block>(src, dst, n);
}
void quantize_row_iq1_s_search(const float* src, void* dst, int64_t n) {
  quantize_rows<BlockIQ1_S, quantize_iq1_s_block>(src, dst, n);
}
void quantize_row_iq1_m_search(const float* src, void* dst, int64_t n) {
  quantize_rows<BlockIQ1_M, quantize_iq1_m_block>(src, dst, n);
}

}  // namespace ds4::cpu
