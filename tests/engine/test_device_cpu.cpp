// Unit tests of the CPU device (kernels/device.h): matmul values against a double-precision
// reference, invariance to thread count and to the number of tokens per call (the numerics
// contract), the Q8_1 path, RMSNorm; and the in-memory expert store's slicing.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "kernels/cpu/ops.h"
#include "kernels/cpu/quant_ref.h"
#include "kernels/device.h"
#include "staging/expert_store.h"
#include "../support/test_randn.h"

namespace ds4 {
namespace {

using test::randn;

/// y [n, w.out] = w x through device tensors (upload, matmul, download).
void mm(dev::Device& d, const dev::WeightMatrix& w, const float* x, int64_t n, float* y, dev::ActFormat act) {
  auto xt = d.alloc_tensor(GgmlType::F32, w.in, n), yt = d.alloc_tensor(GgmlType::F32, w.out, n);
  d.upload(d.stream(), xt.t, x, uint64_t(n * w.in) * 4);
  d.matmul(d.stream(), d.bind(w), xt.t, yt.t, act);
  d.download(d.stream(), yt.t, y, uint64_t(n * w.out) * 4);
}

/// matmul2 through device tensors.
void mm2(dev::Device& d, const dev::WeightMatrix& w0, float* y0, const dev::WeightMatrix& w1, float* y1, const float* x,
         int64_t n, dev::ActFormat act) {
  auto xt = d.alloc_tensor(GgmlType::F32, w0.in, n);
  auto y0t = d.alloc_tensor(GgmlType::F32, w0.out, n), y1t = d.alloc_tensor(GgmlType::F32, w1.out, n);
  d.upload(d.stream(), xt.t, x, uint64_t(n * w0.in) * 4);
  d.matmul2(d.stream(), d.bind(w0), y0t.t, d.bind(w1), y1t.t, xt.t, act);
  d.download(d.stream(), y0t.t, y0, uint64_t(n * w0.out) * 4);
  d.download(d.stream(), y1t.t, y1, uint64_t(n * w1.out) * 4);
}

dev::WeightMatrix f32_matrix(const std::vector<float>& w, int64_t in, int64_t out) {
  return {GgmlType::F32, reinterpret_cast<const uint8_t*>(w.data()), in, out, static_cast<uint64_t>(in * 4)};
}

// The roofline counter: each launch adds out * row_bytes per matrix, whatever n and act.
TEST(DeviceCpu, WeightBytesReadCountsEveryMatrixOncePerLaunch) {
  const int64_t in = 64, out = 11;
  auto w = randn(in * out, 7), x = randn(3 * in, 8);
  auto d = dev::make_cpu_device(2);
  EXPECT_EQ(d->weight_bytes_read(), 0u);
  std::vector<float> y0(3 * out), y1(3 * out);
  mm(*d, f32_matrix(w, in, out), x.data(), 3, y0.data(), dev::ActFormat::F32);
  EXPECT_EQ(d->weight_bytes_read(), uint64_t(out * in * 4));
  mm(*d, f32_matrix(w, in, out), x.data(), 1, y0.data(), dev::ActFormat::Q8_1);
  EXPECT_EQ(d->weight_bytes_read(), uint64_t(2 * out * in * 4));
  mm2(*d, f32_matrix(w, in, out), y0.data(), f32_matrix(w, in, 5), y1.data(), x.data(), 2, dev::ActFormat::F32);
  EXPECT_EQ(d->weight_bytes_read(), uint64_t((2 * out + out + 5) * in * 4));
}

TEST(DeviceCpu, MatmulF32MatchesDoubleReference) {
  const int64_t in = 96, out = 37, n = 5;
  auto w = randn(in * out, 1), x = randn(n * in, 2);
  auto d = dev::make_cpu_device(3);
  std::vector<float> y(n * out);
  mm(*d, f32_matrix(w, in, out), x.data(), n, y.data(), dev::ActFormat::F32);
  for (int64_t t = 0; t < n; ++t)
    for (int64_t r = 0; r < out; ++r) {
      double s = 0;
      for (int64_t i = 0; i < in; ++i) s += double(w[r * in + i]) * x[t * in + i];
      EXPECT_NEAR(y[t * out + r], s, 1e-4) << t << "," << r;
    }
}

TEST(DeviceCpu, ResultsDoNotDependOnThreadsOrTokensPerCall) {
  const int64_t in = 256, out = 70, n = 6;
  auto wf = randn(in * out, 3), x = randn(n * in, 4);
  // An MXFP4 copy of the weights (a quantized type: exercises decode and the Q8_1 dot).
  const auto* geo = ggml_type_geometry(static_cast<uint32_t>(GgmlType::MXFP4));
  const uint64_t rb = in / geo->block_elems * geo->block_bytes;
  std::vector<uint8_t> wq(rb * out);
  for (int64_t r = 0; r < out; ++r) cpu::quantize_row(GgmlType::MXFP4, wf.data() + r * in, wq.data() + r * rb, in);
  dev::WeightMatrix w{GgmlType::MXFP4, wq.data(), in, out, rb};
  auto d1 = dev::make_cpu_device(1), d4 = dev::make_cpu_device(4);
  for (auto act : {dev::ActFormat::F32, dev::ActFormat::Q8_1}) {
    std::vector<float> a(n * out), b(n * out), c(out);
    mm(*d1, w, x.data(), n, a.data(), act);
    mm(*d4, w, x.data(), n, b.data(), act);
    EXPECT_EQ(a, b);
    for (int64_t t = 0; t < n; ++t) {
      mm(*d4, w, x.data() + t * in, 1, c.data(), act);
      for (int64_t r = 0; r < out; ++r) EXPECT_EQ(c[r], a[t * out + r]);
    }
  }
  // Q8_1 activations: each entry is the vec_dot_q8_1 of the row with the quantized token.
  std::vector<uint8_t> xq(in / 32 * 36);
  cpu::quantize_row_q8_1(x.data(), xq.data(), in);
  std::vector<float> y(n * out), yf(n * out);
  mm(*d4, w, x.data(), n, y.data(), dev::ActFormat::Q8_1);
  mm(*d4, w, x.data(), n, yf.data(), dev::ActFormat::F32);
  double max_err = 0;
  std::vector<float> wrow(in);
  for (int64_t r = 0; r < out; ++r) {
    EXPECT_EQ(y[r], cpu::vec_dot_q8_1(GgmlType::MXFP4, w.row(r), xq.data(), in));
    // |error| <= sum over blocks of (amax/127/2) * sum |w| (rounding to nearest), plus slack.
    cpu::dequantize_row(GgmlType::MXFP4, w.row(r), wrow.data(), in);
    double bound = 1e-3;
    for (int64_t b = 0; b < in / 32; ++b) {
      double amax = 0, wsum = 0;
      for (int64_t i = b * 32; i < b * 32 + 32; ++i) {
        amax = std::max(amax, std::fabs(double(x[i])));
        wsum += std::fabs(double(wrow[i]));
      }
      bound += amax / 127 / 2 * wsum * 1.01;
    }
    const double err = std::fabs(double(y[r]) - yf[r]);
    EXPECT_LE(err, bound) << r;
    max_err = std::max(max_err, err);
  }
  EXPECT_GT(max_err, 0.0);  // Q8_1 really quantized the activations
  EXPECT_TRUE(dev::uses_q8_1(GgmlType::MXFP4));
  EXPECT_FALSE(dev::uses_q8_1(GgmlType::F32));
}

// The Q8_1 matmul (multi-row SIMD kernels where selected) gives, for every token and row, the
// bits of the per-row vec_dot_q8_1 of that row with that token's Q8_1 blocks; 70 rows cut the
// 16-row tasks unevenly.
TEST(DeviceCpu, Q8MatmulEqualsPerRowDotForEveryType) {
  const int64_t in = 512, out = 70, n = 3;
  auto wf = randn(in * out, 11), x = randn(n * in, 12);
  auto d = dev::make_cpu_device(2);
  for (GgmlType type : {GgmlType::Q8_0, GgmlType::MXFP4, GgmlType::Q2_K, GgmlType::IQ2_XXS, GgmlType::IQ2_XS,
                        GgmlType::IQ1_S, GgmlType::IQ1_M}) {
    SCOPED_TRACE(ggml_type_name(static_cast<uint32_t>(type)));
    ASSERT_TRUE(cpu::can_quantize(type));
    const auto* geo = ggml_type_geometry(static_cast<uint32_t>(type));
    const uint64_t rb = in / geo->block_elems * geo->block_bytes;
    std::vector<uint8_t> wq(rb * out);
    for (int64_t r = 0; r < out; ++r) cpu::quantize_row(type, wf.data() + r * in, wq.data() + r * rb, in);
    const dev::WeightMatrix w{type, wq.data(), in, out, rb};
    std::vector<float> y(n * out);
    mm(*d, w, x.data(), n, y.data(), dev::ActFormat::Q8_1);
    std::vector<uint8_t> xq(in / 32 * 36);
    for (int64_t t = 0; t < n; ++t) {
      cpu::quantize_row_q8_1(x.data() + t * in, xq.data(), in);
      for (int64_t r = 0; r < out; ++r) ASSERT_EQ(y[t * out + r], cpu::vec_dot_q8_1(type, w.row(r), xq.data(), in)) << t << "," << r;
    }
  }
}

// dot_f32's documented order (kernels/quant/dot_f32.h: 32 lanes i % 32 by FMA, butterfly 16..1),
// written out here independently: the (possibly vectorized) implementation must match it bit for bit.
TEST(DeviceCpu, DotF32FollowsTheDocumentedOrderExactly) {
  for (int64_t n : {0, 1, 7, 8, 9, 31, 32, 33, 64, 131, 1000}) {
    auto a = randn(n, 10 + n), b = randn(n, 20 + n);
    float s[32] = {};
    for (int64_t i = 0; i < n; ++i) s[i % 32] = std::fma(a[i], b[i], s[i % 32]);
    for (int off = 16; off >= 1; off /= 2)
      for (int l = 0; l < off; ++l) s[l] = s[l] + s[l + off];
    EXPECT_EQ(cpu::dot_f32(a.data(), b.data(), n), s[0]) << n;
  }
}

TEST(DeviceCpu, RmsNormHandCase) {
  auto d = dev::make_cpu_device(1);
  std::vector<float> x = {3, 4}, w = {1, 2}, y(2);
  auto xt = d->alloc_tensor(GgmlType::F32, 2, 1);
  d->upload(d->stream(), xt.t, x.data(), 8);
  d->rmsnorm(d->stream(), xt.t, d->bind_f32(w.data(), 2), 0.0f, xt.t);
  d->download(d->stream(), xt.t, y.data(), 8);
  EXPECT_NEAR(y[0], 3 / std::sqrt(12.5), 1e-6);
  EXPECT_NEAR(y[1], 2 * 4 / std::sqrt(12.5), 1e-6);
}

TEST(ExpertStore, SlicesSelectTheExpertsRows) {
  const int64_t in = 4, out = 3, E = 5;
  std::vector<float> merged(in * out * E);
  for (int64_t e = 0; e < E; ++e)
    for (int64_t i = 0; i < in * out; ++i) merged[e * in * out + i] = float(e * 100 + i);
  staging::MergedExpertTensor t{GgmlType::F32, reinterpret_cast<const uint8_t*>(merged.data()), in, out, E, in * 4};
  auto store = staging::make_memory_expert_store({{t, t, t}});
  ASSERT_TRUE(store.ok()) << store.error().message;
  EXPECT_EQ((*store)->expert_count(), 5);
  auto w = (*store)->get(0, 3, staging::ExpertProj::Down);
  ASSERT_TRUE(w.ok());
  EXPECT_EQ(w->out, out);
  EXPECT_EQ(reinterpret_cast<const float*>(w->row(1))[2], 300 + 1 * 4 + 2);
  EXPECT_FALSE((*store)->get(0, 5, staging::ExpertProj::Gate).ok());
  EXPECT_FALSE((*store)->get(1, 0, staging::ExpertProj::Gate).ok());
  staging::MergedExpertTensor bad = t;
  bad.n_expert = 4;
  EXPECT_FALSE(staging::make_memory_expert_store({{t, t, bad}}).ok());
}

}  // namespace
}  // namespace ds4
