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
    int64_t h = 0;
    // Four heads per pass over the key (dot_f32_x4: each the bits of dot_f32(q_h, k), the FMA
    // products being commutative), added in h order as below.
    for (; h + 4 <= H; h += 4) {
      const float* qh[4] = {q + h * D, q + (h + 1) * D, q + (h + 2) * D, q + (h + 3) * D};
      float d4[4];
      dot_f32_x4(k, qh, D, d4);
      for (int i = 0; i < 4; ++i) s += std::max(d4[i], 0.0f) * w[h + i];
    }
    for (; h < H; ++h) s += std::max(dot_f32(q + h * D, k, D), 0.0f) * w[h];
    score[j] = s;
  }
}

}  // namespace ds4::cpu
