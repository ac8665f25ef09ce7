// kernels/cpu/embed_rows.cpp — the embed_rows and owner_rows ops (token embedding, exact decode;
// vocabulary-parallel selection of the owner rank's row).
#include <algorithm>

#include "kernels/cpu/ops.h"
#include "kernels/cpu/quant_ref.h"

namespace ds4::cpu {

void embed_rows(const WRows& w, const int32_t* ids, int64_t vocab0, int64_t vocab1, const F32Rows& out,
                int64_t t0, int64_t t1) {
  for (int64_t t = t0; t < t1; ++t) {
    float* o = out.row(t);
    if (ids[t] < vocab0 || ids[t] >= vocab1) {
      std::fill(o, o + w.in, 0.0f);
    } else if (w.type == GgmlType::F32) {
      std::copy_n(reinterpret_cast<const float*>(w.row(ids[t])), w.in, o);
    } else {
      dequantize_row(w.type, w.row(ids[t]), o, w.in);
    }
  }
}

void owner_rows(const F32Rows& all, const int32_t* ids, int64_t rows_per_rank, int64_t n, int64_t dim,
                const F32Rows& out, int64_t t0, int64_t t1) {
  for (int64_t t = t0; t < t1; ++t) std::copy_n(all.row((ids[t] / rows_per_rank) * n + t), dim, out.row(t));
}

}  // namespace ds4::cpu
