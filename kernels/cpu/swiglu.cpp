// kernels/cpu/swiglu.cpp — the swiglu op: clamped SwiGLU (REF Expert.forward: clamp BEFORE SiLU,
// the gate only from above), optionally times the routing weight (REF: weight before w2).
#include <algorithm>

#include "kernels/cpu/ops.h"
#include "kernels/quant/math.h"

namespace ds4::cpu {

// The loop vectorizes (math.h is branch-free); an AVX2 clone is chosen at run time where the CPU
// has it. Both clones do the same IEEE operations per element (no FMA: -ffp-contract=off and the
// clone does not enable FMA), so the bits do not depend on the clone.
__attribute__((target_clones("avx2", "default"))) void swiglu_clamped(float* g, const float* u, int64_t n,
                                                                     float limit) {
  if (limit > 0) {
    for (int64_t i = 0; i < n; ++i) {
      const float gi = g[i] < limit ? g[i] : limit;
      const float ui = u[i] < -limit ? -limit : (u[i] > limit ? limit : u[i]);
      g[i] = quant::silu_f32(gi) * ui;
    }
  } else {
    for (int64_t i = 0; i < n; ++i) g[i] = quant::silu_f32(g[i]) * u[i];
  }
}

}  // namespace ds4::cpu
