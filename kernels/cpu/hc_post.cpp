// kernels/cpu/hc_post.cpp — the hc_post op: the sublayer output enters every residual copy through
// the doubly-stochastic comb matrix (REF Block.hc_post). Order: see ops.h.
#include <vector>

#include "kernels/cpu/ops.h"

namespace ds4::cpu {

void hc_post_row(const float* f, const float* mix_row, int hc, int64_t dim, float* X, float* out) {
  const float* post = mix_row + hc;
  const float* comb = mix_row + 2 * hc;
  for (int k = 0; k < hc; ++k)
    for (int64_t d = 0; d < dim; ++d) {
      float s = post[k] * f[d];
      float acc = 0;
      for (int j = 0; j < hc; ++j) acc += comb[j * hc + k] * X[j * dim + d];
      out[k * dim + d] = s + acc;
    }
  for (int64_t i = 0; i < hc * dim; ++i) X[i] = out[i];
}

void hc_post_cols(const float* f, const float* mix_row, int hc, int64_t dim, float* X, float* tmp, int64_t d0,
                  int64_t d1) {
  const float* post = mix_row + hc;
  const float* comb = mix_row + 2 * hc;
  const int64_t m = d1 - d0;
  for (int k = 0; k < hc; ++k)
    for (int64_t d = d0; d < d1; ++d) {
      float s = post[k] * f[d];
      float acc = 0;
      for (int j = 0; j < hc; ++j) acc += comb[j * hc + k] * X[j * dim + d];
      tmp[k * m + (d - d0)] = s + acc;
    }
  for (int k = 0; k < hc; ++k)
    for (int64_t d = d0; d < d1; ++d) X[k * dim + d] = tmp[k * m + (d - d0)];
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
