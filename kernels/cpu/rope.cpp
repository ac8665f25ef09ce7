// kernels/cpu/rope.cpp — the rope op: interleaved rotary embedding on the last rope_dim dims
// (REF apply_rotary_emb; the angle pos*freq in FP32 as REF's torch.outer in float32).
#include "kernels/cpu/ops.h"
#include "kernels/quant/math.h"

namespace ds4::cpu {

void rope_angles(const float* freqs, int half, int64_t pos, float* cs) {
  for (int i = 0; i < half; ++i) quant::sincos_f32(static_cast<float>(pos) * freqs[i], &cs[2 * i + 1], &cs[2 * i]);
}

void rope_apply(float* x, int64_t dim, const float* freqs, int half, int64_t pos, bool inverse) {
  float cs[512];
  for (int a = 0; a < half; a += 256) {
    const int m = half - a < 256 ? half - a : 256;
    rope_angles(freqs + a, m, pos, cs);
    rope_apply_cs(x + (dim - 2 * half) + 2 * a, 2 * m, cs, m, inverse);
  }
}

void rope_apply_cs(float* x, int64_t dim, const float* cs, int half, bool inverse) {
  float* r = x + (dim - 2 * half);
  for (int i = 0; i < half; ++i) {
    const float c = cs[2 * i];
    float s = cs[2 * i + 1];
    if (inverse) s = -s;
    const float a = r[2 * i], b = r[2 * i + 1];
    r[2 * i] = a * c - b * s;
    r[2 * i + 1] = a * s + b * c;
  }
}

}  // namespace ds4::cpu
