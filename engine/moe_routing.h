// engine/moe_routing.h — DeepSeek-V4 MoE routing and the expert activation.
// Source: REF inference/model.py Gate.forward and Expert.forward
// (../shared/reference/dsv4-architecture.md §2.5, pitfalls 5-8).
#pragma once

#include <cstdint>
#include <vector>

namespace ds4 {

/// sqrt(softplus(x)), softplus(x) = log(1 + e^x) (x for x > 20, as torch's threshold).
float sqrt_softplus(float x);

/// One token's routing: experts in selection order and their combine weights.
struct Routing {
  std::vector<int32_t> experts;
  std::vector<float> weights;
};

/// Routes one token. scores s = sqrt_softplus(logits) [n_expert]. Hash layers (`hash_ids`
/// non-null, k entries from tid2eid[token]) take those experts; otherwise the top-k of s + bias
/// (`bias` may be null; ties: lower id). Weights are always from the un-biased s:
/// w = s[e] / sum(s[selected]) * route_scale (when `normalize`, else s[e] * route_scale).
Routing route_token(const float* logits, int n_expert, int k, const float* bias,
                    const int32_t* hash_ids, bool normalize, float route_scale);

/// Clamped SwiGLU in place: g = min(g, limit); u = clamp(u, -limit, limit); h = silu(g) * u,
/// written into `g`. limit <= 0 disables both clamps. (Clamp BEFORE SiLU; the gate only from above.)
void swiglu_clamped(float* g, const float* u, int64_t n, float limit);

}  // namespace ds4
