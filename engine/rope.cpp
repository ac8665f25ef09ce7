// engine/rope.cpp — RoPE tables and interleaved rotation (see rope.h for the source).
#include "engine/rope.h"

#include <algorithm>
#include <cmath>

#include "ds4/result.h"

namespace ds4 {

void yarn_correction_range(int rope_dim, double theta, const YarnParams& y, int* lo, int* hi) {
  const double pi = 3.14159265358979323846;
  auto corr_dim = [&](double rot) {
    return rope_dim * std::log(static_cast<double>(y.original_len) / (rot * 2 * pi)) /
           (2 * std::log(theta));
  };
  *lo = std::max(0, static_cast<int>(std::floor(corr_dim(y.beta_fast))));
  *hi = std::min(rope_dim - 1, static_cast<int>(std::ceil(corr_dim(y.beta_slow))));
}

RopeTable::RopeTable(int rope_dim, double theta, const YarnParams& yarn) : rope_dim_(rope_dim) {
  DS4_CHECK(rope_dim > 0 && rope_dim % 2 == 0);
  const int half = rope_dim / 2;
  freqs_.resize(half);
  for (int i = 0; i < half; ++i) {
    // REF: 1 / base ** (arange(0, dim, 2) / dim), float32.
    const float e = static_cast<float>(2 * i) / static_cast<float>(rope_dim);
    freqs_[i] = static_cast<float>(1.0 / std::pow(theta, static_cast<double>(e)));
  }
  if (yarn.original_len > 0) {
    int lo = 0, hi = 0;
    yarn_correction_range(rope_dim, theta, yarn, &lo, &hi);
    float flo = static_cast<float>(lo), fhi = static_cast<float>(hi);
    if (flo == fhi) fhi += 0.001f;
    const float factor = static_cast<float>(yarn.factor);
    for (int i = 0; i < half; ++i) {
      float ramp = std::clamp((static_cast<float>(i) - flo) / (fhi - flo), 0.0f, 1.0f);
      float smooth = 1.0f - ramp;
      freqs_[i] = freqs_[i] / factor * (1.0f - smooth) + freqs_[i] * smooth;
    }
  }
}

}  // namespace ds4
