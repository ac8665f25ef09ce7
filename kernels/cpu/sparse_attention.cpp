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

}  // namespace

void attend_with_sink(const float* q, const float* const* kv, int64_t n, int64_t dim, float scale, float sink,
                      float* o, float* s) {
  float mx = sink;
  for (int64_t i = 0; i < n; ++i) {
    s[i] = dot_f32(q, kv[i], dim) * scale;
    mx = std::fmax(mx, s[i]);
  }
  float den = quant::exp_f32(sink - mx);
  exp_shifted(s, n, mx);
  for (int64_t i = 0; i < n; ++i) den += s[i];
  for (int64_t d = 0; d < dim; ++d) o[d] = 0;
  for (int64_t i = 0; i < n; ++i) {
    const float p = s[i] / den;
    const float* v = kv[i];
    for (int64_t d = 0; d < dim; ++d) o[d] += p * v[d];
  }
}

}  // namespace ds4::cpu
