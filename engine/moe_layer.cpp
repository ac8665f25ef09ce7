// engine/moe_layer.cpp — the MoE sublayer of DeepSeek-V4 (REF inference/model.py MoE, Gate,
// Expert; ../shared/reference/dsv4-architecture.md §2.5). Routed experts come from the
// staging::ExpertStore. Combine order: for each token, routed expert outputs are added in
// ascending expert id order in FP32, then the shared expert's output (DESIGN.md numerics).
// Tensor parallel: routed experts by owner rank, shared expert replicated (tensor_parallel.h).
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
    DS4_CHECK(routes[t].experts.size() <= static_cast<size_t>(K));
    if (trace && !trace->router.empty()) trace->router[l][pos0 + t] = routes[t].experts;
  }

  // Routed experts (tensor_parallel.h, definition 3): this rank computes the experts it owns,
  // ascending id, and writes each output into its (token, slot) row of Y [tokens, K, dim]; rows of
  // experts owned elsewhere stay 0. The all-reduce is exact (one non-zero contributor per
  // element). Then every rank adds a token's slots in ascending expert id order, from +0. With R
  // ranks this runs over blocks of tokens (Y bounded; every rank forms the same blocks).
  // With one rank the slots are not materialized: adding y into `out` in ascending expert id
  // order is the same sequence of FP32 additions per token (and saves n*K*dim floats).
  const int64_t KK = K;
  constexpr int64_t kSlotFloats = int64_t{1} << 24;
  const int64_t block = comm_ ? std::max<int64_t>(1, kSlotFloats / (KK * dim)) : n;
  std::fill(out, out + n * dim, 0.0f);
  const float limit = c_.swiglu_limit[l];
  std::vector<float> Y, xe, g, u, y;
  std::vector<int64_t> rows;  // slot index (t - t0) * K + k
  std::vector<float> rw;
  std::vector<int> order;
  Result<void> failed = ok();  // an expert-store error is returned after the collectives
  // Announce this step's experts (ascending, distinct, owned by this rank) to the store: a caching
  // store reserves their slots so loading one never evicts another this step needs. Released by
  // end_step after the loop, on the error path too.
  std::vector<int> step_experts;
  for (const Routing& r : routes)
    for (int e : r.experts)
      if (shard_.owns_expert(l, e)) step_experts.push_back(e);
  std::sort(step_experts.begin(), step_experts.end());
  step_experts.erase(std::unique(step_experts.begin(), step_experts.end()), step_experts.end());
  if (auto b = w_.experts->begin_step(l, step_experts); !b) failed = b.error();
  for (int64_t t0 = 0; t0 < n; t0 += block) {
    const int64_t t1 = std::min(n, t0 + block), nb = t1 - t0;
    if (comm_) Y.assign(static_cast<size_t>(nb * KK * dim), 0.0f);
    for (int e = 0; e < E && failed.ok(); ++e) {
      if (!shard_.owns_expert(l, e)) continue;
      rows.clear();
      rw.clear();
      for (int64_t t = t0; t < t1; ++t)
        for (size_t k = 0; k < routes[t].experts.size(); ++k)
          if (routes[t].experts[k] == e) {
            rows.push_back((t - t0) * KK + static_cast<int64_t>(k));
            rw.push_back(routes[t].weights[k]);
          }
      if (rows.empty()) continue;
      const int64_t m = static_cast<int64_t>(rows.size());
      auto wg = w_.experts->get(l, e, staging::ExpertProj::Gate);
      auto wu = w_.experts->get(l, e, staging::ExpertProj::Up);
      auto wd = w_.experts->get(l, e, staging::ExpertProj::Down);
      if (!wg.ok() || !wu.ok() || !wd.ok()) {
        failed = !wg.ok() ? wg.error() : !wu.ok() ? wu.error() : wd.error();
        break;
      }
      xe.resize(static_cast<size_t>(m * dim));
      for (int64_t i = 0; i < m; ++i) std::copy_n(x + (t0 + rows[i] / KK) * dim, dim, xe.data() + i * dim);
      g.resize(static_cast<size_t>(m * ff));
      u.resize(static_cast<size_t>(m * ff));
      dev_.matmul2(*wg, g.data(), *wu, u.data(), xe.data(), m, act_);
      for (int64_t i = 0; i < m; ++i) {
        swiglu_clamped(g.data() + i * ff, u.data() + i * ff, ff, limit);
        for (int64_t j = 0; j < ff; ++j) g[i * ff + j] *= rw[i];  // REF: weight before w2
      }
      y.resize(static_cast<size_t>(m * dim));
      dev_.matmul(*wd, g.data(), m, y.data(), act_);
      expert_weight_bytes_ += static_cast<uint64_t>(wg->out) * wg->row_bytes +
                              static_cast<uint64_t>(wu->out) * wu->row_bytes +
                              static_cast<uint64_t>(wd->out) * wd->row_bytes;
      if (!comm_) {
        for (int64_t i = 0; i < m; ++i)
          for (int64_t d = 0; d < dim; ++d) out[(t0 + rows[i] / KK) * dim + d] += y[i * dim + d];
      } else {
        for (int64_t i = 0; i < m; ++i) std::copy_n(y.data() + i * dim, dim, Y.data() + rows[i] * dim);
      }
    }
    if (!comm_) continue;
    DS4_TRY_VOID(comm_->all_reduce_sum_f32(Y.data(), nb * KK * dim));
    for (int64_t t = t0; t < t1; ++t) {
      const int nk = static_cast<int>(routes[t].experts.size());
      order.resize(static_cast<size_t>(nk));
      for (int k = 0; k < nk; ++k) order[k] = k;
      std::stable_sort(order.begin(), order.end(),
                       [&](int a, int b) { return routes[t].experts[a] < routes[t].experts[b]; });
      for (int k : order) {
        const float* yk = Y.data() + ((t - t0) * KK + k) * dim;
        for (int64_t d = 0; d < dim; ++d) out[t * dim + d] += yk[d];
      }
    }
  }
  w_.experts->end_step(l);
  if (!failed.ok()) return failed;

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
