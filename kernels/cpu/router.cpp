// kernels/cpu/router.cpp — the router op (REF Gate.forward: sqrtsoftplus scores, bias for the
// choice only, top-k or the hash table, normalized weights times route_scale).
#include <algorithm>

#include "kernels/cpu/ops.h"
#include "kernels/quant/math.h"

namespace ds4::cpu {

float sqrt_softplus(float x) {
  const float sp = x > 20.0f ? x : quant::log1p_f32(quant::exp_f32(x));
  return quant::sqrt_f32(sp);
}

void route_scores(const float* logits, int n_expert, const float* bias, float* scratch, int64_t e0, int64_t e1) {
  float* s = scratch;
  float* sel = scratch + n_expert;
  for (int64_t e = e0; e < e1; ++e) {
    s[e] = sqrt_softplus(logits[e]);
    sel[e] = bias ? s[e] + bias[e] : s[e];
  }
}

void route_select(const float* scratch, int n_expert, int k, const int32_t* hash_ids, bool normalize,
                  float route_scale, int32_t* ids, float* weights, int32_t* idx) {
  const float* s = scratch;
  const float* sel = scratch + n_expert;
  if (hash_ids) {
    std::copy_n(hash_ids, k, ids);
  } else {
    topk_desc_into(sel, n_expert, k, ids, idx);
  }
  float sum = 0;
  for (int i = 0; i < k; ++i) sum += (ids[i] >= 0 && ids[i] < n_expert) ? s[ids[i]] : 0.0f;
  for (int i = 0; i < k; ++i) {
    const float se = (ids[i] >= 0 && ids[i] < n_expert) ? s[ids[i]] : 0.0f;  // a bad hash id is reported by the engine
    weights[i] = (normalize ? se / sum : se) * route_scale;
  }
}

void route_token_into(const float* logits, int n_expert, int k, const float* bias, const int32_t* hash_ids,
                      bool normalize, float route_scale, int32_t* ids, float* weights, float* scratch,
                      int32_t* idx) {
  route_scores(logits, n_expert, bias, scratch, 0, n_expert);
  route_select(scratch, n_expert, k, hash_ids, normalize, route_scale, ids, weights, idx);
}

Routing route_token(const float* logits, int n_expert, int k, const float* bias, const int32_t* hash_ids,
                    bool normalize, float route_scale) {
  k = std::min(k, n_expert);
  std::vector<float> scratch(static_cast<size_t>(2 * n_expert));
  std::vector<int32_t> idx(static_cast<size_t>(n_expert));
  Routing r;
  r.experts.resize(static_cast<size_t>(k));
  r.weights.resize(static_cast<size_t>(k));
  route_token_into(logits, n_expert, k, bias, hash_ids, normalize, route_scale, r.experts.data(), r.weights.data(),
                   scratch.data(), idx.data());
  return r;
}

}  // namespace ds4::cpu
