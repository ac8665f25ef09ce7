// kernels/cpu/router.cpp — the router op (REF Gate.forward: sqrtsoftplus scores, bias for the
// choice only, top-k or the hash table, normalized weights times route_scale).
#include "kernels/cpu/ops.h"
#include "kernels/quant/math.h"

namespace ds4::cpu {

float sqrt_softplus(float x) {
  const float sp = x > 20.0f ? x : quant::log1p_f32(quant::exp_f32(x));
  return quant::sqrt_f32(sp);
}

Routing route_token(const float* logits, int n_expert, int k, const float* bias, const int32_t* hash_ids,
                    bool normalize, float route_scale) {
  std::vector<float> s(n_expert), sel(n_expert);
  for (int e = 0; e < n_expert; ++e) {
    s[e] = sqrt_softplus(logits[e]);
    sel[e] = bias ? s[e] + bias[e] : s[e];
  }
  Routing r;
  if (hash_ids) {
    r.experts.assign(hash_ids, hash_ids + k);
  } else {
    r.experts = topk_desc(sel.data(), n_expert, k);
  }
  float sum = 0;
  for (int32_t e : r.experts) sum += (e >= 0 && e < n_expert) ? s[e] : 0.0f;
  r.weights.resize(r.experts.size());
  for (size_t i = 0; i < r.experts.size(); ++i) {
    const int32_t e = r.experts[i];
    const float se = (e >= 0 && e < n_expert) ? s[e] : 0.0f;  // a bad hash id is reported by the engine
    r.weights[i] = (normalize ? se / sum : se) * route_scale;
  }
  return r;
}

}  // namespace ds4::cpu
