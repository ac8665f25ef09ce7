// kernels/cpu/moe_experts.cpp — the moe_experts op's grouping: the slots routed to one expert in
// ascending (token, slot) order (a stable sort of the batch's tokens by expert). The op then runs
// matmul2 (gate, up), swiglu times the routing weight and matmul (down) over the gathered rows
// (kernels/device_cpu.cpp) and scatters each result to its slot; an expert's rows are
// independent, so the grouping never changes a value.
#include "kernels/cpu/ops.h"

namespace ds4::cpu {

void moe_slots_of(const I32Rows& ids, int64_t n, int64_t K, int32_t expert, std::vector<int64_t>* slots) {
  slots->clear();
  for (int64_t t = 0; t < n; ++t)
    for (int64_t k = 0; k < K; ++k)
      if (ids.row(t)[k] == expert) slots->push_back(t * K + k);
}

}  // namespace ds4::cpu
