// kernels/cpu/hc_pre.cpp — the hc_pre op: mHC mixes, the Sinkhorn split and the weighted sum of the
// residual copies (REF inference/model.py Block.hc_pre, kernel.py hc_split_sinkhorn;
// ../shared/reference/dsv4-architecture.md §2.1). Orders: see ops.h.
#include <algorithm>
#include <cmath>

#include "ds4/result.h"
#include "kernels/cpu/ops.h"
#include "kernels/quant/hc_sinkhorn.h"
#include "kernels/quant/math.h"

namespace ds4::cpu {

void hc_split_sinkhorn_row(const float* m, const float* scale, const float* base, int hc, int iters, float eps,
                           float* mix_row) {
  quant::hc_split_sinkhorn_row_ref(m, scale, base, hc, iters, eps, mix_row);
}

HcMix hc_split_sinkhorn(const float* m, const float* scale, const float* base, int hc, int iters, float eps) {
  std::vector<float> row(static_cast<size_t>((2 + hc) * hc));
  hc_split_sinkhorn_row(m, scale, base, hc, iters, eps, row.data());
  HcMix r;
  r.pre.assign(row.begin(), row.begin() + hc);
  r.post.assign(row.begin() + hc, row.begin() + 2 * hc);
  r.comb.assign(row.begin() + 2 * hc, row.end());
  return r;
}

float hc_norm_scale(const float* xf, int64_t n, float norm_eps) {
  const float ss = dot_f32(xf, xf, n);  // the dot_f32 order (kernels/NUMERICS.md hc_pre)
  return 1.0f / quant::sqrt_f32(ss / static_cast<float>(n) + norm_eps);
}

void hc_mixes(const float* fn, int n_rows, const float* xf, int64_t n, float norm_eps, float* mixes) {
  const float rs = hc_norm_scale(xf, n, norm_eps);
  int r = 0;
  for (; r + 4 <= n_rows; r += 4) {  // four rows per pass over xf, each the bits of dot_f32
    const float* w[4] = {fn + r * n, fn + (r + 1) * n, fn + (r + 2) * n, fn + (r + 3) * n};
    float d4[4];
    dot_f32_rows4(w, xf, n, d4);
    for (int i = 0; i < 4; ++i) mixes[r + i] = d4[i] * rs;
  }
  for (; r < n_rows; ++r) mixes[r] = dot_f32(fn + r * n, xf, n) * rs;
}

void hc_pre_finish_row_scaled(const float* x, const float* dots, float rs, const float* scale, const float* base,
                              int hc, int64_t dim, int iters, float hc_eps, float* y, float* mix_row) {
  const int mix_rows = (2 + hc) * hc;
  float m[64];
  DS4_CHECK(mix_rows <= 64);
  for (int r = 0; r < mix_rows; ++r) m[r] = dots[r] * rs;
  hc_split_sinkhorn_row(m, scale, base, hc, iters, hc_eps, mix_row);
  hc_weighted_sum(x, mix_row, hc, dim, y);
}

void hc_pre_finish_row(const float* x, const float* dots, const float* scale, const float* base, int hc, int64_t dim,
                       int iters, float hc_eps, float norm_eps, float* y, float* mix_row) {
  hc_pre_finish_row_scaled(x, dots, hc_norm_scale(x, hc * dim, norm_eps), scale, base, hc, dim, iters, hc_eps, y,
                           mix_row);
}

void hc_weighted_sum(const float* X, const float* pre, int hc, int64_t dim, float* y) {
  // 64 columns at a time with d innermost (vectorizes); per column the order stays s from +0,
  // j ascending.
  constexpr int64_t kBlock = 64;
  for (int64_t b0 = 0; b0 < dim; b0 += kBlock) {
    const int64_t m = std::min(kBlock, dim - b0);
    float s[kBlock];
    for (int64_t i = 0; i < m; ++i) s[i] = 0;
    for (int j = 0; j < hc; ++j) {
      const float p = pre[j];
      const float* xj = X + j * dim + b0;
      for (int64_t i = 0; i < m; ++i) s[i] += p * xj[i];
    }
    for (int64_t i = 0; i < m; ++i) y[b0 + i] = s[i];
  }
}

void hc_pre_row(const float* x, const float* fn, const float* scale, const float* base, int hc, int64_t dim,
                int iters, float hc_eps, float norm_eps, float* y, float* mix_row) {
  const int mix_rows = (2 + hc) * hc;
  float m[64];
  DS4_CHECK(mix_rows <= 64);
  hc_mixes(fn, mix_rows, x, hc * dim, norm_eps, m);
  hc_split_sinkhorn_row(m, scale, base, hc, iters, hc_eps, mix_row);
  hc_weighted_sum(x, mix_row, hc, dim, y);  // pre = the row's first hc entries
}

}  // namespace ds4::cpu
