// kernels/cpu/fill.cpp — the fill op.
#include <algorithm>

#include "kernels/cpu/ops.h"

namespace ds4::cpu {

void fill_rows(const F32Rows& x, float value, int64_t cols, int64_t t0, int64_t t1) {
  for (int64_t t = t0; t < t1; ++t) std::fill(x.row(t), x.row(t) + cols, value);
}

}  // namespace ds4::cpu
