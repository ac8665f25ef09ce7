// engine/mhc.cpp — mHC mixing (see mhc.h for the equations and source).
#include "engine/mhc.h"

#include <cmath>

#include "kernels/device.h"

namespace ds4 {
namespace {
float sigmoidf(float x) { return 1.0f / (1.0f + std::exp(-x)); }
}  // namespace

HcMix hc_split_sinkhorn(const float* m, const float* scale, const float* base, int hc, int iters,
                        float eps) {
  HcMix r;
  r.pre.resize(hc);
  r.post.resize(hc);
  r.comb.resize(static_cast<size_t>(hc) * hc);
  for (int j = 0; j < hc; ++j) {
    r.pre[j] = sigmoidf(m[j] * scale[0] + base[j]) + eps;
    r.post[j] = 2.0f * sigmoidf(m[hc + j] * scale[1] + base[hc + j]);
  }
  float* c = r.comb.data();
  for (int j = 0; j < hc; ++j) {  // row j: softmax over k
    float mx = -INFINITY;
    for (int k = 0; k < hc; ++k) {
      c[j * hc + k] = m[2 * hc + j * hc + k] * scale[2] + base[2 * hc + j * hc + k];
      mx = std::fmax(mx, c[j * hc + k]);
    }
    float s = 0;
    for (int k = 0; k < hc; ++k) {
      c[j * hc + k] = std::exp(c[j * hc + k] - mx);
      s += c[j * hc + k];
    }
    for (int k = 0; k < hc; ++k) c[j * hc + k] = c[j * hc + k] / s + eps;
  }
  auto col_norm = [&] {
    for (int k = 0; k < hc; ++k) {
      float s = 0;
      for (int j = 0; j < hc; ++j) s += c[j * hc + k];
      s += eps;
      for (int j = 0; j < hc; ++j) c[j * hc + k] /= s;
    }
  };
  auto row_norm = [&] {
    for (int j = 0; j < hc; ++j) {
      float s = 0;
      for (int k = 0; k < hc; ++k) s += c[j * hc + k];
      s += eps;
      for (int k = 0; k < hc; ++k) c[j * hc + k] /= s;
    }
  };
  col_norm();
  for (int it = 0; it < iters - 1; ++it) {
    row_norm();
    col_norm();
  }
  return r;
}

void hc_mixes(const float* fn, int n_rows, const float* xf, int64_t n, float norm_eps,
              float* mixes) {
  float ss = 0;
  for (int64_t i = 0; i < n; ++i) ss += xf[i] * xf[i];
  const float rs = 1.0f / std::sqrt(ss / static_cast<float>(n) + norm_eps);
  for (int r = 0; r < n_rows; ++r) mixes[r] = dev::dot_f32(fn + r * n, xf, n) * rs;
}

void hc_weighted_sum(const float* X, const float* pre, int hc, int64_t dim, float* y) {
  for (int64_t d = 0; d < dim; ++d) {
    float s = 0;
    for (int j = 0; j < hc; ++j) s += pre[j] * X[j * dim + d];
    y[d] = s;
  }
}

void hc_post(const float* f, const HcMix& mix, int hc, int64_t dim, float* X) {
  std::vector<float> out(static_cast<size_t>(hc) * dim);
  for (int k = 0; k < hc; ++k)
    for (int64_t d = 0; d < dim; ++d) {
      float s = mix.post[k] * f[d];
      float acc = 0;
      for (int j = 0; j < hc; ++j) acc += mix.comb[j * hc + k] * X[j * dim + d];
      out[k * dim + d] = s + acc;
    }
  for (size_t i = 0; i < out.size(); ++i) X[i] = out[i];
}

void hc_head_weights(const float* mixes, const float* scale, const float* base, int hc, float eps,
                     float* w) {
  for (int j = 0; j < hc; ++j) w[j] = sigmoidf(mixes[j] * scale[0] + base[j]) + eps;
}

}  // namespace ds4
