// engine/compressor.cpp — compressor block pooling (see compressor.h).
#include "engine/compressor.h"

#include <cmath>

#include "ds4/result.h"

namespace ds4 {

CompressorState::CompressorState(int ratio, int64_t d) : ratio_(ratio), d_(d), overlap_(ratio == 4) {
  DS4_CHECK(ratio > 0 && d > 0);
  reset();
}

void CompressorState::reset() {
  has_prev_ = false;
  fed_ = 0;
  cur_a_.assign(static_cast<size_t>(ratio_ * width()), 0.0f);
  cur_g_.assign(static_cast<size_t>(ratio_ * width()), 0.0f);
  if (overlap_) {
    prev_a_.assign(static_cast<size_t>(ratio_ * d_), 0.0f);
    prev_g_.assign(static_cast<size_t>(ratio_ * d_), 0.0f);
  }
}

bool CompressorState::push(int64_t pos, const float* a, const float* g, const float* ape,
                           float* out) {
  DS4_CHECK(pos == fed_);
  const int64_t w = width();
  const int slot = static_cast<int>(pos % ratio_);
  for (int64_t c = 0; c < w; ++c) {
    cur_a_[slot * w + c] = a[c];
    cur_g_[slot * w + c] = g[c] + ape[slot * w + c];
  }
  ++fed_;
  if (slot != ratio_ - 1) return false;

  const int n_cand = overlap_ ? 2 * ratio_ : ratio_;
  std::vector<float> sa(n_cand), sg(n_cand);
  for (int64_t ch = 0; ch < d_; ++ch) {
    int n = 0;
    if (overlap_) {
      for (int i = 0; i < ratio_; ++i, ++n) {
        sa[n] = prev_a_[i * d_ + ch];
        sg[n] = has_prev_ ? prev_g_[i * d_ + ch] : -INFINITY;
      }
      for (int i = 0; i < ratio_; ++i, ++n) {
        sa[n] = cur_a_[i * w + d_ + ch];
        sg[n] = cur_g_[i * w + d_ + ch];
      }
    } else {
      for (int i = 0; i < ratio_; ++i, ++n) {
        sa[n] = cur_a_[i * w + ch];
        sg[n] = cur_g_[i * w + ch];
      }
    }
    float mx = -INFINITY;
    for (int i = 0; i < n; ++i) mx = std::fmax(mx, sg[i]);
    float den = 0;
    for (int i = 0; i < n; ++i) {
      sg[i] = std::exp(sg[i] - mx);
      den += sg[i];
    }
    float acc = 0;
    for (int i = 0; i < n; ++i) acc += sa[i] * (sg[i] / den);
    out[ch] = acc;
  }
  if (overlap_) {
    for (int i = 0; i < ratio_; ++i)
      for (int64_t ch = 0; ch < d_; ++ch) {
        prev_a_[i * d_ + ch] = cur_a_[i * w + ch];
        prev_g_[i * d_ + ch] = cur_g_[i * w + ch];
      }
    has_prev_ = true;
  }
  return true;
}

}  // namespace ds4
