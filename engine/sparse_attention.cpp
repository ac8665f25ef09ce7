// engine/sparse_attention.cpp — see sparse_attention.h.
#include "engine/sparse_attention.h"

#include <cmath>

#include "kernels/device.h"

namespace ds4 {

void attend_with_sink(const float* q, const float* const* kv, int64_t n, int64_t dim, float scale,
                      float sink, float* o, float* s) {
  float mx = sink;
  for (int64_t i = 0; i < n; ++i) {
    s[i] = dev::dot_f32(q, kv[i], dim) * scale;
    mx = std::fmax(mx, s[i]);
  }
  float den = std::exp(sink - mx);
  for (int64_t i = 0; i < n; ++i) {
    s[i] = std::exp(s[i] - mx);
    den += s[i];
  }
  for (int64_t d = 0; d < dim; ++d) o[d] = 0;
  for (int64_t i = 0; i < n; ++i) {
    const float p = s[i] / den;
    const float* v = kv[i];
    for (int64_t d = 0; d < dim; ++d) o[d] += p * v[d];
  }
}

}  // namespace ds4
