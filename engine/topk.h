// engine/topk.h — deterministic top-k selection used by the router and the lightning indexer.
// Ties break by lower index (DESIGN.md "Numerics contract"). NaN never wins.
#pragma once

#include <cstdint>
#include <vector>

namespace ds4 {

/// Indices of the k largest of scores[0..n) in descending score order (equal scores: lower index
/// first). k is clamped to n. -INFINITY entries are eligible (callers mask by count instead).
std::vector<int32_t> topk_desc(const float* scores, int64_t n, int64_t k);

}  // namespace ds4
