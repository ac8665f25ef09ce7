// kernels/cpu/compressor.cpp — the compressor op's per-token state machine (REF
// inference/model.py Compressor.forward; ../shared/reference/dsv4-architecture.md §2.3): every
// `ratio` tokens the projections are pooled by a per-channel softmax over the gate scores.
// ratio 4 ("overlap"): the previous block's tokens on channels [0, d) and the current block's on
// [d, 2d); ratio 128: the block's own tokens on [0, d). The device op then RMS-norms the pooled
// block and rotates it to the block start position.
#include <cmath>
#include <cstring>

#include "kernels/cpu/ops.h"
#include "kernels/quant/math.h"

namespace ds4::cpu {

bool compressor_store(const CompressorView& s, int64_t pos, const float* a, const float* g, const float* ape) {
  const int64_t w = s.width();
  const int slot = static_cast<int>(pos % s.ratio);
  // ape points into the mapped model file: a safetensors checkpoint places tensor data at any byte
  // offset (its header gives no alignment), so each value is read by memcpy, never as a float lvalue
  // (UBSan: misaligned load; found by the sanitized CLI tests on the fixture checkpoint folder).
  const unsigned char* ape_row = reinterpret_cast<const unsigned char*>(ape + slot * w);
  for (int64_t c = 0; c < w; ++c) {
    float e;
    std::memcpy(&e, ape_row + c * sizeof(float), sizeof(float));
    s.cur_a[slot * w + c] = a[c];
    s.cur_g[slot * w + c] = g[c] + e;
  }
  return slot == s.ratio - 1;
}

void compressor_pool(const CompressorView& s, int64_t pos, float* out, int64_t ch0, int64_t ch1) {
  const int64_t w = s.width(), d = s.d;
  const int ratio = s.ratio;
  const bool has_prev = pos / ratio > 0;
  float sa[256], sg[256];
  for (int64_t ch = ch0; ch < ch1; ++ch) {
    int n = 0;
    if (s.overlap()) {
      for (int i = 0; i < ratio; ++i, ++n) {
        sa[n] = s.prev_a[i * d + ch];
        sg[n] = has_prev ? s.prev_g[i * d + ch] : -INFINITY;
      }
      for (int i = 0; i < ratio; ++i, ++n) {
        sa[n] = s.cur_a[i * w + d + ch];
        sg[n] = s.cur_g[i * w + d + ch];
      }
    } else {
      for (int i = 0; i < ratio; ++i, ++n) {
        sa[n] = s.cur_a[i * w + ch];
        sg[n] = s.cur_g[i * w + ch];
      }
    }
    float mx = -INFINITY;
    for (int i = 0; i < n; ++i) mx = std::fmax(mx, sg[i]);
    for (int i = 0; i < n; ++i) sg[i] = quant::exp_f32(sg[i] - mx);  // vectorizes (CMakeLists)
    float den = 0;
    for (int i = 0; i < n; ++i) den += sg[i];
    float acc = 0;
    for (int i = 0; i < n; ++i) acc += sa[i] * (sg[i] / den);
    out[ch] = acc;
  }
}

void compressor_shift(const CompressorView& s) {
  if (!s.overlap()) return;
  const int64_t w = s.width(), d = s.d;
  for (int i = 0; i < s.ratio; ++i)
    for (int64_t ch = 0; ch < d; ++ch) {
      s.prev_a[i * d + ch] = s.cur_a[i * w + ch];
      s.prev_g[i * d + ch] = s.cur_g[i * w + ch];
    }
}

bool compressor_push(const CompressorView& s, int64_t pos, const float* a, const float* g, const float* ape,
                     float* out) {
  if (!compressor_store(s, pos, a, g, ape)) return false;
  compressor_pool(s, pos, out, 0, s.d);
  compressor_shift(s);
  return true;
}

}  // namespace ds4::cpu
