// kernels/cpu/hc_head.cpp — the hc_head op: the head's reduction of the residual copies (REF
// ParallelHead.hc_head): h = sum_j w_j X_j, w = sigmoid(mixes*scale + base) + eps.
#include "ds4/result.h"
#include "kernels/cpu/ops.h"
#include "kernels/quant/math.h"

namespace ds4::cpu {

void hc_head_weights(const float* mixes, const float* scale, const float* base, int hc, float eps, float* w) {
  for (int j = 0; j < hc; ++j) w[j] = quant::sigmoid_f32(mixes[j] * scale[0] + base[j]) + eps;
}

void hc_head_row(const float* x, const float* fn, const float* scale, const float* base, int hc, int64_t dim,
                 float hc_eps, float norm_eps, float* h) {
  float m[16], wj[16];
  DS4_CHECK(hc <= 16);
  hc_mixes(fn, hc, x, hc * dim, norm_eps, m);
  hc_head_weights(m, scale, base, hc, hc_eps, wj);
  hc_weighted_sum(x, wj, hc, dim, h);
}

void hc_head_finish_row(const float* x, const float* dots, float rs, const float* scale, const float* base, int hc,
                        int64_t dim, float hc_eps, float* h) {
  float m[16], wj[16];
  DS4_CHECK(hc <= 16);
  for (int j = 0; j < hc; ++j) m[j] = dots[j] * rs;
  hc_head_weights(m, scale, base, hc, hc_eps, wj);
  hc_weighted_sum(x, wj, hc, dim, h);
}

}  // namespace ds4::cpu
