// kernels/cpu/hc_expand.cpp — the hc_expand op: every mHC copy of the residual starts as the
// token embedding (REF Transformer.forward: h.unsqueeze(2).repeat(hc)).
#include <algorithm>

#include "kernels/cpu/ops.h"

namespace ds4::cpu {

void hc_expand(const F32Rows& e, int64_t dim, int hc, const F32Rows& x, int64_t t0, int64_t t1) {
  for (int64_t t = t0; t < t1; ++t)
    for (int j = 0; j < hc; ++j) std::copy_n(e.row(t), dim, x.row(t) + j * dim);
}

}  // namespace ds4::cpu
