// kernels/cpu/ordered_sum.cpp — the ordered_sum op: the canonical shard sum / TP rank order
// (engine/tensor_parallel.h), ((p0 + p1) + p2) + ... in FP32.
#include "kernels/cpu/ops.h"

namespace ds4::cpu {

void ordered_sum(const float* src, int64_t parts, int64_t m, float* dst, int64_t i0, int64_t i1) {
  for (int64_t i = i0; i < i1; ++i) {
    float s = src[i];
    for (int64_t p = 1; p < parts; ++p) s += src[p * m + i];
    dst[i] = s;
  }
}

}  // namespace ds4::cpu
