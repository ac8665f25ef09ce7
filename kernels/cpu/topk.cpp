// kernels/cpu/topk.cpp — the topk op's selection: the k largest, descending, ties to the lower
// index, NaN after every number (a total order, so the result is unique).
#include <algorithm>
#include <cmath>
#include <numeric>

#include "kernels/cpu/ops.h"

namespace ds4::cpu {

std::vector<int32_t> topk_desc(const float* scores, int64_t n, int64_t k) {
  k = std::min(k, n);
  if (k <= 0) return {};
  std::vector<int32_t> idx(static_cast<size_t>(n));
  std::iota(idx.begin(), idx.end(), 0);
  auto better = [scores](int32_t a, int32_t b) {
    const float sa = scores[a], sb = scores[b];
    const bool na = std::isnan(sa), nb = std::isnan(sb);
    if (na != nb) return nb;  // a non-NaN beats NaN
    if (!na && sa != sb) return sa > sb;
    return a < b;
  };
  std::partial_sort(idx.begin(), idx.begin() + k, idx.end(), better);
  idx.resize(static_cast<size_t>(k));
  return idx;
}

}  // namespace ds4::cpu
