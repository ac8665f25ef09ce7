// kernels/cpu/indexer_scores.cpp — the indexer_scores op: lightning-indexer block scores (REF
// Indexer.forward: sum over heads of w_h * relu(q_h . k_j)). Order: see ops.h.
#include <algorithm>

#include "kernels/cpu/ops.h"

namespace ds4::cpu {

void indexer_scores(const float* q, const float* w, int64_t H, int64_t D, const float* keys, int64_t nvis,
                    float* score) {
  for (int64_t j = 0; j < nvis; ++j) {
    const float* k = keys + j * D;
    float s = 0;
    for (int64_t h = 0; h < H; ++h) s += std::max(dot_f32(q + h * D, k, D), 0.0f) * w[h];
    score[j] = s;
  }
}

}  // namespace ds4::cpu
