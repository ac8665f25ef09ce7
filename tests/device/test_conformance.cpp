// device_conformance_test (label unit): every op of kernels/device.h on a Device, against a plain
// double-precision evaluation written here from the op's documented formula (never from the
// kernels), with a named tolerance per op (kernels/NUMERICS.md). Random shapes plus the
// DeepSeek-V4-Flash shapes (dim 4096, hc 4, 64 heads of 512 with rope 64, q_lora 1024, 64 indexer
// heads of 128, 256 experts top-6, expert ff 2048, window 128). Written once for any backend: a
// backend joins by adding its factory to backends(). The CUDA backend runs it as
// device_conformance_emu_test (label emu: the backend compiled against tests/cuda_emu) and, on a
// real GPU, as device_conformance_cuda_test (label gpu; exit 77 = ctest SKIP without a device).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <list>
#include <numeric>
#include <string>

#include "kernels/comm.h"
#include "kernels/cpu/quant_ref.h"
#include "kernels/device.h"
#include "kernels/quant/act_qdq.h"
#include "tests/support/random.h"
#if defined(DS4_CONFORMANCE_CUDA_EMU) || defined(DS4_CONFORMANCE_CUDA)
#include "kernels/cuda/device_cuda.h"
#endif

namespace ds4 {
namespace {

using dev::Tensor;

// ---- named tolerances (kernels/NUMERICS.md) -----------------------------------------------
// Exact ops: copies, decode, gathers, fills, selection on given scores.
constexpr double kExact = 0.0;
// FP32 dot products / sums in the contract's order vs double: |err| <= tol * sum |terms|.
constexpr double kDotTol = 2e-6;
// Q8_1 activations: the rounding bound of the activation quantization is added (per block
// amax/127/2 * sum |w|, rounding to nearest) on top of kDotTol.
constexpr double kQ8Slack = 1.01;
// Element-wise transcendental ops (silu, sigmoid, softplus, exp in softmax): relative.
constexpr double kElemTol = 2e-6;
// Normalizations and softmax pools (one reduction + one scaling): relative to the magnitudes.
constexpr double kNormTol = 1e-5;
// Sinkhorn (20 iterations of row/column scaling): relative.
constexpr double kSinkhornTol = 1e-4;

struct Backend {
  std::string name;
  std::function<std::unique_ptr<dev::Device>()> make;
};

void PrintTo(const Backend& b, std::ostream* os) { *os << b.name; }

#ifdef DS4_CONFORMANCE_CUDA_EMU
// device_conformance_emu_test: the CUDA backend (kernels/cuda) compiled against the CUDA
// emulation (tests/cuda_emu), whose objects this binary links instead of the nvcc-built ones.
std::vector<Backend> backends() {
  return {{"cuda_emu", [] {
             auto d = cuda::make_cuda_device(cuda::CudaDeviceOptions{});
             DS4_CHECK(d.ok());
             return std::move(d).value();
           }}};
}
#elif defined(DS4_CONFORMANCE_CUDA)
// device_conformance_cuda_test: the CUDA backend on the real device 0 (main() below skips without one).
std::vector<Backend> backends() {
  return {{"cuda", [] {
             auto d = cuda::make_cuda_device(cuda::CudaDeviceOptions{});
             DS4_CHECK(d.ok());
             return std::move(d).value();
           }}};
}
#else
std::vector<Backend> backends() {
  return {{"cpu1", [] { return dev::make_cpu_device(1); }}, {"cpu3", [] { return dev::make_cpu_device(3); }}};
}
#endif

using test::randn;

class Conformance : public ::testing::TestWithParam<Backend> {
 protected:
  void SetUp() override { d_ = GetParam().make(); }
  dev::Stream& s() { return d_->stream(); }
  /// A packed F32 tensor [rows, row_len] holding v.
  Tensor up(const std::vector<float>& v, int64_t row_len, int64_t rows, int64_t planes = 1) {
    EXPECT_EQ(int64_t(v.size()), row_len * rows * planes);
    keep_.push_back(d_->alloc_tensor(GgmlType::F32, row_len, rows, planes));
    d_->upload(s(), keep_.back().t, v.data(), v.size() * 4);
    return keep_.back().t;
  }
  Tensor up_i32(const std::vector<int32_t>& v, int64_t row_len, int64_t rows) {
    keep_.push_back(d_->alloc_tensor(GgmlType::I32, row_len, rows));
    d_->upload(s(), keep_.back().t, v.data(), v.size() * 4);
    return keep_.back().t;
  }
  Tensor zeros(int64_t row_len, int64_t rows, int64_t planes = 1) {
    keep_.push_back(d_->alloc_tensor(GgmlType::F32, row_len, rows, planes));
    return keep_.back().t;
  }
  Tensor zeros_i32(int64_t row_len, int64_t rows) {
    keep_.push_back(d_->alloc_tensor(GgmlType::I32, row_len, rows));
    return keep_.back().t;
  }
  std::vector<float> get(const Tensor& t) {
    std::vector<float> v(static_cast<size_t>(t.ne0 * t.ne1 * t.ne2));
    d_->download(s(), t, v.data(), v.size() * 4);
    return v;
  }
  std::vector<int32_t> get_i32(const Tensor& t) {
    std::vector<int32_t> v(static_cast<size_t>(t.ne0 * t.ne1));
    d_->download(s(), t, v.data(), v.size() * 4);
    return v;
  }
  /// A weight matrix [out, in] of `type` made from w (quantized on the host), bound on the device.
  Tensor weight(GgmlType type, const std::vector<float>& w, int64_t in, int64_t out, std::vector<float>* decoded) {
    const uint64_t rb = dev::row_bytes_of(type, in);
    host_.emplace_back(rb * uint64_t(out));
    std::vector<uint8_t>& mem = host_.back();
    decoded->resize(static_cast<size_t>(in * out));
    for (int64_t r = 0; r < out; ++r) {
      if (type == GgmlType::F32)
        std::memcpy(mem.data() + r * rb, w.data() + r * in, size_t(in) * 4);
      else
        cpu::quantize_row(type, w.data() + r * in, mem.data() + r * rb, in);
      cpu::dequantize_row(type, mem.data() + r * rb, decoded->data() + r * in, in);  // exact decode (contract)
    }
    return d_->bind(dev::WeightMatrix{type, mem.data(), in, out, rb});
  }

  std::unique_ptr<dev::Device> d_;
  std::vector<dev::OwnedTensor> keep_;
  std::list<std::vector<uint8_t>> host_;
};

/// |got - ref| <= tol * scale + 1e-30 elementwise.
void expect_close(const std::vector<float>& got, const std::vector<double>& ref, const std::vector<double>& scale,
                  double tol, const char* what) {
  ASSERT_EQ(got.size(), ref.size()) << what;
  for (size_t i = 0; i < got.size(); ++i)
    ASSERT_LE(std::fabs(double(got[i]) - ref[i]), tol * scale[i] + 1e-30) << what << " [" << i << "] got " << got[i]
                                                                          << " want " << ref[i];
}

// ---- matmul / matmul2 ---------------------------------------------------------------------
struct MatCase {
  GgmlType type;
  int64_t in, out, n;
};

TEST_P(Conformance, MatmulEveryTypeBothActivationModesAndStridedViews) {
  const MatCase cases[] = {{GgmlType::F32, 96, 37, 5},   {GgmlType::F16, 64, 20, 3},    {GgmlType::BF16, 64, 20, 3},
                           {GgmlType::Q8_0, 256, 33, 4}, {GgmlType::MXFP4, 512, 70, 3}, {GgmlType::Q2_K, 512, 17, 2},
                           {GgmlType::IQ2_XXS, 256, 9, 2}, {GgmlType::Q8_0, 4096, 64, 2},  // Flash dim
                           {GgmlType::MXFP4, 1024, 96, 1}};                                  // Flash q_lora
  uint32_t seed = 1;
  for (const MatCase& c : cases) {
    SCOPED_TRACE(std::string(ggml_type_name(uint32_t(c.type))) + " " + std::to_string(c.in) + "x" + std::to_string(c.out));
    std::vector<float> wdec;
    const Tensor W = weight(c.type, randn(static_cast<size_t>(c.in * c.out), seed++), c.in, c.out, &wdec);
    const std::vector<float> x = randn(static_cast<size_t>(c.in * c.n), seed++);
    const Tensor X = up(x, c.in, c.n);
    for (dev::ActFormat act : {dev::ActFormat::F32, dev::ActFormat::Q8_1}) {
      const Tensor Y = zeros(c.out, c.n);
      d_->matmul(s(), W, X, Y, act);
      const std::vector<float> y = get(Y);
      const bool q8 = act == dev::ActFormat::Q8_1 && dev::uses_q8_1(c.type);
      std::vector<double> ref(y.size()), scale(y.size());
      for (int64_t t = 0; t < c.n; ++t)
        for (int64_t r = 0; r < c.out; ++r) {
          double sum = 0, mag = 0, qb = 0;
          for (int64_t i = 0; i < c.in; ++i) {
            sum += double(wdec[r * c.in + i]) * x[t * c.in + i];
            mag += std::fabs(double(wdec[r * c.in + i]) * x[t * c.in + i]);
          }
          if (q8)
            for (int64_t b = 0; b < c.in / 32; ++b) {
              double amax = 0, ws = 0;
              for (int64_t i = b * 32; i < b * 32 + 32; ++i) {
                amax = std::max(amax, std::fabs(double(x[t * c.in + i])));
                ws += std::fabs(double(wdec[r * c.in + i]));
              }
              qb += amax / 127 / 2 * ws * kQ8Slack;
            }
          ref[t * c.out + r] = sum;
          scale[t * c.out + r] = mag + (mag > 0 ? qb / kDotTol : 0);
        }
      expect_close(y, ref, scale, kDotTol, q8 ? "matmul q8" : "matmul f32");
    }
  }
  // Strided views: rows [3, 11) of W, a column slice of x's rows, y written into a column window.
  std::vector<float> wdec;
  const int64_t in = 64, out = 16, n = 3;
  const Tensor W = weight(GgmlType::F32, randn(static_cast<size_t>(2 * in * out), 99), 2 * in, out, &wdec);
  const std::vector<float> x = randn(static_cast<size_t>(3 * in * n), 98);
  const Tensor X = up(x, 3 * in, n);
  const Tensor Y = zeros(20, n);
  d_->matmul(s(), W.rows_view(3, 11).cols_view(in, 2 * in), X.cols_view(in, 2 * in), Y.cols_view(5, 13),
             dev::ActFormat::F32);
  const std::vector<float> y = get(Y);
  for (int64_t t = 0; t < n; ++t)
    for (int64_t j = 0; j < 20; ++j) {
      if (j < 5 || j >= 13) {
        ASSERT_EQ(y[t * 20 + j], 0.0f);
        continue;
      }
      double sum = 0, mag = 0;
      for (int64_t i = 0; i < in; ++i) {
        const double p = double(wdec[(3 + j - 5) * 2 * in + in + i]) * x[t * 3 * in + in + i];
        sum += p;
        mag += std::fabs(p);
      }
      ASSERT_LE(std::fabs(y[t * 20 + j] - sum), kDotTol * mag) << t << "," << j;
    }
}

// One token read from a column slice of a wider row and written into a column window (the decode
// step's grouped output projection: no packing copies for a single row) gives the packed row's
// bits, in every activation mode.
TEST_P(Conformance, MatmulOneStridedRowEqualsThePackedRow) {
  const int64_t in = 256, out = 24;
  const std::vector<float> x = randn(static_cast<size_t>(3 * in), 31);
  const Tensor X = up(x, 3 * in, 1);
  const Tensor Xp = up(std::vector<float>(x.begin() + in, x.begin() + 2 * in), in, 1);
  for (GgmlType type : {GgmlType::Q8_0, GgmlType::F16, GgmlType::MXFP4}) {
    std::vector<float> wdec;
    const Tensor W = weight(type, randn(static_cast<size_t>(in * out), 32), in, out, &wdec);
    for (dev::ActFormat act : {dev::ActFormat::F32, dev::ActFormat::Q8_1, dev::ActFormat::FP8_QDQ}) {
      const Tensor Y = zeros(out + 16, 1), Yp = zeros(out, 1);
      d_->matmul(s(), W, X.cols_view(in, 2 * in), Y.cols_view(5, 5 + out), act);
      d_->matmul(s(), W, Xp, Yp, act);
      const std::vector<float> y = get(Y), yp = get(Yp);
      for (int64_t j = 0; j < out + 16; ++j) {
        if (j < 5 || j >= 5 + out)
          ASSERT_EQ(y[size_t(j)], 0.0f) << j;
        else
          ASSERT_EQ(std::memcmp(&y[size_t(j)], &yp[size_t(j - 5)], 4), 0) << ggml_type_name(uint32_t(type)) << " " << j;
      }
    }
  }
}

TEST_P(Conformance, Matmul2EqualsTwoMatmuls) {
  std::vector<float> d0, d1;
  const Tensor W0 = weight(GgmlType::MXFP4, randn(256 * 40, 5), 256, 40, &d0);
  const Tensor W1 = weight(GgmlType::Q8_0, randn(256 * 24, 6), 256, 24, &d1);
  const Tensor X = up(randn(256 * 3, 7), 256, 3);
  for (dev::ActFormat act : {dev::ActFormat::F32, dev::ActFormat::Q8_1}) {
    const Tensor A0 = zeros(40, 3), A1 = zeros(24, 3), B0 = zeros(40, 3), B1 = zeros(24, 3);
    d_->matmul2(s(), W0, A0, W1, A1, X, act);
    d_->matmul(s(), W0, X, B0, act);
    d_->matmul(s(), W1, X, B1, act);
    EXPECT_EQ(get(A0), get(B0));
    EXPECT_EQ(get(A1), get(B1));
  }
}

// FP8_QDQ (--activations fp8): for FP8/FP4 weight types the activations are FP8 E4M3 QDQ'd in
// 1x128 blocks (act_qdq.h's scalar functions, tested in tests/quant/test_act_qdq.cpp), then the
// F32 path: checked against a double dot with the QDQ'd activations; other types are the F32 bits.
TEST_P(Conformance, MatmulFp8QdqQuantizesOnlyFp8Fp4Weights) {
  const int64_t in = 512, n = 3;
  std::vector<float> d0, d1;
  const Tensor W0 = weight(GgmlType::MXFP4, randn(in * 40, 11), in, 40, &d0);
  const Tensor W1 = weight(GgmlType::Q8_0, randn(in * 24, 12), in, 24, &d1);
  std::vector<float> x = randn(static_cast<size_t>(in * n), 13, 3.0f);
  x[5] = 0.0f;  // a block with a zero and a large value
  x[7] = 700.0f;
  const Tensor X = up(x, in, n);
  ASSERT_TRUE(dev::is_fp8_fp4_weight(GgmlType::MXFP4));
  ASSERT_FALSE(dev::is_fp8_fp4_weight(GgmlType::Q8_0));
  std::vector<float> xq = x;
  for (int64_t t = 0; t < n; ++t) quant::qdq_fp8_e4m3(xq.data() + t * in, in, 128);
  ASSERT_NE(xq, x);  // the QDQ changes the activations
  const Tensor A0 = zeros(40, n), A1 = zeros(24, n), F1 = zeros(24, n), B0 = zeros(40, n);
  d_->matmul2(s(), W0, A0, W1, A1, X, dev::ActFormat::FP8_QDQ);
  d_->matmul(s(), W0, X, B0, dev::ActFormat::FP8_QDQ);
  d_->matmul(s(), W1, X, F1, dev::ActFormat::F32);
  const std::vector<float> y0 = get(A0);
  EXPECT_EQ(y0, get(B0));
  EXPECT_EQ(get(A1), get(F1));  // Q8_0 weight: the unquantized F32 path, bit for bit
  std::vector<double> ref(y0.size()), scale(y0.size()), ref_raw(y0.size());
  for (int64_t t = 0; t < n; ++t)
    for (int64_t r = 0; r < 40; ++r) {
      double sum = 0, mag = 0, raw = 0;
      for (int64_t i = 0; i < in; ++i) {
        sum += double(d0[r * in + i]) * xq[t * in + i];
        raw += double(d0[r * in + i]) * x[t * in + i];
        mag += std::fabs(double(d0[r * in + i]) * xq[t * in + i]);
      }
      ref[t * 40 + r] = sum;
      ref_raw[t * 40 + r] = raw;
      scale[t * 40 + r] = mag;
    }
  expect_close(y0, ref, scale, kDotTol, "matmul fp8_qdq");
  double diff = 0;  // and the result is not the unquantized product
  for (size_t i = 0; i < y0.size(); ++i) diff = std::max(diff, std::fabs(y0[i] - ref_raw[i]));
  EXPECT_GT(diff, 1e-3);
}

// ---- act_qdq ------------------------------------------------------------------------------
/// The normalized Walsh-Hadamard transform of v (Sylvester order: H[i][j] = (-1)^popcount(i & j)),
/// in double.
std::vector<double> hadamard_double(const float* v, int64_t n) {
  std::vector<double> o(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    double acc = 0;
    for (int64_t j = 0; j < n; ++j) acc += (__builtin_popcountll(uint64_t(i & j)) & 1 ? -1.0 : 1.0) * v[j];
    o[size_t(i)] = acc / std::sqrt(double(n));
  }
  return o;
}

TEST_P(Conformance, ActQdqFp8AndHadamardFp4AgainstScalarAndDouble) {
  // Flash shapes: KV head 512 with rope 64 (FP8 on the first 448 in 64-blocks); 4 indexer heads of
  // 128 (Hadamard + FP4 in 32-blocks); a strided column view for the FP8 case.
  const int64_t n = 5;
  {
    const int64_t D = 512, len = 448, heads = 2;
    std::vector<float> x = randn(static_cast<size_t>(n * (heads * D + 64)), 21, 2.0f);
    x[3] = 0.0f;
    const Tensor X = up(x, heads * D + 64, n);
    d_->act_qdq(s(), X.cols_view(64, 64 + heads * D), heads, dev::QdqMode::Fp8E4M3, len, 64);
    const std::vector<float> y = get(X);
    std::vector<float> want = x;
    for (int64_t t = 0; t < n; ++t)
      for (int64_t h = 0; h < heads; ++h) quant::qdq_fp8_e4m3(want.data() + t * (heads * D + 64) + 64 + h * D, len, 64);
    EXPECT_EQ(y, want);
    // Against double: each value within half an E4M3 step of its block's scaled grid.
    for (int64_t t = 0; t < n; ++t)
      for (int64_t h = 0; h < heads; ++h)
        for (int64_t b = 0; b < len; b += 64) {
          const int64_t o = t * (heads * D + 64) + 64 + h * D + b;
          double amax = 1e-4;
          for (int64_t i = 0; i < 64; ++i) amax = std::max(amax, std::fabs(double(x[o + i])));
          const double sc = std::exp2(std::ceil(std::log2(amax / 448)));
          for (int64_t i = 0; i < 64; ++i)
            ASSERT_LE(std::fabs(y[o + i] - double(x[o + i])), std::fabs(x[o + i]) / 16 + sc * 0x1p-10 + 1e-30)
                << t << "," << h << "," << b + i;
        }
    for (int64_t t = 0; t < n; ++t)  // untouched: the leading columns and each head's rope dims
      for (int64_t i = 0; i < heads * D + 64; ++i) {
        const int64_t c = i - 64;
        if (c < 0 || c % D >= len) {
          ASSERT_EQ(y[t * (heads * D + 64) + i], x[t * (heads * D + 64) + i]);
        }
      }
  }
  {
    const int64_t D = 128, heads = 4;
    const std::vector<float> x = randn(static_cast<size_t>(n * heads * D), 22);
    const Tensor X = up(x, heads * D, n);
    d_->act_qdq(s(), X, heads, dev::QdqMode::HadamardFp4, D, 32);
    const std::vector<float> y = get(X);
    std::vector<float> want = x;
    for (int64_t r = 0; r < n * heads; ++r) {
      quant::hadamard_normalized(want.data() + r * D, D);
      quant::qdq_fp4_e2m1(want.data() + r * D, D, 32);
    }
    EXPECT_EQ(y, want);
    // Against double: the rotated value within one FP4 grid half-step (the scale s at the top
    // of the range) of the double Hadamard, and on the grid {0, .5, 1, 1.5, 2, 3, 4, 6} * s.
    for (int64_t r = 0; r < n * heads; ++r) {
      const std::vector<double> hx = hadamard_double(x.data() + r * D, D);
      for (int64_t b = 0; b < D; b += 32) {
        double amax = 0;
        for (int64_t i = 0; i < 32; ++i) amax = std::max(amax, std::fabs(hx[size_t(b + i)]));
        const double sc = std::exp2(std::ceil(std::log2(amax / 6)));
        for (int64_t i = 0; i < 32; ++i) {
          const double v = y[r * D + b + i];
          ASSERT_LE(std::fabs(v - hx[size_t(b + i)]), sc * (1 + 1e-5)) << r << "," << b + i;
          const double q = std::fabs(v) / sc;
          const bool on_grid = q == 0 || q == 0.5 || q == 1 || q == 1.5 || q == 2 || q == 3 || q == 4 || q == 6;
          ASSERT_TRUE(on_grid) << r << "," << b + i << " q " << q;
        }
      }
    }
  }
}

// ---- exact ops ----------------------------------------------------------------------------
TEST_P(Conformance, EmbedOwnerExpandCopyFillWindowAreExact) {
  const int64_t dim = 64, vocab = 50, n = 6;
  std::vector<float> wdec;
  const Tensor W = weight(GgmlType::Q8_0, randn(static_cast<size_t>(dim * vocab), 11), dim, vocab, &wdec);
  const std::vector<int32_t> ids = {3, 49, 0, 25, 24, 3};
  const Tensor I = up_i32(ids, 1, n), E = zeros(dim, n);
  d_->embed_rows(s(), W, I, 0, 25, E);  // rank 0 of 2: rows [0, 25)
  const std::vector<float> e = get(E);
  for (int64_t t = 0; t < n; ++t)
    for (int64_t i = 0; i < dim; ++i)
      ASSERT_EQ(e[t * dim + i], ids[t] < 25 ? wdec[ids[t] * dim + i] : 0.0f) << t;
  // owner_rows over a gathered [2*n, dim]: rank 1's copy has the other rows.
  const Tensor E1 = zeros(dim, n);
  d_->embed_rows(s(), W, I, 25, 50, E1);
  std::vector<float> all = e, e1 = get(E1);
  all.insert(all.end(), e1.begin(), e1.end());
  const Tensor ALL = up(all, dim, 2 * n), O = zeros(dim, n);
  d_->owner_rows(s(), ALL, I, 25, O);
  const std::vector<float> o = get(O);
  for (int64_t t = 0; t < n; ++t)
    for (int64_t i = 0; i < dim; ++i) ASSERT_EQ(o[t * dim + i], wdec[ids[t] * dim + i]);
  // hc_expand, copy (strided), fill, window_store.
  const Tensor X = zeros(4 * dim, n);
  d_->hc_expand(s(), O, 4, X);
  const std::vector<float> x = get(X);
  for (int64_t t = 0; t < n; ++t)
    for (int j = 0; j < 4; ++j)
      for (int64_t i = 0; i < dim; ++i) ASSERT_EQ(x[(t * 4 + j) * dim + i], o[t * dim + i]);
  const Tensor C = zeros(8, n);
  d_->copy(s(), X.cols_view(3, 11), C);
  const std::vector<float> c = get(C);
  for (int64_t t = 0; t < n; ++t)
    for (int64_t i = 0; i < 8; ++i) ASSERT_EQ(c[t * 8 + i], x[t * 4 * dim + 3 + i]);
  d_->fill(s(), C, -2.5f);
  for (float v : get(C)) ASSERT_EQ(v, -2.5f);
  const int64_t win = 4;
  const Tensor R = zeros(dim, win);
  d_->window_store(s(), O, 7, R);  // positions 7..12: the last 4 (9..12) land in rows p % 4
  const std::vector<float> r = get(R);
  for (int64_t p = 9; p <= 12; ++p)
    for (int64_t i = 0; i < dim; ++i) ASSERT_EQ(r[(p % win) * dim + i], o[(p - 7) * dim + i]);
}

TEST_P(Conformance, AddScaleOrderedSumFollowTheirFormula) {
  const int64_t m = 1000, P = 8;
  const std::vector<float> a = randn(static_cast<size_t>(m), 21), b = randn(static_cast<size_t>(m), 22), parts = randn(static_cast<size_t>(P * m), 23);
  const Tensor A = up(a, m, 1), B = up(b, m, 1);
  d_->add(s(), A, B);
  d_->scale(s(), A, 0.37f);
  const std::vector<float> ab = get(A);
  for (int64_t i = 0; i < m; ++i) ASSERT_EQ(ab[i], (a[i] + b[i]) * 0.37f);  // one FP32 rounding each
  const Tensor PT = up(parts, m, P), D = zeros(m, 1);
  d_->ordered_sum(s(), PT, P, D);
  const std::vector<float> dsum = get(D);
  std::vector<double> ref(static_cast<size_t>(m)), scale(static_cast<size_t>(m));
  for (int64_t i = 0; i < m; ++i) {
    float f = parts[i];
    for (int64_t p = 1; p < P; ++p) f += parts[p * m + i];
    ASSERT_EQ(dsum[i], f);  // the written order, bit for bit
    for (int64_t p = 0; p < P; ++p) {
      ref[i] += parts[p * m + i];
      scale[i] += std::fabs(parts[p * m + i]);
    }
  }
  expect_close(dsum, ref, scale, kDotTol, "ordered_sum");
}

// ---- norms and mHC ------------------------------------------------------------------------
TEST_P(Conformance, RmsNormAgainstDouble) {
  for (int64_t dim : {2, 64, 512, 4096}) {
    const int64_t n = 3;
    const std::vector<float> x = randn(static_cast<size_t>(dim * n), uint32_t(dim)), w = randn(static_cast<size_t>(dim), uint32_t(dim + 1));
    const Tensor X = up(x, dim, n), Y = zeros(dim, n);
    d_->rmsnorm(s(), X, d_->bind_f32(w.data(), dim), 1e-6f, Y);
    const std::vector<float> y = get(Y);
    std::vector<double> ref(y.size()), scale(y.size());
    for (int64_t t = 0; t < n; ++t) {
      double ss = 0;
      for (int64_t i = 0; i < dim; ++i) ss += double(x[t * dim + i]) * x[t * dim + i];
      const double r = 1 / std::sqrt(ss / dim + 1e-6);
      for (int64_t i = 0; i < dim; ++i) {
        ref[t * dim + i] = w[i] * x[t * dim + i] * r;
        scale[t * dim + i] = std::fabs(ref[t * dim + i]);
      }
    }
    expect_close(y, ref, scale, kNormTol, "rmsnorm");
  }
}

/// Double evaluation of hc_pre for one token (the formula of Device::hc_pre).
void hc_pre_ref(const std::vector<float>& X, const std::vector<float>& fn, const std::vector<float>& sc,
                const std::vector<float>& base, int hc, int64_t dim, int iters, double eps, std::vector<double>* y,
                std::vector<double>* mix) {
  const int rows = (2 + hc) * hc;
  const int64_t nn = hc * dim;
  double ss = 0;
  for (int64_t i = 0; i < nn; ++i) ss += double(X[i]) * X[i];
  const double rs = 1 / std::sqrt(ss / nn + 1e-6);
  std::vector<double> m(static_cast<size_t>(rows));
  for (int r = 0; r < rows; ++r) {
    double d = 0;
    for (int64_t i = 0; i < nn; ++i) d += double(fn[r * nn + i]) * X[i];
    m[r] = d * rs;
  }
  auto sig = [](double v) { return 1 / (1 + std::exp(-v)); };
  mix->assign(static_cast<size_t>(rows), 0);
  for (int j = 0; j < hc; ++j) {
    (*mix)[j] = sig(m[j] * sc[0] + base[j]) + eps;
    (*mix)[hc + j] = 2 * sig(m[hc + j] * sc[1] + base[hc + j]);
  }
  std::vector<double> c(static_cast<size_t>(hc * hc));
  for (int j = 0; j < hc; ++j) {
    double mx = -1e300, sum = 0;
    for (int k = 0; k < hc; ++k) mx = std::max(mx, m[2 * hc + j * hc + k] * sc[2] + base[2 * hc + j * hc + k]);
    for (int k = 0; k < hc; ++k) sum += std::exp(m[2 * hc + j * hc + k] * sc[2] + base[2 * hc + j * hc + k] - mx);
    for (int k = 0; k < hc; ++k)
      c[j * hc + k] = std::exp(m[2 * hc + j * hc + k] * sc[2] + base[2 * hc + j * hc + k] - mx) / sum + eps;
  }
  auto col = [&] {
    for (int k = 0; k < hc; ++k) {
      double sum = eps;
      for (int j = 0; j < hc; ++j) sum += c[j * hc + k];
      for (int j = 0; j < hc; ++j) c[j * hc + k] /= sum;
    }
  };
  auto row = [&] {
    for (int j = 0; j < hc; ++j) {
      double sum = eps;
      for (int k = 0; k < hc; ++k) sum += c[j * hc + k];
      for (int k = 0; k < hc; ++k) c[j * hc + k] /= sum;
    }
  };
  col();
  for (int it = 0; it < iters - 1; ++it) {
    row();
    col();
  }
  for (int i = 0; i < hc * hc; ++i) (*mix)[2 * hc + i] = c[i];
  y->assign(static_cast<size_t>(dim), 0);
  for (int64_t d = 0; d < dim; ++d)
    for (int j = 0; j < hc; ++j) (*y)[d] += (*mix)[j] * X[j * dim + d];
}

TEST_P(Conformance, HcPrePostHeadAgainstDouble) {
  for (int64_t dim : {64, 4096}) {  // 4096 = Flash
    const int hc = 4, rows = (2 + hc) * hc, iters = 20;
    const int64_t n = 2, nn = hc * dim;
    const std::vector<float> X = randn(static_cast<size_t>(n * nn), 31), fn = randn(static_cast<size_t>(rows * nn), 32, 0.02f);
    const std::vector<float> sc = {0.5f, 0.7f, 1.1f}, base = randn(static_cast<size_t>(rows), 33);
    const Tensor XT = up(X, nn, n), Y = zeros(dim, n), MIX = zeros(rows, n);
    const Tensor FN = d_->bind_f32(fn.data(), rows * nn);
    d_->hc_pre(s(), XT, FN.reshaped(nn, rows), d_->bind_f32(sc.data(), 3), d_->bind_f32(base.data(), rows), hc, iters,
               1e-6f, 1e-6f, Y, MIX);
    const std::vector<float> y = get(Y), mix = get(MIX);
    for (int64_t t = 0; t < n; ++t) {
      std::vector<double> yr, mr;
      hc_pre_ref(std::vector<float>(X.begin() + t * nn, X.begin() + (t + 1) * nn), fn, sc, base, hc, dim, iters, 1e-6,
                 &yr, &mr);
      std::vector<float> yt(y.begin() + t * dim, y.begin() + (t + 1) * dim), mt(mix.begin() + t * rows,
                                                                                 mix.begin() + (t + 1) * rows);
      std::vector<double> ys(yr.size()), ms(mr.size(), 1.0);
      for (int64_t d = 0; d < dim; ++d)
        for (int j = 0; j < hc; ++j) ys[d] += std::fabs(mr[j] * X[t * nn + j * dim + d]);
      expect_close(mt, mr, ms, kSinkhornTol, "hc_pre mix");
      expect_close(yt, yr, ys, kSinkhornTol, "hc_pre y");
    }
    // hc_post: X'[k] = post[k] f + sum_j comb[j,k] X[j].
    const std::vector<float> f = randn(static_cast<size_t>(n * dim), 34);
    d_->hc_post(s(), up(f, dim, n), MIX, hc, XT);
    const std::vector<float> xp = get(XT);
    std::vector<double> ref(xp.size()), scale(xp.size());
    for (int64_t t = 0; t < n; ++t)
      for (int k = 0; k < hc; ++k)
        for (int64_t d = 0; d < dim; ++d) {
          const float* m = mix.data() + t * rows;
          double v = double(m[hc + k]) * f[t * dim + d], a = std::fabs(v);
          for (int j = 0; j < hc; ++j) {
            v += double(m[2 * hc + j * hc + k]) * X[t * nn + j * dim + d];
            a += std::fabs(double(m[2 * hc + j * hc + k]) * X[t * nn + j * dim + d]);
          }
          ref[t * nn + k * dim + d] = v;
          scale[t * nn + k * dim + d] = a;
        }
    expect_close(xp, ref, scale, kDotTol, "hc_post");
    // hc_head: h = sum_j (sigmoid(mixes_j * scale + base_j) + eps) X_j.
    const std::vector<float> hfn = randn(static_cast<size_t>(hc * nn), 35, 0.02f), hsc = {0.8f}, hb = randn(static_cast<size_t>(hc), 36);
    const Tensor H = zeros(dim, n);
    d_->hc_head(s(), XT, d_->bind_f32(hfn.data(), hc * nn).reshaped(nn, hc), d_->bind_f32(hsc.data(), 1),
                d_->bind_f32(hb.data(), hc), hc, 1e-6f, 1e-6f, H);
    const std::vector<float> h = get(H);
    std::vector<double> hr(h.size()), hs(h.size());
    for (int64_t t = 0; t < n; ++t) {
      double ss = 0;
      for (int64_t i = 0; i < nn; ++i) ss += double(xp[t * nn + i]) * xp[t * nn + i];
      const double rs = 1 / std::sqrt(ss / nn + 1e-6);
      for (int j = 0; j < hc; ++j) {
        double mj = 0;
        for (int64_t i = 0; i < nn; ++i) mj += double(hfn[j * nn + i]) * xp[t * nn + i];
        const double wj = 1 / (1 + std::exp(-(mj * rs * hsc[0] + hb[j]))) + 1e-6;
        for (int64_t d = 0; d < dim; ++d) {
          hr[t * dim + d] += wj * xp[t * nn + j * dim + d];
          hs[t * dim + d] += std::fabs(wj * xp[t * nn + j * dim + d]);
        }
      }
    }
    expect_close(h, hr, hs, kNormTol, "hc_head");
  }
}

// ---- RoPE ---------------------------------------------------------------------------------
TEST_P(Conformance, RopeForwardAndInverseAgainstDouble) {
  const int64_t heads = 64, D = 512, half = 32, n = 3;  // Flash: 64 heads of 512, rope 64
  std::vector<float> freqs(static_cast<size_t>(half));
  for (int64_t i = 0; i < half; ++i) freqs[i] = float(1.0 / std::pow(10000.0, 2.0 * i / 64));
  const std::vector<int32_t> pos = {0, 4095, 1000000};
  const std::vector<float> x = randn(static_cast<size_t>(n * heads * D), 41);
  const Tensor X = up(x, heads * D, n), P = up_i32(pos, 1, n), F = d_->bind_f32(freqs.data(), half);
  d_->rope(s(), X, heads, F, P, false);
  const std::vector<float> y = get(X);
  std::vector<double> ref(y.size()), scale(y.size());
  for (int64_t t = 0; t < n; ++t)
    for (int64_t h = 0; h < heads; ++h) {
      const int64_t b = t * heads * D + h * D;
      for (int64_t i = 0; i < D - 2 * half; ++i) {
        ref[b + i] = x[b + i];
        scale[b + i] = 0;
      }
      for (int64_t i = 0; i < half; ++i) {
        const double ang = double(float(pos[t]) * freqs[i]);  // the FP32 angle (REF)
        const double a = x[b + D - 2 * half + 2 * i], c = x[b + D - 2 * half + 2 * i + 1];
        ref[b + D - 2 * half + 2 * i] = a * std::cos(ang) - c * std::sin(ang);
        ref[b + D - 2 * half + 2 * i + 1] = a * std::sin(ang) + c * std::cos(ang);
        scale[b + D - 2 * half + 2 * i] = scale[b + D - 2 * half + 2 * i + 1] = std::fabs(a) + std::fabs(c);
      }
    }
  expect_close(y, ref, scale, kElemTol, "rope");
  d_->rope(s(), X, heads, F, P, true);
  // Round trip: untouched dims exact, rotated pairs within the error of two rotations.
  const std::vector<double> back(x.begin(), x.end());
  expect_close(get(X), back, scale, 4 * kElemTol, "rope inverse");
}

// ---- compressor ---------------------------------------------------------------------------
TEST_P(Conformance, CompressorAgainstDouble) {
  for (int ratio : {4, 128}) {
    const int64_t d = ratio == 4 ? 512 : 64, w = (ratio == 4 ? 2 : 1) * d, half = 32;
    const int64_t n = 3 * ratio;  // three blocks, fed as two chunks
    const std::vector<float> a = randn(static_cast<size_t>(n * w), 51), g = randn(static_cast<size_t>(n * w), 52);
    const std::vector<float> ape = randn(static_cast<size_t>(ratio * w), 53), norm = randn(static_cast<size_t>(d), 54);
    std::vector<float> freqs(static_cast<size_t>(half));
    for (int64_t i = 0; i < half; ++i) freqs[i] = float(std::pow(10000.0, -2.0 * i / 64));
    const Tensor A = up(a, w, n), G = up(g, w, n), cur = zeros(ratio * w, 2);
    const Tensor prev = ratio == 4 ? zeros(ratio * d, 2) : Tensor{}, cache = zeros(d, 4);
    const Tensor APE = d_->bind_f32(ape.data(), ratio * w), NORM = d_->bind_f32(norm.data(), d);
    const Tensor FR = d_->bind_f32(freqs.data(), half);
    const int64_t split = ratio + 1;
    d_->compressor(s(), A.rows_view(0, split), G.rows_view(0, split), APE, NORM, 1e-6f, FR, ratio, 0, cur, prev, cache);
    d_->compressor(s(), A.rows_view(split, n), G.rows_view(split, n), APE, NORM, 1e-6f, FR, ratio, split, cur, prev,
                   cache);
    const std::vector<float> got = get(cache);
    std::vector<double> ref(got.size(), 0.0), scale(got.size(), 1.0);
    for (int64_t b = 0; b < 3; ++b) {
      std::vector<double> pooled(static_cast<size_t>(d));
      for (int64_t ch = 0; ch < d; ++ch) {
        std::vector<double> sa, sg;
        if (ratio == 4) {
          for (int i = 0; i < ratio; ++i) {
            const int64_t p = (b - 1) * ratio + i;
            sa.push_back(b > 0 ? a[p * w + ch] : 0.0);
            sg.push_back(b > 0 ? double(g[p * w + ch]) + ape[i * w + ch] : -INFINITY);
          }
          for (int i = 0; i < ratio; ++i) {
            const int64_t p = b * ratio + i;
            sa.push_back(a[p * w + d + ch]);
            sg.push_back(double(g[p * w + d + ch]) + ape[i * w + d + ch]);
          }
        } else {
          for (int i = 0; i < ratio; ++i) {
            const int64_t p = b * ratio + i;
            sa.push_back(a[p * w + ch]);
            sg.push_back(double(g[p * w + ch]) + ape[i * w + ch]);
          }
        }
        const double mx = *std::max_element(sg.begin(), sg.end());
        double den = 0, acc = 0;
        for (double v : sg) den += std::exp(v - mx);
        for (size_t i = 0; i < sa.size(); ++i) acc += sa[i] * std::exp(sg[i] - mx) / den;
        pooled[ch] = acc;
      }
      double ss = 0;
      for (double v : pooled) ss += v * v;
      const double r = 1 / std::sqrt(ss / d + 1e-6);
      for (int64_t ch = 0; ch < d; ++ch) pooled[ch] *= r * norm[ch];
      for (int64_t i = 0; i < half; ++i) {  // RoPE at the block start b*ratio
        const double ang = double(float(b * ratio) * freqs[i]);
        const double x0 = pooled[d - 2 * half + 2 * i], x1 = pooled[d - 2 * half + 2 * i + 1];
        pooled[d - 2 * half + 2 * i] = x0 * std::cos(ang) - x1 * std::sin(ang);
        pooled[d - 2 * half + 2 * i + 1] = x0 * std::sin(ang) + x1 * std::cos(ang);
      }
      double mag = 0;
      for (double v : pooled) mag = std::max(mag, std::fabs(v));
      for (int64_t ch = 0; ch < d; ++ch) {
        ref[b * d + ch] = pooled[ch];
        scale[b * d + ch] = mag;
      }
    }
    for (int64_t ch = 0; ch < d; ++ch) scale[3 * d + ch] = 0;  // row 3 never written
    expect_close(got, ref, scale, kNormTol, ratio == 4 ? "compressor ratio 4" : "compressor ratio 128");
  }
}

// ---- indexer, top-k, sparse attention ------------------------------------------------------
TEST_P(Conformance, IndexerScoresTopkAgainstDouble) {
  const int64_t H = 64, D = 128, shards = 8, hs = H / shards, n = 3, pos0 = 1197, cap = 512;  // Flash indexer
  const int64_t ld = (pos0 + n) / 4;
  const std::vector<float> q = randn(static_cast<size_t>(n * H * D), 61), w = randn(static_cast<size_t>(n * H), 62), k = randn(static_cast<size_t>(cap * D), 63);
  const Tensor Q = up(q, H * D, n), W = up(w, H, n), K = up(k, D, cap), OUT = zeros(ld, n, shards);
  d_->indexer_scores(s(), Q, W, K, hs, pos0, OUT);
  const Tensor S = zeros(ld, n);
  d_->ordered_sum(s(), OUT, shards, S);
  const std::vector<float> sc = get(S);
  for (int64_t t = 0; t < n; ++t) {
    const int64_t nvis = (pos0 + t + 1) / 4;
    std::vector<float> got(sc.begin() + t * ld, sc.begin() + t * ld + nvis);
    std::vector<double> ref(static_cast<size_t>(nvis)), scale(static_cast<size_t>(nvis));
    for (int64_t j = 0; j < nvis; ++j)
      for (int64_t h = 0; h < H; ++h) {
        double dot = 0, mag = 0;
        for (int64_t i = 0; i < D; ++i) {
          dot += double(q[(t * H + h) * D + i]) * k[j * D + i];
          mag += std::fabs(double(q[(t * H + h) * D + i]) * k[j * D + i]);
        }
        ref[j] += std::max(dot, 0.0) * w[t * H + h];
        scale[j] += mag * std::fabs(w[t * H + h]);
      }
    expect_close(got, ref, scale, kDotTol, "indexer_scores");
  }
  // top-k of the given scores: exact (descending, ties to the lower index, -1 padded).
  const int64_t topk = 512;
  const Tensor SEL = zeros_i32(topk, n);
  d_->topk(s(), S, pos0, 4, SEL);
  const std::vector<int32_t> sel = get_i32(SEL);
  for (int64_t t = 0; t < n; ++t) {
    const int64_t nvis = (pos0 + t + 1) / 4;
    std::vector<int32_t> idx(static_cast<size_t>(nvis));
    std::iota(idx.begin(), idx.end(), 0);
    std::stable_sort(idx.begin(), idx.end(), [&](int32_t a, int32_t b) { return sc[t * ld + a] > sc[t * ld + b]; });
    for (int64_t i = 0; i < topk; ++i) ASSERT_EQ(sel[t * topk + i], i < nvis ? idx[i] : -1) << t << "," << i;
  }
  // Ties and fewer visible than k.
  const std::vector<float> tie = {1, 3, 3, 2, 3, 0, 0, 0};
  const Tensor TS = up(tie, 8, 1), TO = zeros_i32(4, 1);
  d_->topk(s(), TS, 4, 1, TO);  // 5 visible at ratio 1, pos 4
  EXPECT_EQ(get_i32(TO), (std::vector<int32_t>{1, 2, 4, 3}));
  d_->topk(s(), TS, 1, 1, TO);  // 2 visible
  EXPECT_EQ(get_i32(TO), (std::vector<int32_t>{1, 0, -1, -1}));
}

TEST_P(Conformance, SparseAttentionWithSinkAgainstDouble) {
  // Flash-like: 8 of 64 heads of 512, window 128, ratio 4 with 16 selections, then ratio 128 and none.
  for (int ratio : {4, 128, 0}) {
    const int64_t H = 8, D = 512, win = 128, n = 2, pos0 = 700, cap = 200, ksel = 16;
    const std::vector<float> q = randn(static_cast<size_t>(n * H * D), 71, 0.05f), kv = randn(static_cast<size_t>(n * D), 72);
    const std::vector<float> ring = randn(static_cast<size_t>(win * D), 73), ckv = randn(static_cast<size_t>(cap * D), 74);
    const std::vector<float> sinks = randn(static_cast<size_t>(H), 75);
    std::vector<int32_t> sel(static_cast<size_t>(n * ksel));
    for (int64_t i = 0; i < n * ksel; ++i) sel[i] = i % 5 == 4 ? -1 : int32_t((i * 37) % 175);
    const Tensor Q = up(q, H * D, n), KV = up(kv, D, n), R = up(ring, D, win), C = up(ckv, D, cap), O = zeros(H * D, n);
    const Tensor SEL = ratio == 4 ? up_i32(sel, ksel, n) : Tensor{};
    const float scale = float(1 / std::sqrt(double(D)));
    d_->sparse_attention(s(), Q, KV, R, ratio > 0 ? C : Tensor{}, SEL, d_->bind_f32(sinks.data(), H), ratio, pos0, scale, O);
    const std::vector<float> o = get(O);
    std::vector<double> ref(o.size()), mag(o.size());
    for (int64_t t = 0; t < n; ++t) {
      const int64_t pos = pos0 + t;
      std::vector<const float*> cand;
      for (int64_t p = pos - win + 1; p <= pos; ++p)
        cand.push_back(p >= pos0 ? kv.data() + (p - pos0) * D : ring.data() + (p % win) * D);
      if (ratio == 4) {
        for (int64_t i = 0; i < ksel; ++i)
          if (sel[t * ksel + i] >= 0) cand.push_back(ckv.data() + sel[t * ksel + i] * D);
      } else if (ratio > 0) {
        for (int64_t j = 0; j < (pos + 1) / ratio; ++j) cand.push_back(ckv.data() + j * D);
      }
      for (int64_t h = 0; h < H; ++h) {
        std::vector<double> sc;
        double mx = sinks[h];
        for (const float* v : cand) {
          double dot = 0;
          for (int64_t i = 0; i < D; ++i) dot += double(q[(t * H + h) * D + i]) * v[i];
          sc.push_back(dot * scale);
          mx = std::max(mx, sc.back());
        }
        double den = std::exp(sinks[h] - mx);
        for (double v : sc) den += std::exp(v - mx);
        for (int64_t i = 0; i < D; ++i) {
          double acc = 0, m = 0;
          for (size_t c = 0; c < cand.size(); ++c) {
            acc += std::exp(sc[c] - mx) / den * cand[c][i];
            m = std::max(m, double(std::fabs(cand[c][i])));
          }
          ref[(t * H + h) * D + i] = acc;
          mag[(t * H + h) * D + i] = m;
        }
      }
    }
    expect_close(o, ref, mag, kNormTol, "sparse_attention");
  }
}

// ---- MoE ----------------------------------------------------------------------------------
TEST_P(Conformance, RouterHashAndTopkAgainstDouble) {
  const int64_t E = 256, K = 6, n = 4, vocab = 10;  // Flash: 256 experts, top-6
  const std::vector<float> logits = randn(static_cast<size_t>(n * E), 81, 2.0f), bias = randn(static_cast<size_t>(E), 82, 0.1f);
  const Tensor L = up(logits, E, n), B = d_->bind_f32(bias.data(), E);
  const std::vector<int32_t> toks = {3, 9, 0, 3};
  std::vector<int32_t> table(static_cast<size_t>(vocab * K));
  for (int64_t i = 0; i < vocab * K; ++i) table[i] = int32_t((i * 41) % E);
  const Tensor T = up_i32(toks, 1, n), TB = d_->bind_i32(table.data(), K, vocab);
  auto sp = [](double x) { return std::sqrt(x > 20 ? x : std::log1p(std::exp(x))); };
  for (bool hash : {false, true}) {
    const Tensor IDS = zeros_i32(K, n), WT = zeros(K, n);
    d_->router(s(), L, hash ? Tensor{} : B, hash ? TB : Tensor{}, T, true, 2.5f, IDS, WT);
    const std::vector<int32_t> ids = get_i32(IDS);
    const std::vector<float> wt = get(WT);
    std::vector<double> ref(wt.size()), scale(wt.size(), 1.0);
    for (int64_t t = 0; t < n; ++t) {
      std::vector<int32_t> want;
      if (hash) {
        want.assign(table.begin() + toks[t] * K, table.begin() + (toks[t] + 1) * K);
      } else {
        std::vector<int32_t> idx(static_cast<size_t>(E));
        std::iota(idx.begin(), idx.end(), 0);
        std::stable_sort(idx.begin(), idx.end(), [&](int32_t a, int32_t b) {
          return sp(logits[t * E + a]) + bias[a] > sp(logits[t * E + b]) + bias[b];
        });
        want.assign(idx.begin(), idx.begin() + K);
      }
      double sum = 0;
      for (int32_t e : want) sum += sp(logits[t * E + e]);
      for (int64_t k = 0; k < K; ++k) {
        ASSERT_EQ(ids[t * K + k], want[k]) << t << "," << k;
        ref[t * K + k] = sp(logits[t * E + want[k]]) / sum * 2.5;
        scale[t * K + k] = std::fabs(ref[t * K + k]);
      }
    }
    expect_close(wt, ref, scale, 4 * kElemTol, hash ? "router hash" : "router topk");
  }
}

TEST_P(Conformance, SwigluAgainstDouble) {
  const int64_t ff = 2048, n = 3;  // Flash expert ff
  const std::vector<float> g = randn(static_cast<size_t>(n * ff), 91, 4.0f), u = randn(static_cast<size_t>(n * ff), 92, 4.0f);
  const std::vector<float> rw = {0.5f, 1.5f, -0.25f};
  for (float limit : {0.0f, 7.0f}) {
    const Tensor G = up(g, ff, n), U = up(u, ff, n);
    d_->swiglu(s(), G, U, limit, up(rw, n, 1).reshaped(n, 1));
    const std::vector<float> out = get(G);
    std::vector<double> ref(out.size()), scale(out.size());
    for (int64_t t = 0; t < n; ++t)
      for (int64_t j = 0; j < ff; ++j) {
        double gi = g[t * ff + j], ui = u[t * ff + j];
        if (limit > 0) {
          gi = std::min(gi, double(limit));
          ui = std::clamp(ui, -double(limit), double(limit));
        }
        ref[t * ff + j] = gi / (1 + std::exp(-gi)) * ui * rw[t];
        scale[t * ff + j] = std::fabs(ref[t * ff + j]) + 1e-30;
      }
    expect_close(out, ref, scale, 4 * kElemTol, "swiglu");
  }
}

TEST_P(Conformance, GroupedExpertsAndCombineAgainstDouble) {
  // Flash dim with a reduced ff (the full 4096x2048 matrices are covered by the matmul cases).
  const int64_t dim = 4096, ff = 128, n = 5, K = 6, E = 9;
  std::vector<std::vector<float>> dg(E), du(E), dd(E);
  std::vector<dev::ExpertTensors> ex;
  for (int e = 0; e < E; ++e)
    ex.push_back({e, weight(GgmlType::Q8_0, randn(static_cast<size_t>(dim * ff), 100 + e, 0.05f), dim, ff, &dg[e]),
                  weight(GgmlType::Q8_0, randn(static_cast<size_t>(dim * ff), 200 + e, 0.05f), dim, ff, &du[e]),
                  weight(GgmlType::Q8_0, randn(static_cast<size_t>(ff * dim), 300 + e, 0.05f), ff, dim, &dd[e])});
  std::vector<int32_t> ids(static_cast<size_t>(n * K));
  for (int64_t i = 0; i < n * K; ++i) ids[i] = int32_t((i * 5 + i / 7) % E);
  ids[3] = ids[4];  // a token with one expert in two slots (hash tables allow it)
  const std::vector<float> x = randn(static_cast<size_t>(n * dim), 401), rw = randn(static_cast<size_t>(n * K), 402);
  const Tensor X = up(x, dim, n), I = up_i32(ids, K, n), W = up(rw, K, n), Y = zeros(dim, n * K), OUT = zeros(dim, n);
  // In two launches (experts 0..3, then 4..8), as a store that hands out experts one by one.
  d_->moe_experts(s(), X, I, W, std::span(ex).subspan(0, 4), 7.0f, dev::ActFormat::F32, Y);
  d_->moe_experts(s(), X, I, W, std::span(ex).subspan(4), 7.0f, dev::ActFormat::F32, Y);
  d_->moe_combine(s(), Y, I, OUT);
  const std::vector<float> out = get(OUT);
  std::vector<double> ref(out.size()), scale(out.size());
  for (int64_t t = 0; t < n; ++t)
    for (int64_t k = 0; k < K; ++k) {
      const int e = ids[t * K + k];
      // h and a magnitude of its FP32 error: the gate/up dot magnitudes times the sensitivity of
      // clamp(silu(a)) * clamp(b) * w to a and b (|d/da| <= 1.1 |b| |w|, |d/db| <= |a| |w|).
      std::vector<double> h(static_cast<size_t>(ff)), hm(static_cast<size_t>(ff));
      for (int64_t j = 0; j < ff; ++j) {
        double a = 0, b = 0, am = 0, bm = 0;
        for (int64_t i = 0; i < dim; ++i) {
          a += double(dg[e][j * dim + i]) * x[t * dim + i];
          b += double(du[e][j * dim + i]) * x[t * dim + i];
          am += std::fabs(double(dg[e][j * dim + i]) * x[t * dim + i]);
          bm += std::fabs(double(du[e][j * dim + i]) * x[t * dim + i]);
        }
        a = std::min(a, 7.0);
        b = std::clamp(b, -7.0, 7.0);
        const double w = std::fabs(double(rw[t * K + k]));
        h[j] = a / (1 + std::exp(-a)) * b * rw[t * K + k];
        hm[j] = std::fabs(h[j]) + (1.1 * std::fabs(b) * am + std::fabs(a) * bm) * w;
      }
      for (int64_t d = 0; d < dim; ++d) {
        double y = 0, m = 0;
        for (int64_t j = 0; j < ff; ++j) {
          y += double(dd[e][d * ff + j]) * h[j];
          m += std::fabs(double(dd[e][d * ff + j])) * hm[j];
        }
        ref[t * dim + d] += y;
        scale[t * dim + d] += m;
      }
    }
  expect_close(out, ref, scale, 10 * kDotTol, "moe_experts + moe_combine");
  // The same launches given the host copy of ids (the engine's: no download on the device) write
  // the same bits.
  const Tensor Y2 = zeros(dim, n * K), OUT2 = zeros(dim, n);
  d_->moe_experts(s(), X, I, W, std::span(ex).subspan(0, 4), 7.0f, dev::ActFormat::F32, Y2, ids);
  d_->moe_experts(s(), X, I, W, std::span(ex).subspan(4), 7.0f, dev::ActFormat::F32, Y2, ids);
  d_->moe_combine(s(), Y2, I, OUT2);
  const std::vector<float> out2 = get(OUT2);
  ASSERT_EQ(out2.size(), out.size());
  EXPECT_EQ(std::memcmp(out2.data(), out.data(), out.size() * 4), 0) << "moe_experts with ids_host";
}

// ---- collectives (a one-rank group: the same calls a rank of R makes) ---------------------
TEST_P(Conformance, CollectivesOnOneRankAreIdentity) {
  auto group = comm::make_cpu_group(1);
  const std::vector<float> v = randn(100, 111);
  const Tensor A = up(v, 100, 1), B = zeros(100, 1);
  ASSERT_TRUE(d_->all_gather(s(), *group[0], A, B).ok());
  EXPECT_EQ(get(B), v);
  ASSERT_TRUE(d_->all_reduce_sum(s(), *group[0], A).ok());
  EXPECT_EQ(get(A), v);
}

INSTANTIATE_TEST_SUITE_P(Backends, Conformance, ::testing::ValuesIn(backends()),
                         [](const ::testing::TestParamInfo<Backend>& i) { return i.param.name; });

}  // namespace
}  // namespace ds4

#ifdef DS4_CONFORMANCE_CUDA
/// device_conformance_cuda_test: 77 (ctest SKIP) when the CUDA runtime reports no device, so the
/// test never passes without a GPU; otherwise the suite on device 0 (named on the first line).
int main(int argc, char** argv) {
  if (ds4::cuda::cuda_device_count() == 0) {
    std::printf("SKIPPED: no CUDA device (the CUDA runtime reports 0 devices)\n");
    return 77;
  }
  auto d = ds4::cuda::make_cuda_device(ds4::cuda::CudaDeviceOptions{});
  if (!d.ok()) {
    std::printf("FAILED: %s\n", d.error().message.c_str());
    return 1;
  }
  std::printf("device: %s\n", (*d)->name());
  std::move(d).value().reset();  // the tests make their own
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
#endif
