// kernels/cpu/sparse_attention.cpp — the sparse_attention op's core: softmax attention with a
// per-head sink logit over a candidate list (REF Attention.forward + kernel.py sparse_attn).
#include <cmath>

#include "kernels/cpu/ops.h"
#include "kernels/quant/math.h"

namespace ds4::cpu {
namespace {

/// s[i] = exp_f32(s[i] - mx) (vectorized; an AVX2 clone where the CPU has it, same bits).
__attribute__((target_clones("avx2", "default"))) void exp_shifted(float* s, int64_t n, float mx) {
  for (int64_t i = 0; i < n; ++i) s[i] = quant::exp_f32(s[i] - mx);
}

/// o[d] = sum_i p[i] * v[i][d], i ascending from +0 (the order of ops.h), four rows per pass over
/// o (each element still adds its terms one at a time in i order, so the bits are the one-row
/// loop's); vectorized over d (AVX-512 / AVX2 clones where the CPU has them, no FMA).
__attribute__((target_clones("avx512f", "avx2", "default"))) void weighted_rows(float* __restrict o,
                                                                                const float* const* v,
                                                                                const float* p, int64_t n,
                                                                                int64_t dim) {
  for (int64_t d = 0; d < dim; ++d) o[d] = 0;
  int64_t i = 0;
  for (; i + 4 <= n; i += 4) {
    const float p0 = p[i], p1 = p[i + 1], p2 = p[i + 2], p3 = p[i + 3];
    const float* __restrict v0 = v[i];
    const float* __restrict v1 = v[i + 1];
    const float* __restrict v2 = v[i + 2];
    const float* __restrict v3 = v[i + 3];
    for (int64_t d = 0; d < dim; ++d) {
      float a = o[d];
      a += p0 * v0[d];
      a += p1 * v1[d];
      a += p2 * v2[d];
      a += p3 * v3[d];
      o[d] = a;
    }
  }
  for (; i < n; ++i) {
    const float pi = p[i];
    const float* __restrict vi = v[i];
    for (int64_t d = 0; d < dim; ++d) o[d] += pi * vi[d];
  }
}

}  // namespace

void attend_with_sink(const float* q, const float* const* kv, int64_t n, int64_t dim, float scale, float sink,
                      float* o, float* s) {
  // Scores four candidates per pass over q (dot_f32_x4: each the bits of dot_f32(q, kv[i])).
  int64_t i = 0;
  for (; i + 4 <= n; i += 4) dot_f32_x4(q, kv + i, dim, s + i);
  for (; i < n; ++i) s[i] = dot_f32(q, kv[i], dim);
  float mx = sink;
  for (i = 0; i < n; ++i) {
    s[i] = s[i] * scale;
    mx = std::fmax(mx, s[i]);
  }
  float den = quant::exp_f32(sink - mx);
  exp_shifted(s, n, mx);
  for (i = 0; i < n; ++i) den += s[i];
  for (i = 0; i < n; ++i) s[i] = s[i] / den;
  weighted_rows(o, kv, s, n, dim);
}

}  // namespace ds4::cpu
