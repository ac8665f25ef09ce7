// kernels/cpu/scale.cpp — the scale op (x *= factor, FP32).
#include "kernels/cpu/ops.h"

namespace ds4::cpu {

void scale_rows(const F32Rows& x, float factor, int64_t cols, int64_t t0, int64_t t1) {
  for (int64_t t = t0; t < t1; ++t) {
    float* d = x.row(t);
    for (int64_t i = 0; i < cols; ++i) d[i] *= factor;
  }
}

}  // namespace ds4::cpu
