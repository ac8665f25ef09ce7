// kernels/cpu/copy.cpp — the copy op (strided 2-D views, 4-byte elements, bit-exact).
#include <cstring>

#include "kernels/cpu/ops.h"

namespace ds4::cpu {

void copy_rows(const F32Rows& src, const F32Rows& dst, int64_t cols, int64_t t0, int64_t t1) {
  for (int64_t t = t0; t < t1; ++t) std::memmove(dst.row(t), src.row(t), static_cast<size_t>(cols) * 4);
}

}  // namespace ds4::cpu
