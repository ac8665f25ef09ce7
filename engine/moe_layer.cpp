// engine/moe_layer.cpp — the MoE sublayer of DeepSeek-V4 (REF inference/model.py MoE, Gate,
// Expert; ../shared/reference/dsv4-architecture.md §2.5). Routed experts come from the
// staging::ExpertStore. Combine order: for each token, routed expert outputs are added in
// ascending expert id order in FP32, then the shared expert's output (DESIGN.md numerics).
#include <algorithm>
#include <vector>

#include "engine/forward.h"
#include "engine/moe_routing.h"

namespace ds4 {

Result<void> Forward::moe(int l, const float* x, std::span<const int32_t> tokens, int64_t pos0,
                          float* out, ForwardTrace* trace) const {
  const LayerWeights& L = w_.layers[l];
  const int64_t n = static_cast<int64_t>(tokens.size()), dim = c_.dim, ff = c_.expert_ff;
  const int E = c_.n_expert, K = c_.n_expert_used;

  // Router: FP32 gate (REF: linear(x.float(), weight.float())), sqrtsoftplus, top-k / hash.
  std::vector<float> logits(static_cast<size_t>(n * E));
  dev_.matmul(L.gate_inp, x, n, logits.data(), dev::ActFormat::F32);
  std::vector<Routing> routes(static_cast<size_t>(n));
  for (int64_t t = 0; t < n; ++t) {
    const int32_t* hash = nullptr;
    if (L.tid2eid) {
      if (tokens[t] < 0 || tokens[t] >= c_.vocab)
        return Error{"token id " + std::to_string(tokens[t]) + " at position " + std::to_string(pos0 + t) +
                     ": expected 0.." + std::to_string(c_.vocab - 1)};
      hash = L.tid2eid + static_cast<int64_t>(tokens[t]) * K;
      for (int k = 0; k < K; ++k)
        if (hash[k] < 0 || hash[k] >= E)
          return Error{"tensor 'blk." + std::to_string(l) + ".ffn_gate_tid2eid.weight': entry for token " +
                       std::to_string(tokens[t]) + ": expected an expert id 0.." + std::to_string(E - 1) +
                       ", found " + std::to_string(hash[k])};
    }
    routes[t] = route_token(logits.data() + t * E, E, K, L.probs_bias, hash, c_.route_norm, c_.route_scale);
    if (trace && !trace->router.empty()) trace->router[l][pos0 + t] = routes[t].experts;
  }

  // Routed experts, ascending id: gather the tokens, SwiGLU (clamped), weight, down, scatter-add.
  std::fill(out, out + n * dim, 0.0f);
  const float limit = c_.swiglu_limit[l];
  std::vector<float> xe, g, u, y;
  std::vector<int64_t> rows;
  std::vector<float> rw;
  for (int e = 0; e < E; ++e) {
    rows.clear();
    rw.clear();
    for (int64_t t = 0; t < n; ++t)
      for (size_t k = 0; k < routes[t].experts.size(); ++k)
        if (routes[t].experts[k] == e) {
          rows.push_back(t);
          rw.push_back(routes[t].weights[k]);
        }
    if (rows.empty()) continue;
    const int64_t m = static_cast<int64_t>(rows.size());
    DS4_TRY(dev::WeightMatrix wg, w_.experts->get(l, e, staging::ExpertProj::Gate));
    DS4_TRY(dev::WeightMatrix wu, w_.experts->get(l, e, staging::ExpertProj::Up));
    DS4_TRY(dev::WeightMatrix wd, w_.experts->get(l, e, staging::ExpertProj::Down));
    xe.resize(static_cast<size_t>(m * dim));
    for (int64_t i = 0; i < m; ++i) std::copy_n(x + rows[i] * dim, dim, xe.data() + i * dim);
    g.resize(static_cast<size_t>(m * ff));
    u.resize(static_cast<size_t>(m * ff));
    dev_.matmul2(wg, g.data(), wu, u.data(), xe.data(), m, act_);
    for (int64_t i = 0; i < m; ++i) {
      swiglu_clamped(g.data() + i * ff, u.data() + i * ff, ff, limit);
      for (int64_t j = 0; j < ff; ++j) g[i * ff + j] *= rw[i];  // REF: weight before w2
    }
    y.resize(static_cast<size_t>(m * dim));
    dev_.matmul(wd, g.data(), m, y.data(), act_);
    for (int64_t i = 0; i < m; ++i)
      for (int64_t d = 0; d < dim; ++d) out[rows[i] * dim + d] += y[i * dim + d];
  }

  // Shared expert (clamp from swiglu_clamp_shexp; 0 = none, as REF).
  const int64_t sff = L.sh_gate.out;
  g.resize(static_cast<size_t>(n * sff));
  u.resize(static_cast<size_t>(n * sff));
  dev_.matmul2(L.sh_gate, g.data(), L.sh_up, u.data(), x, n, act_);
  for (int64_t t = 0; t < n; ++t) swiglu_clamped(g.data() + t * sff, u.data() + t * sff, sff, c_.swiglu_limit_shexp[l]);
  y.resize(static_cast<size_t>(n * dim));
  dev_.matmul(L.sh_down, g.data(), n, y.data(), act_);
  for (int64_t i = 0; i < n * dim; ++i) out[i] += y[i];
  return ok();
}

}  // namespace ds4
