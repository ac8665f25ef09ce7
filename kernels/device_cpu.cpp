// kernels/device_cpu.cpp — the CPU implementation of kernels/device.h: a fixed pool of worker
// threads, matrix products over ggml-typed weights (exact row decode + FP32 dot, or Q8_1
// activations + vec_dot_q8_1 from kernels/cpu/quant_ref.h), RMSNorm.
#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <immintrin.h>
#include <string>
#include <thread>
#include <vector>

#include "ds4/result.h"
#include "kernels/cpu/dot_dispatch.h"
#include "kernels/cpu/quant_ref.h"
#include "kernels/cpu/row_pool.h"
#include "kernels/device.h"
#include "kernels/quant/act_qdq.h"

namespace ds4::dev {

namespace {

/// The same order as dot_f32_scalar with AVX registers: lane k of one __m256 is s[k]; separate
/// multiply and add (no FMA), so the result is bit-identical to the scalar loop.
__attribute__((target("avx"))) float dot_f32_avx(const float* a, const float* b, int64_t n) {
  __m256 acc = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) acc = _mm256_add_ps(acc, _mm256_mul_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i)));
  alignas(32) float s[8];
  _mm256_store_ps(s, acc);
  float r = ((s[0] + s[4]) + (s[1] + s[5])) + ((s[2] + s[6]) + (s[3] + s[7]));
  for (; i < n; ++i) r += a[i] * b[i];
  return r;
}

/// Four dot products of row `w` with x0..x3, each in dot_f32's order (independent accumulator
/// chains hide the add latency; every result is bit-identical to dot_f32(w, xk, n)).
__attribute__((target("avx"))) void dot_f32_x4_avx(const float* w, const float* const* x, int64_t n,
                                                  float* out) {
  __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 wv = _mm256_loadu_ps(w + i);
    a0 = _mm256_add_ps(a0, _mm256_mul_ps(wv, _mm256_loadu_ps(x[0] + i)));
    a1 = _mm256_add_ps(a1, _mm256_mul_ps(wv, _mm256_loadu_ps(x[1] + i)));
    a2 = _mm256_add_ps(a2, _mm256_mul_ps(wv, _mm256_loadu_ps(x[2] + i)));
    a3 = _mm256_add_ps(a3, _mm256_mul_ps(wv, _mm256_loadu_ps(x[3] + i)));
  }
  const __m256 acc[4] = {a0, a1, a2, a3};
  for (int k = 0; k < 4; ++k) {
    alignas(32) float s[8];
    _mm256_store_ps(s, acc[k]);
    float r = ((s[0] + s[4]) + (s[1] + s[5])) + ((s[2] + s[6]) + (s[3] + s[7]));
    for (int64_t j = i; j < n; ++j) r += w[j] * x[k][j];
    out[k] = r;
  }
}

float dot_f32_scalar(const float* a, const float* b, int64_t n) {
  float s[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int k = 0; k < 8; ++k) s[k] += a[i + k] * b[i + k];
  float r = ((s[0] + s[4]) + (s[1] + s[5])) + ((s[2] + s[6]) + (s[3] + s[7]));
  for (; i < n; ++i) r += a[i] * b[i];
  return r;
}

const bool kHaveAvx = __builtin_cpu_supports("avx");

}  // namespace

float dot_f32(const float* a, const float* b, int64_t n) {
  return kHaveAvx ? dot_f32_avx(a, b, n) : dot_f32_scalar(a, b, n);
}

bool is_fp8_fp4_weight(GgmlType type) {
  return type == GgmlType::F8_E4M3_R128 || type == GgmlType::MXFP4 || type == GgmlType::NVFP4_S2;
}

bool uses_q8_1(GgmlType type) {
  if (type == GgmlType::F32 || type == GgmlType::F16 || type == GgmlType::BF16) return false;
  return cpu::can_dot_q8_1(type);
}

namespace {

class CpuBuffer final : public Buffer {
 public:
  explicit CpuBuffer(uint64_t n) : bytes_(n), mem_(n, 0) {}
  void* data() override { return mem_.data(); }
  uint64_t bytes() const override { return bytes_; }

 private:
  uint64_t bytes_;
  std::vector<uint8_t> mem_;
};

/// The device's threads: its own kernels/cpu/row_pool.h WorkerPool (the pool implementation
/// matvec_q8_1 and the memory probe use, but a separate instance, so the devices of concurrent
/// CPU tensor-parallel ranks each keep their share of threads), `n` threads including the caller.
/// fn(i) for i in [0, n) runs once each; which thread runs it never changes a result. A call made
/// while this device's pool is busy (nested, or a concurrent session) runs on the calling thread.
class ThreadPool {
 public:
  explicit ThreadPool(int n) : threads_(n < 1 ? 1 : n) {}
  int size() const { return threads_; }
  void run(int64_t n, const std::function<void(int64_t)>& fn) {
    if (n <= 0) return;
    pool_.run(n, 1, threads_, [&fn](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) fn(i);
    });
  }

 private:
  int threads_;
  cpu::WorkerPool pool_;
};

constexpr int64_t kRowsPerTask = 16;

class CpuDevice final : public Device {
 public:
  explicit CpuDevice(int threads) : pool_(threads) {
    name_ = "cpu (" + std::to_string(pool_.size()) + " threads)";
  }
  const char* name() const override { return name_.c_str(); }
  int threads() const override { return pool_.size(); }
  std::unique_ptr<Buffer> alloc(uint64_t bytes) override {
    return std::make_unique<CpuBuffer>(bytes);
  }

  void matmul(const WeightMatrix& w, const float* x, int64_t n, float* y,
              ActFormat act) override {
    const WeightMatrix* ws[1] = {&w};
    float* ys[1] = {y};
    run_matmuls(ws, ys, 1, x, n, act);
  }
  void matmul2(const WeightMatrix& w0, float* y0, const WeightMatrix& w1, float* y1,
               const float* x, int64_t n, ActFormat act) override {
    DS4_CHECK(w0.in == w1.in);
    const WeightMatrix* ws[2] = {&w0, &w1};
    float* ys[2] = {y0, y1};
    run_matmuls(ws, ys, 2, x, n, act);
  }

  void rmsnorm(const float* x, const float* weight, int64_t n, int64_t dim, float eps,
               float* y) override {
    for (int64_t t = 0; t < n; ++t) {
      const float* xr = x + t * dim;
      float* yr = y + t * dim;
      float ss = 0;
      for (int64_t i = 0; i < dim; ++i) ss += xr[i] * xr[i];
      const float r = 1.0f / std::sqrt(ss / static_cast<float>(dim) + eps);
      for (int64_t i = 0; i < dim; ++i) yr[i] = weight ? weight[i] * (xr[i] * r) : xr[i] * r;
    }
  }

  void parallel_for(int64_t n, const std::function<void(int64_t)>& fn) override {
    pool_.run(n, fn);
  }
  uint64_t weight_bytes_read() const override { return weight_bytes_.load(std::memory_order_relaxed); }

 private:
  void run_matmuls(const WeightMatrix* const* ws, float* const* ys, int nw, const float* x,
                   int64_t n, ActFormat act) {
    const int64_t in = ws[0]->in;
    for (int k = 0; k < nw; ++k) {
      DS4_CHECK(ws[k]->data != nullptr && ws[k]->in == in);
      DS4_CHECK(ws[k]->type == GgmlType::F32 || cpu::can_dequantize(ws[k]->type));
      weight_bytes_.fetch_add(static_cast<uint64_t>(ws[k]->out) * ws[k]->row_bytes, std::memory_order_relaxed);
    }
    // Q8_1 activations, one row per token, quantized once for all matrices.
    bool q8[2] = {false, false};
    cpu::RowsDotFn rows_dot[2] = {nullptr, nullptr};
    bool any_q8 = false;
    for (int k = 0; k < nw; ++k) {
      q8[k] = act == ActFormat::Q8_1 && uses_q8_1(ws[k]->type);
      if (q8[k]) rows_dot[k] = cpu::simd_rows_dot(ws[k]->type);
      any_q8 = any_q8 || q8[k];
    }
    // FP8_QDQ: one quantize-dequantized copy of the activations for the FP8/FP4 weights.
    std::vector<float> xqdq;
    const float* xw[2] = {x, x};
    for (int k = 0; k < nw && act == ActFormat::FP8_QDQ; ++k) {
      if (!is_fp8_fp4_weight(ws[k]->type)) continue;
      if (xqdq.empty()) {
        DS4_CHECK(in % 128 == 0);
        xqdq.assign(x, x + n * in);
        for (int64_t t = 0; t < n; ++t) quant::qdq_fp8_e4m3(xqdq.data() + t * in, in, 128);
      }
      xw[k] = xqdq.data();
    }
    const int64_t q8_row_bytes = in / 32 * 36;
    std::vector<uint8_t> xq;  // per call: concurrent sessions may share the device
    if (any_q8) {
      DS4_CHECK(in % 32 == 0);
      xq.resize(static_cast<size_t>(n * q8_row_bytes));
      for (int64_t t = 0; t < n; ++t) cpu::quantize_row_q8_1(x + t * in, xq.data() + t * q8_row_bytes, in);
    }
    int64_t tasks_per_w[2] = {0, 0};
    int64_t total = 0;
    for (int k = 0; k < nw; ++k) {
      tasks_per_w[k] = (ws[k]->out + kRowsPerTask - 1) / kRowsPerTask;
      total += tasks_per_w[k];
    }
    pool_.run(total, [&](int64_t task) {
      int k = 0;
      while (task >= tasks_per_w[k]) task -= tasks_per_w[k++];
      const WeightMatrix& w = *ws[k];
      float* y = ys[k];
      const float* x = xw[k];
      const int64_t r0 = task * kRowsPerTask, r1 = std::min(w.out, r0 + kRowsPerTask);
      thread_local std::vector<float> row;
      if (q8[k] && rows_dot[k] != nullptr) {
        // Multi-row SIMD kernel: the same bits as vec_dot_q8_1 per row (kernels/cpu/dot_dispatch.h).
        float tmp[kRowsPerTask];
        for (int64_t t = 0; t < n; ++t) {
          rows_dot[k](w.row(r0), int64_t(w.row_bytes), r1 - r0, xq.data() + t * q8_row_bytes, in, tmp);
          for (int64_t r = r0; r < r1; ++r) y[t * w.out + r] = tmp[r - r0];
        }
        return;
      }
      for (int64_t r = r0; r < r1; ++r) {
        if (q8[k]) {
          for (int64_t t = 0; t < n; ++t)
            y[t * w.out + r] = cpu::vec_dot_q8_1(w.type, w.row(r), xq.data() + t * q8_row_bytes, in);
          continue;
        }
        const float* wr;
        if (w.type == GgmlType::F32) {
          wr = reinterpret_cast<const float*>(w.row(r));
        } else {
          row.resize(static_cast<size_t>(in));
          cpu::dequantize_row(w.type, w.row(r), row.data(), in);
          wr = row.data();
        }
        int64_t t = 0;
        if (kHaveAvx) {
          for (; t + 4 <= n; t += 4) {
            const float* xs[4] = {x + t * in, x + (t + 1) * in, x + (t + 2) * in, x + (t + 3) * in};
            float o[4];
            dot_f32_x4_avx(wr, xs, in, o);
            for (int k = 0; k < 4; ++k) y[(t + k) * w.out + r] = o[k];
          }
        }
        for (; t < n; ++t) y[t * w.out + r] = dot_f32(wr, x + t * in, in);
      }
    });
  }

  ThreadPool pool_;
  std::string name_;
  std::atomic<uint64_t> weight_bytes_{0};  // launches may come from several sessions
};

}  // namespace

std::unique_ptr<Device> make_cpu_device(int threads) {
  if (threads <= 0) threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  return std::make_unique<CpuDevice>(threads);
}

}  // namespace ds4::dev
