// kernels/cpu/rmsnorm.cpp — the rmsnorm op (REF RMSNorm: x * rsqrt(mean(x^2) + eps) * weight).
#include "kernels/cpu/ops.h"
#include "kernels/quant/math.h"

namespace ds4::cpu {

void rmsnorm_row(const float* x, const float* w, int64_t dim, float eps, float* y) {
  const float ss = dot_f32(x, x, dim);  // the dot_f32 order (kernels/NUMERICS.md rmsnorm)
  const float r = 1.0f / quant::sqrt_f32(ss / static_cast<float>(dim) + eps);
  for (int64_t i = 0; i < dim; ++i) y[i] = w ? w[i] * (x[i] * r) : x[i] * r;
}

}  // namespace ds4::cpu
