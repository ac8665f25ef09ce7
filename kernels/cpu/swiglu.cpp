// kernels/cpu/swiglu.cpp — the swiglu op: clamped SwiGLU (REF Expert.forward: clamp BEFORE SiLU,
// the gate only from above), optionally times the routing weight (REF: weight before w2).
#include <algorithm>

#include "kernels/cpu/ops.h"
#include "kernels/quant/math.h"

namespace ds4::cpu {

void swiglu_clamped(float* g, const float* u, int64_t n, float limit) {
  for (int64_t i = 0; i < n; ++i) {
    float gi = g[i], ui = u[i];
    if (limit > 0) {
      gi = std::min(gi, limit);
      ui = std::clamp(ui, -limit, limit);
    }
    g[i] = quant::silu_f32(gi) * ui;
  }
}

}  // namespace ds4::cpu
