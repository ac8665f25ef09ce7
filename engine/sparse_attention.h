// engine/sparse_attention.h — one query head of DeepSeek-V4's sparse multi-query attention with a
// learned sink: K and V are the same latent vector; the sink adds exp(sink) to the softmax
// denominator only. Source: REF kernel.py sparse_attn, inference/model.py Attention.forward
// (../shared/reference/dsv4-architecture.md §2.2 step 5, pitfall 9).
#pragma once

#include <cstdint>

namespace ds4 {

/// o[dim] = sum_i p_i kv_i with p_i = exp(s_i - M) / (sum_j exp(s_j - M) + exp(sink - M)),
/// s_i = scale * (q . kv_i), M = max(max_i s_i, sink), over the `n` candidate rows kv[i] (each a
/// pointer to `dim` floats). n = 0 gives o = 0.
void attend_with_sink(const float* q, const float* const* kv, int64_t n, int64_t dim, float scale,
                      float sink, float* o, float* scratch /* [n] */);

}  // namespace ds4
