// kernels/cpu/matmul.cpp — the matmul op (kernels/device.h Device::matmul): exact row decode +
// dot_f32, or Q8_1 activations + the dot_q8_1.h contract (multi-row SIMD kernels of
// kernels/cpu/dot_dispatch.h where the CPU has them: the same bits as vec_dot_q8_1 per row).
#include <algorithm>

#include "ds4/result.h"
#include "kernels/cpu/dot_dispatch.h"
#include "kernels/cpu/ops.h"
#include "kernels/cpu/quant_ref.h"

namespace ds4::cpu {

void matmul_quantize(const F32Rows& x, int64_t n, int64_t in, MatmulScratch& s) {
  DS4_CHECK(in % 32 == 0);
  const int64_t qb = in / 32 * 36;
  if (s.xq.size() < static_cast<size_t>(n * qb)) s.xq.resize(static_cast<size_t>(n * qb));
  for (int64_t t = 0; t < n; ++t) quantize_row_q8_1(x.row(t), s.xq.data() + t * qb, in);
}

void matmul_rows(const WRows& w, const F32Rows& x, const uint8_t* xq, int64_t n, bool q8, const F32Rows& y,
                 int64_t r0, int64_t r1) {
  const int64_t in = w.in, qb = in / 32 * 36;
  if (q8) {
    if (RowsDotFn rows_dot = simd_rows_dot(w.type)) {
      constexpr int64_t kMax = 16;
      float tmp[kMax];
      for (int64_t a = r0; a < r1; a += kMax) {
        const int64_t b = std::min(r1, a + kMax);
        for (int64_t t = 0; t < n; ++t) {
          rows_dot(w.row(a), int64_t(w.row_bytes), b - a, xq + t * qb, in, tmp);
          for (int64_t r = a; r < b; ++r) y.row(t)[r] = tmp[r - a];
        }
      }
      return;
    }
    for (int64_t r = r0; r < r1; ++r)
      for (int64_t t = 0; t < n; ++t) y.row(t)[r] = vec_dot_q8_1(w.type, w.row(r), xq + t * qb, in);
    return;
  }
  thread_local std::vector<float> row;
  int64_t r = r0;
  if (n < 4) {
    // Few tokens: four rows at a time against each token (independent accumulator chains; each
    // result bit-identical to dot_f32 of its row).
    for (; r + 4 <= r1; r += 4) {
      const float* wr[4];
      if (w.type == GgmlType::F32) {
        for (int k = 0; k < 4; ++k) wr[k] = reinterpret_cast<const float*>(w.row(r + k));
      } else {
        if (row.size() < static_cast<size_t>(4 * in)) row.resize(static_cast<size_t>(4 * in));
        for (int k = 0; k < 4; ++k) {
          dequantize_row(w.type, w.row(r + k), row.data() + k * in, in);
          wr[k] = row.data() + k * in;
        }
      }
      for (int64_t t = 0; t < n; ++t) {
        float o[4];
        dot_f32_rows4(wr, x.row(t), in, o);
        for (int k = 0; k < 4; ++k) y.row(t)[r + k] = o[k];
      }
    }
  }
  for (; r < r1; ++r) {
    const float* wr;
    if (w.type == GgmlType::F32) {
      wr = reinterpret_cast<const float*>(w.row(r));
    } else {
      if (row.size() < static_cast<size_t>(in)) row.resize(static_cast<size_t>(in));
      dequantize_row(w.type, w.row(r), row.data(), in);
      wr = row.data();
    }
    int64_t t = 0;
    for (; t + 4 <= n; t += 4) {
      const float* xs[4] = {x.row(t), x.row(t + 1), x.row(t + 2), x.row(t + 3)};
      float o[4];
      dot_f32_x4(wr, xs, in, o);
      for (int k = 0; k < 4; ++k) y.row(t + k)[r] = o[k];
    }
    for (; t < n; ++t) y.row(t)[r] = dot_f32(wr, x.row(t), in);
  }
}

}  // namespace ds4::cpu
