// engine/indexer_score.h — the lightning indexer's score of compressed blocks for one query
// (REF inference/model.py Indexer.forward; ../shared/reference/dsv4-architecture.md §2.4):
// score[j] = sum_h w[h] * relu(q_h . k_j) over the visible blocks j < nvis; the indexer then
// keeps the top-k blocks (engine/topk.h: ties -> lower block id).
#pragma once

#include <cstdint>
#include <vector>

namespace ds4 {

/// q: [H, D] (already rotated), w: [H] head weights (already scaled), keys: [nvis, D].
/// Writes score[nvis]. The sum over heads runs in ascending h.
void indexer_scores(const float* q, const float* w, int64_t H, int64_t D, const float* keys,
                    int64_t nvis, float* score);

/// Block ids selected for a query: top min(k, nvis) of the scores (descending, ties lower id).
std::vector<int32_t> indexer_select(const float* q, const float* w, int64_t H, int64_t D,
                                    const float* keys, int64_t nvis, int64_t k);

}  // namespace ds4
