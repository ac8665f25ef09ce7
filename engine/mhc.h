// engine/mhc.h — manifold-constrained hyper-connections (mHC) of DeepSeek-V4: the residual state
// is `hc` copies of the hidden vector; each sublayer reads a weighted sum of the copies (hc_pre)
// and writes back through a doubly-stochastic mixing matrix found by Sinkhorn iterations
// (hc_post). Source: REF inference/model.py Block.hc_pre/hc_post, ParallelHead.hc_head and
// kernel.py hc_split_sinkhorn (../shared/reference/dsv4-architecture.md §2.1).
#pragma once

#include <cstdint>
#include <vector>

namespace ds4 {

/// Per-token mixing coefficients of one sublayer: pre[hc], post[hc], comb[hc*hc] with
/// comb[j*hc + k] = weight of source copy j into destination copy k.
struct HcMix {
  std::vector<float> pre, post, comb;
};

/// Splits `mixes` [(2+hc)*hc] into pre/post/comb:
/// pre[j] = sigmoid(m[j]*scale[0] + base[j]) + eps; post[j] = 2*sigmoid(m[hc+j]*scale[1] + base[hc+j]);
/// comb = row-softmax(m[2hc..]*scale[2] + base[2hc..]) + eps, then divided by (column sums + eps),
/// then (iters-1) times: divided by (row sums + eps), then by (column sums + eps).
HcMix hc_split_sinkhorn(const float* mixes, const float* scale, const float* base, int hc,
                        int iters, float eps);

/// mixes[r] = (fn[r, :] . xf) * rsqrt(mean(xf^2) + norm_eps) for r < n_rows, where xf is the
/// flattened state [hc*dim] and fn is F32 [n_rows, hc*dim] (ggml {hc*dim, n_rows}).
void hc_mixes(const float* fn, int n_rows, const float* xf, int64_t n, float norm_eps,
              float* mixes);

/// y[d] = sum_j pre[j] * X[j, d] (X: [hc, dim]).
void hc_weighted_sum(const float* X, const float* pre, int hc, int64_t dim, float* y);

/// X'[k, d] = post[k]*f[d] + sum_j comb[j*hc+k] * X[j, d]; X: [hc, dim] replaced by X'.
void hc_post(const float* f, const HcMix& mix, int hc, int64_t dim, float* X);

/// Head weights: w[j] = sigmoid(mixes[j]*scale[0] + base[j]) + eps (REF ParallelHead.hc_head).
void hc_head_weights(const float* mixes, const float* scale, const float* base, int hc, float eps,
                     float* w);

}  // namespace ds4
