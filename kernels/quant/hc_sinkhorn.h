// kernels/quant/hc_sinkhorn.h — the mHC Sinkhorn split of one token's mixes (REF kernel.py
// hc_split_sinkhorn; ../shared/reference/dsv4-architecture.md §2.1), as one DS4_HD definition that
// the CPU reference (kernels/cpu/hc_pre.cpp) and the CUDA kernels (kernels/cuda/ops/hc_pre/) both
// compile, so both give the same bits. Order: kernels/NUMERICS.md "hc_pre".
#pragma once

#include <cmath>

#include "kernels/quant/math.h"
#include "kernels/quant/scalar_formats.h"  // DS4_HD

namespace ds4::quant {

/// Splits mixes m [(2+hc)*hc] into mix_row = [pre hc | post hc | comb hc*hc]: pre = sigmoid(m*s0 + b)
/// + eps, post = 2 sigmoid(m*s1 + b), comb = row softmax of (m*s2 + b) + eps, then one column
/// normalization and (iters - 1) x (row, column) normalizations, each sum ascending plus eps.
/// scale [3], base [(2+hc)*hc]; mix_row [(2+hc)*hc], written.
DS4_HD inline void hc_split_sinkhorn_row_ref(const float* m, const float* scale, const float* base, int hc, int iters,
                                             float eps, float* mix_row) {
  float* pre = mix_row;
  float* post = mix_row + hc;
  float* c = mix_row + 2 * hc;
  for (int j = 0; j < hc; ++j) {
    pre[j] = sigmoid_f32(m[j] * scale[0] + base[j]) + eps;
    post[j] = 2.0f * sigmoid_f32(m[hc + j] * scale[1] + base[hc + j]);
  }
  for (int j = 0; j < hc; ++j) {  // row j: softmax over k
    float mx = -INFINITY;
    for (int k = 0; k < hc; ++k) {
      c[j * hc + k] = m[2 * hc + j * hc + k] * scale[2] + base[2 * hc + j * hc + k];
      mx = fmaxf(mx, c[j * hc + k]);
    }
    float s = 0;
    for (int k = 0; k < hc; ++k) {
      c[j * hc + k] = exp_f32(c[j * hc + k] - mx);
      s += c[j * hc + k];
    }
    for (int k = 0; k < hc; ++k) c[j * hc + k] = c[j * hc + k] / s + eps;
  }
  // column normalization; then (iters - 1) times row, column (one column pass even for iters < 1)
  for (int it = 0; it < (iters > 1 ? iters : 1); ++it) {
    if (it > 0) {
      for (int j = 0; j < hc; ++j) {
        float s = 0;
        for (int k = 0; k < hc; ++k) s += c[j * hc + k];
        s += eps;
        for (int k = 0; k < hc; ++k) c[j * hc + k] /= s;
      }
    }
    for (int k = 0; k < hc; ++k) {
      float s = 0;
      for (int j = 0; j < hc; ++j) s += c[j * hc + k];
      s += eps;
      for (int j = 0; j < hc; ++j) c[j * hc + k] /= s;
    }
  }
}

}  // namespace ds4::quant
