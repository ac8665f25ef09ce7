// kernels/cpu/add.cpp — the add op (dst += src, FP32, one rounding per element).
#include "kernels/cpu/ops.h"

namespace ds4::cpu {

void add_rows(const F32Rows& dst, const F32Rows& src, int64_t cols, int64_t t0, int64_t t1) {
  for (int64_t t = t0; t < t1; ++t) {
    float* d = dst.row(t);
    const float* s = src.row(t);
    for (int64_t i = 0; i < cols; ++i) d[i] += s[i];
  }
}

}  // namespace ds4::cpu
