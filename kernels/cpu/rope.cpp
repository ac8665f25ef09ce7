// kernels/cpu/rope.cpp — the rope op: interleaved rotary embedding on the last rope_dim dims
// (REF apply_rotary_emb; the angle pos*freq in FP32 as REF's torch.outer in float32).
#include "kernels/cpu/ops.h"
#include "kernels/quant/math.h"

namespace ds4::cpu {

void rope_apply(float* x, int64_t dim, const float* freqs, int half, int64_t pos, bool inverse) {
  float* r = x + (dim - 2 * half);
  for (int i = 0; i < half; ++i) {
    const float ang = static_cast<float>(pos) * freqs[i];
    float s, c;
    quant::sincos_f32(ang, &s, &c);
    if (inverse) s = -s;
    const float a = r[2 * i], b = r[2 * i + 1];
    r[2 * i] = a * c - b * s;
    r[2 * i + 1] = a * s + b * c;
  }
}

}  // namespace ds4::cpu
