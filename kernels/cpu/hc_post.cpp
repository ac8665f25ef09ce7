// kernels/cpu/hc_post.cpp — the hc_post op: the sublayer output enters every residual copy through
// the doubly-stochastic comb matrix (REF Block.hc_post). Order: see ops.h.
#include <algorithm>
#include <cstring>
#include <vector>

#include "kernels/cpu/ops.h"

namespace ds4::cpu {

namespace {

/// Columns [d0, d1) of every copy into tmp (row k at tmp + k*ld, column d at d - d0): per column the
/// order of ops.h (acc from +0, j ascending, then post[k]*f[d] + acc), computed kBlock columns at
/// a time with d innermost so that the loops vectorize; each column's operations and their order are
/// those of the scalar form, so the bits are too.
void post_columns(const float* f, const float* mix_row, int hc, int64_t dim, const float* X, float* tmp, int64_t ld,
                  int64_t d0, int64_t d1) {
  constexpr int64_t kBlock = 64;
  const float* post = mix_row + hc;
  const float* comb = mix_row + 2 * hc;
  for (int64_t b0 = d0; b0 < d1; b0 += kBlock) {
    const int64_t m = std::min(kBlock, d1 - b0);
    for (int k = 0; k < hc; ++k) {
      float acc[kBlock];
      for (int64_t i = 0; i < m; ++i) acc[i] = 0;
      for (int j = 0; j < hc; ++j) {
        const float c = comb[j * hc + k];
        const float* xj = X + j * dim + b0;
        for (int64_t i = 0; i < m; ++i) acc[i] += c * xj[i];
      }
      const float p = post[k];
      float* o = tmp + k * ld + (b0 - d0);
      for (int64_t i = 0; i < m; ++i) o[i] = p * f[b0 + i] + acc[i];
    }
  }
}

}  // namespace

void hc_post_row(const float* f, const float* mix_row, int hc, int64_t dim, float* X, float* out) {
  post_columns(f, mix_row, hc, dim, X, out, dim, 0, dim);
  std::memcpy(X, out, sizeof(float) * size_t(hc * dim));
}

void hc_post_cols(const float* f, const float* mix_row, int hc, int64_t dim, float* X, float* tmp, int64_t d0,
                  int64_t d1) {
  const int64_t m = d1 - d0;
  post_columns(f, mix_row, hc, dim, X, tmp, m, d0, d1);
  for (int k = 0; k < hc; ++k) std::memcpy(X + k * dim + d0, tmp + k * m, sizeof(float) * size_t(m));
}

void hc_post(const float* f, const HcMix& mix, int hc, int64_t dim, float* X) {
  std::vector<float> row(static_cast<size_t>((2 + hc) * hc)), tmp(static_cast<size_t>(hc * dim));
  for (int j = 0; j < hc; ++j) {
    row[j] = mix.pre[j];
    row[hc + j] = mix.post[j];
  }
  for (int i = 0; i < hc * hc; ++i) row[2 * hc + i] = mix.comb[i];
  hc_post_row(f, row.data(), hc, dim, X, tmp.data());
}

}  // namespace ds4::cpu
