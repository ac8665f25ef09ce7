// engine/indexer_score.cpp — see indexer_score.h.
#include "engine/indexer_score.h"

#include <algorithm>

#include "engine/topk.h"
#include "kernels/device.h"

namespace ds4 {

void indexer_scores(const float* q, const float* w, int64_t H, int64_t D, const float* keys,
                    int64_t nvis, float* score) {
  for (int64_t j = 0; j < nvis; ++j) {
    const float* k = keys + j * D;
    float s = 0;
    for (int64_t h = 0; h < H; ++h) s += std::max(dev::dot_f32(q + h * D, k, D), 0.0f) * w[h];
    score[j] = s;
  }
}

std::vector<int32_t> indexer_select(const float* q, const float* w, int64_t H, int64_t D,
                                    const float* keys, int64_t nvis, int64_t k) {
  std::vector<float> score(static_cast<size_t>(nvis));
  indexer_scores(q, w, H, D, keys, nvis, score.data());
  return topk_desc(score.data(), nvis, k);
}

}  // namespace ds4
