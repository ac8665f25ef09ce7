// kernels/cpu/topk.cpp — the topk op's selection: the k largest, descending, ties to the lower
// index, NaN after every number (a total order, so the result is unique).
#include <algorithm>
#include <cmath>
#include <numeric>

#include "kernels/cpu/ops.h"

namespace ds4::cpu {

int64_t topk_desc_into(const float* scores, int64_t n, int64_t k, int32_t* out, int32_t* idx) {
  k = std::min(k, n);
  if (k <= 0) return 0;
  std::iota(idx, idx + n, 0);
  auto better = [scores](int32_t a, int32_t b) {
    const float sa = scores[a], sb = scores[b];
    const bool na = std::isnan(sa), nb = std::isnan(sb);
    if (na != nb) return nb;  // a non-NaN beats NaN
    if (!na && sa != sb) return sa > sb;
    return a < b;
  };
  std::partial_sort(idx, idx + k, idx + n, better);
  std::copy_n(idx, k, out);
  return k;
}

std::vector<int32_t> topk_desc(const float* scores, int64_t n, int64_t k) {
  std::vector<int32_t> idx(static_cast<size_t>(std::max<int64_t>(n, 0))), out(static_cast<size_t>(std::max<int64_t>(0, std::min(k, n))));
  const int64_t m = topk_desc_into(scores, n, k, out.data(), idx.data());
  out.resize(static_cast<size_t>(m));
  return out;
}

}  // namespace ds4::cpu
