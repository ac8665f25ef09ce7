// engine/moe_routing.cpp — see moe_routing.h.
#include "engine/moe_routing.h"

#include <algorithm>
#include <cmath>

#include "engine/topk.h"

namespace ds4 {

float sqrt_softplus(float x) {
  const float sp = x > 20.0f ? x : std::log1p(std::exp(x));
  return std::sqrt(sp);
}

Routing route_token(const float* logits, int n_expert, int k, const float* bias,
                    const int32_t* hash_ids, bool normalize, float route_scale) {
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
  for (int32_t e : r.experts) sum += s[e];
  r.weights.resize(r.experts.size());
  for (size_t i = 0; i < r.experts.size(); ++i) {
    const float w = normalize ? s[r.experts[i]] / sum : s[r.experts[i]];
    r.weights[i] = w * route_scale;
  }
  return r;
}

void swiglu_clamped(float* g, const float* u, int64_t n, float limit) {
  for (int64_t i = 0; i < n; ++i) {
    float gi = g[i], ui = u[i];
    if (limit > 0) {
      gi = std::min(gi, limit);
      ui = std::clamp(ui, -limit, limit);
    }
    g[i] = gi / (1.0f + std::exp(-gi)) * ui;
  }
}

}  // namespace ds4
