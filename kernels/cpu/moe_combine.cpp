// kernels/cpu/moe_combine.cpp — the moe_combine op: a token's routed expert outputs summed in
// ascending expert id from +0 in FP32 (engine/tensor_parallel.h, canonical definition 3).
#include <algorithm>

#include "ds4/result.h"
#include "kernels/cpu/ops.h"

namespace ds4::cpu {

void moe_combine_row(const F32Rows& slots, const int32_t* ids, int64_t K, int64_t dim, float* out) {
  int order[64];
  DS4_CHECK(K <= 64);
  for (int k = 0; k < K; ++k) order[k] = k;
  std::stable_sort(order, order + K, [&](int a, int b) { return ids[a] < ids[b]; });
  std::fill(out, out + dim, 0.0f);
  for (int64_t i = 0; i < K; ++i) {
    const float* y = slots.row(order[i]);
    for (int64_t d = 0; d < dim; ++d) out[d] += y[d];
  }
}

}  // namespace ds4::cpu
