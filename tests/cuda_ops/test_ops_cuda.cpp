// cuda_emu_ops_test (labels emu, unit): every launcher of kernels/cuda/ops/ops_cuda.h on random
// inputs (odd sizes, strided rows, NaN / inf / signed zeros where the op defines them, the edge
// cases of the CPU tests) compared BIT FOR BIT with the CPU reference of kernels/cpu (ops.h) run on
// host copies of the same inputs. Expected values always come from the CPU reference, never from
// the kernels. Built against the CUDA runtime emulation (tests/cuda_emu, -DDS4_CUDA_EMU): the
// kernels run as host code there; the same source also runs on a real GPU (label gpu build).
// Whole output buffers are compared, padding included, so a write outside the op's elements fails.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <random>
#include <type_traits>
#include <vector>

#ifndef DS4_CUDA_EMU
#include <cuda_runtime_api.h>
#endif

#include "kernels/cpu/ops.h"
#include "kernels/cpu/quant_ref.h"
#include "kernels/cuda/ops/ops_cuda.h"
#include "kernels/cuda/ops/ops_cuda_matmul.h"
#include "kernels/quant/act_qdq.h"
#include "kernels/quant/blocks.h"

namespace ds4 {
namespace {

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();

/// A device buffer of n elements of T (cudaMalloc; freed at scope end); the host never
/// dereferences it (the emulation faults when it does).
template <class T>
class DevBuf {
 public:
  explicit DevBuf(const std::vector<T>& host) : n_(host.size()) {
    EXPECT_EQ(cudaMalloc(reinterpret_cast<void**>(&p_), bytes()), cudaSuccess);
    EXPECT_EQ(cudaMemcpy(p_, host.data(), bytes(), cudaMemcpyHostToDevice), cudaSuccess);
  }
  ~DevBuf() { cudaFree(p_); }
  DevBuf(const DevBuf&) = delete;
  DevBuf& operator=(const DevBuf&) = delete;
  T* get() const { return p_; }
  std::vector<T> download() const {
    std::vector<T> v(n_);
    EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    EXPECT_EQ(cudaMemcpy(v.data(), p_, bytes(), cudaMemcpyDeviceToHost), cudaSuccess);
    return v;
  }
  size_t bytes() const { return n_ * sizeof(T) > 0 ? n_ * sizeof(T) : 4; }

 private:
  size_t n_;
  T* p_ = nullptr;
};

std::vector<float> rnd(size_t n, uint32_t seed, float lo = -2.0f, float hi = 2.0f) {
  std::mt19937 g(seed);
  std::uniform_real_distribution<float> d(lo, hi);
  std::vector<float> v(n);
  for (auto& x : v) x = d(g);
  return v;
}

std::vector<int32_t> rnd_i(size_t n, uint32_t seed, int32_t lo, int32_t hi) {
  std::mt19937 g(seed);
  std::uniform_int_distribution<int32_t> d(lo, hi);
  std::vector<int32_t> v(n);
  for (auto& x : v) x = d(g);
  return v;
}

/// Bit-for-bit comparison of two buffers of 4-byte elements (signed zeros count). A float NaN
/// matches any NaN: the NaN's sign and payload are not part of the contract (kernels/NUMERICS.md):
/// an x86 CPU returns the input's payload or the default NaN 0xFFC00000 ("-nan"), an NVIDIA GPU the
/// canonical 0x7FFFFFFF (seen on an H200, sm_90, 2026-12-04).
template <class T>
void expect_bits(const std::vector<T>& got, const std::vector<T>& want, const char* what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i) {
    uint32_t a, b;
    std::memcpy(&a, &got[i], 4);
    std::memcpy(&b, &want[i], 4);
    if constexpr (std::is_floating_point_v<T>) {
      if (std::isnan(got[i]) && std::isnan(want[i])) continue;
    }
    ASSERT_EQ(a, b) << what << " [" << i << "]: got " << got[i] << " want " << want[i];
  }
}

cudaStream_t stream() { return nullptr; }  // the default stream

#ifndef DS4_CUDA_EMU
/// On real hardware (cuda_ops_gpu_test): exit 77 (ctest SKIP) without a usable device.
class NeedsGpu : public ::testing::Environment {
 public:
  void SetUp() override {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) {
      std::printf("SKIPPED: no CUDA device\n");
      std::exit(77);
    }
  }
};
const auto* const kNeedsGpu = ::testing::AddGlobalTestEnvironment(new NeedsGpu);
#endif

constexpr uint64_t F = 4;  // bytes per element

// ---- element-wise ------------------------------------------------------------------------------

TEST(CudaOps, CopyRawWordsStrided) {
  const int64_t rows = 5, cols = 37, ls = 41, ld = 40;
  std::vector<int32_t> src = rnd_i(static_cast<size_t>(rows * ls), 1, INT32_MIN, INT32_MAX);  // NaN payloads included
  std::vector<int32_t> dst = rnd_i(static_cast<size_t>(rows * ld), 2, INT32_MIN, INT32_MAX);
  DevBuf<int32_t> S(src), D(dst);
  ASSERT_EQ(cuda::launch_copy(stream(), S.get(), ls * F, D.get(), ld * F, rows, cols), cudaSuccess);
  cpu::copy_rows(cpu::F32Rows{reinterpret_cast<float*>(src.data()), ls},
                 cpu::F32Rows{reinterpret_cast<float*>(dst.data()), ld}, cols, 0, rows);
  expect_bits(D.download(), dst, "copy");
}

TEST(CudaOps, AddScaleFillWithSpecials) {
  const int64_t rows = 4, cols = 29, ld = 31, ls = 30;
  std::vector<float> a = rnd(static_cast<size_t>(rows * ld), 3), b = rnd(static_cast<size_t>(rows * ls), 4);
  a[0] = kInf, b[0] = -kInf, a[1] = kNaN, b[2] = kNaN, a[3] = -0.0f, b[3] = 0.0f, a[4] = 3e38f, b[4] = 3e38f;
  {
    DevBuf<float> A(a), B(b);
    ASSERT_EQ(cuda::launch_add(stream(), A.get(), ld * F, B.get(), ls * F, rows, cols), cudaSuccess);
    std::vector<float> want = a;
    cpu::add_rows(cpu::F32Rows{want.data(), ld}, cpu::F32Rows{b.data(), ls}, cols, 0, rows);
    expect_bits(A.download(), want, "add");
  }
  for (float f : {0.3f, -1.0f, 0.0f, kInf}) {
    DevBuf<float> A(a);
    ASSERT_EQ(cuda::launch_scale(stream(), A.get(), ld * F, rows, cols, f), cudaSuccess);
    std::vector<float> want = a;
    cpu::scale_rows(cpu::F32Rows{want.data(), ld}, f, cols, 0, rows);
    expect_bits(A.download(), want, "scale");
  }
  for (float v : {-0.0f, 1.5f, kNaN}) {
    DevBuf<float> A(a);
    ASSERT_EQ(cuda::launch_fill(stream(), A.get(), ld * F, rows, cols, v), cudaSuccess);
    std::vector<float> want = a;
    cpu::fill_rows(cpu::F32Rows{want.data(), ld}, v, cols, 0, rows);
    expect_bits(A.download(), want, "fill");
  }
}

TEST(CudaOps, HcExpandOwnerRowsWindowStore) {
  {
    const int64_t n = 3, dim = 19, le = 21, lx = 4 * 19 + 3;
    const int hc = 4;
    std::vector<float> e = rnd(static_cast<size_t>(n * le), 5), x = rnd(static_cast<size_t>(n * lx), 6);
    DevBuf<float> E(e), X(x);
    ASSERT_EQ(cuda::launch_hc_expand(stream(), E.get(), le * F, n, dim, hc, X.get(), lx * F), cudaSuccess);
    cpu::hc_expand(cpu::F32Rows{e.data(), le}, dim, hc, cpu::F32Rows{x.data(), lx}, 0, n);
    expect_bits(X.download(), x, "hc_expand");
  }
  {
    const int64_t R = 3, n = 4, rpr = 10, dim = 23, la = 25, lo = 24;
    std::vector<float> all = rnd(static_cast<size_t>(R * n * la), 7), out = rnd(static_cast<size_t>(n * lo), 8);
    std::vector<int32_t> ids = {29, 0, 15, 9};
    DevBuf<float> A(all), O(out);
    DevBuf<int32_t> I(ids);
    ASSERT_EQ(cuda::launch_owner_rows(stream(), A.get(), la * F, R * n, I.get(), rpr, n, dim, O.get(), lo * F),
              cudaSuccess);
    cpu::owner_rows(cpu::F32Rows{all.data(), la}, ids.data(), rpr, n, dim, cpu::F32Rows{out.data(), lo}, 0, n);
    expect_bits(O.download(), out, "owner_rows");
  }
  struct W {
    int64_t n, win, pos0;
  };
  for (W c : {W{5, 8, 6}, W{11, 4, 3}, W{1, 128, 0}, W{4, 4, 9}}) {
    const int64_t D = 13, lk = 15, lr = 14;
    std::vector<float> kv = rnd(static_cast<size_t>(c.n * lk), 9), ring = rnd(static_cast<size_t>(c.win * lr), 10);
    DevBuf<float> K(kv), Rg(ring);
    ASSERT_EQ(cuda::launch_window_store(stream(), K.get(), lk * F, c.n, D, c.pos0, Rg.get(), lr * F, c.win),
              cudaSuccess);
    cpu::window_store(cpu::F32Rows{kv.data(), lk}, c.n, D, c.pos0, cpu::F32Rows{ring.data(), lr}, c.win);
    expect_bits(Rg.download(), ring, "window_store");
  }
}

// ---- normalization, rotation, activation ----------------------------------------------------

TEST(CudaOps, RmsNormWithAndWithoutWeightAndInPlace) {
  const int64_t n = 3, dim = 300, lx = 303, ly = 301;
  std::vector<float> x = rnd(static_cast<size_t>(n * lx), 11, -3, 3), y = rnd(static_cast<size_t>(n * ly), 12), w = rnd(static_cast<size_t>(dim), 13);
  x[lx] = 1e30f;  // row 1: a huge value (the sum overflows to inf: r = 0)
  for (bool with_w : {true, false}) {
    DevBuf<float> X(x), Y(y), Wt(w);
    ASSERT_EQ(cuda::launch_rmsnorm(stream(), X.get(), lx * F, with_w ? Wt.get() : nullptr, n, dim, 1e-6f, Y.get(),
                                   ly * F),
              cudaSuccess);
    std::vector<float> want = y;
    for (int64_t t = 0; t < n; ++t)
      cpu::rmsnorm_row(x.data() + t * lx, with_w ? w.data() : nullptr, dim, 1e-6f, want.data() + t * ly);
    expect_bits(Y.download(), want, "rmsnorm");
    // In place (y = x).
    ASSERT_EQ(cuda::launch_rmsnorm(stream(), X.get(), lx * F, with_w ? Wt.get() : nullptr, n, dim, 1e-6f, X.get(),
                                   lx * F),
              cudaSuccess);
    std::vector<float> want_x = x;
    for (int64_t t = 0; t < n; ++t)
      cpu::rmsnorm_row(want_x.data() + t * lx, with_w ? w.data() : nullptr, dim, 1e-6f, want_x.data() + t * lx);
    expect_bits(X.download(), want_x, "rmsnorm in place");
  }
}

TEST(CudaOps, RopeForwardInverseAndLongTables) {
  struct C {
    int64_t heads, D;
    int half;
  };
  for (C c : {C{2, 72, 20}, C{1, 640, 300}, C{3, 16, 8}}) {
    const int64_t n = 3, lx = c.heads * c.D + 5;
    std::vector<float> x = rnd(static_cast<size_t>(n * lx), 14), freqs(static_cast<size_t>(c.half));
    for (int i = 0; i < c.half; ++i) freqs[i] = float(1.0 / std::pow(10000.0, 2.0 * i / (2 * c.half)));
    std::vector<int32_t> pos = {0, 7, 100000};
    for (bool inverse : {false, true}) {
      DevBuf<float> X(x), Fr(freqs);
      DevBuf<int32_t> P(pos);
      ASSERT_EQ(cuda::launch_rope(stream(), X.get(), lx * F, n, c.heads, c.D, Fr.get(), c.half, P.get(), inverse),
                cudaSuccess);
      std::vector<float> want = x, cs(static_cast<size_t>(2 * c.half));
      for (int64_t t = 0; t < n; ++t) {
        cpu::rope_angles(freqs.data(), c.half, pos[t], cs.data());
        for (int64_t h = 0; h < c.heads; ++h)
          cpu::rope_apply_cs(want.data() + t * lx + h * c.D, c.D, cs.data(), c.half, inverse);
      }
      expect_bits(X.download(), want, "rope");
    }
  }
  EXPECT_EQ(cuda::launch_rope(stream(), nullptr, 0, 1, 1, 10, nullptr, 6, nullptr, false), cudaErrorInvalidValue);
}

TEST(CudaOps, SwigluClampedRowWeightAndSpecials) {
  const int64_t n = 3, ff = 45, lg = 47, lu = 46;
  std::vector<float> g = rnd(static_cast<size_t>(n * lg), 15, -12, 12), u = rnd(static_cast<size_t>(n * lu), 16, -12, 12),
                     rw = rnd(static_cast<size_t>(n), 17);
  g[0] = kNaN, u[1] = kNaN, g[2] = kInf, g[3] = -kInf, u[4] = -kInf, g[5] = -0.0f, g[6] = 100.0f, g[7] = -100.0f;
  for (float limit : {7.0f, 0.0f})
    for (bool with_rw : {false, true}) {
      DevBuf<float> G(g), U(u), RW(rw);
      ASSERT_EQ(cuda::launch_swiglu(stream(), G.get(), lg * F, U.get(), lu * F, n, ff, limit,
                                    with_rw ? RW.get() : nullptr),
                cudaSuccess);
      std::vector<float> want = g;
      for (int64_t t = 0; t < n; ++t) {
        cpu::swiglu_clamped(want.data() + t * lg, u.data() + t * lu, ff, limit);
        if (with_rw)
          for (int64_t j = 0; j < ff; ++j) want[t * lg + j] *= rw[t];
      }
      expect_bits(G.download(), want, "swiglu");
    }
}

TEST(CudaOps, ActQdqFp8AndHadamardFp4) {
  {
    const int64_t n = 3, heads = 2, D = 80, len = 64, block = 32, lx = heads * D + 3;
    std::vector<float> x = rnd(static_cast<size_t>(n * lx), 18, -500, 500);
    x[1] = 0.0f, x[2] = -0.0f, x[3] = 1e-30f;
    for (int64_t i = 0; i < 32; ++i) x[lx + 32 + i] = 0.0f;  // an all-zero block (the 1e-4 floor)
    DevBuf<float> X(x);
    ASSERT_EQ(cuda::launch_act_qdq(stream(), X.get(), lx * F, n, heads, D, false, len, block), cudaSuccess);
    std::vector<float> want = x;
    cpu::act_qdq_rows(cpu::F32Rows{want.data(), lx}, heads, D, false, len, block, 0, n);
    expect_bits(X.download(), want, "act_qdq fp8");
  }
  {
    const int64_t n = 2, heads = 3, D = 64, block = 32, lx = heads * D + 1;
    std::vector<float> x = rnd(static_cast<size_t>(n * lx), 19, -3, 3);
    DevBuf<float> X(x);
    ASSERT_EQ(cuda::launch_act_qdq(stream(), X.get(), lx * F, n, heads, D, true, D, block), cudaSuccess);
    std::vector<float> want = x;
    cpu::act_qdq_rows(cpu::F32Rows{want.data(), lx}, heads, D, true, D, block, 0, n);
    expect_bits(X.download(), want, "act_qdq hadamard fp4");
  }
  EXPECT_EQ(cuda::launch_act_qdq(stream(), nullptr, 0, 1, 1, 48, true, 48, 16), cudaErrorInvalidValue);
  EXPECT_EQ(cuda::launch_act_qdq(stream(), nullptr, 0, 1, 1, 64, false, 60, 16), cudaErrorInvalidValue);
}

// ---- fixed-order reductions ----------------------------------------------------------------

TEST(CudaOps, OrderedSumAndMoeCombine) {
  {
    const int64_t parts = 3, m = 1001;
    std::vector<float> src = rnd(static_cast<size_t>(parts * m), 20), dst = rnd(static_cast<size_t>(m), 21);
    src[5] = 1e30f, src[m + 5] = -1e30f, src[2 * m + 5] = 1.0f;  // order matters: (1e30 - 1e30) + 1
    DevBuf<float> S(src), Dd(dst);
    ASSERT_EQ(cuda::launch_ordered_sum(stream(), S.get(), parts, m, Dd.get()), cudaSuccess);
    cpu::ordered_sum(src.data(), parts, m, dst.data(), 0, m);
    expect_bits(Dd.download(), dst, "ordered_sum");
  }
  {
    const int64_t n = 3, K = 6, dim = 33, ls = 35, li = 7, lo = 34;
    std::vector<float> slots = rnd(static_cast<size_t>(n * K * ls), 22, -100, 100), out = rnd(static_cast<size_t>(n * lo), 23);
    std::vector<int32_t> ids = {5, 1, 9, 1, 0, 7, 0,   // token 0: a duplicate id (stable order)
                                3, 3, 3, 3, 3, 3, 0,   // all equal
                                2, 8, 4, 6, 0, 1, 0};  // column 6: padding
    DevBuf<float> S(slots), O(out);
    DevBuf<int32_t> I(ids);
    ASSERT_EQ(cuda::launch_moe_combine(stream(), S.get(), ls * F, I.get(), li * 4, n, K, dim, O.get(), lo * F),
              cudaSuccess);
    for (int64_t t = 0; t < n; ++t)
      cpu::moe_combine_row(cpu::F32Rows{slots.data() + t * K * ls, ls}, ids.data() + t * li, K, dim,
                           out.data() + t * lo);
    expect_bits(O.download(), out, "moe_combine");
  }
}

TEST(CudaOps, TopkTiesNanSignedZerosAndPadding) {
  struct C {
    int64_t ld, pos0;
    int ratio;
    int64_t k;
  };
  for (C c : {C{50, 100, 4, 8}, C{50, 0, 4, 8}, C{300, 1000, 4, 17}, C{9, 20, 1, 9}}) {
    const int64_t n = 4, ls = c.ld + 2, lo = c.k + 1;
    std::vector<float> s = rnd(static_cast<size_t>(n * ls), 24);
    for (size_t i = 0; i < s.size(); i += 3) s[i] = std::round(s[i]);  // many ties
    s[1] = kNaN, s[4] = -0.0f, s[5] = 0.0f, s[ls + 2] = kInf, s[ls + 3] = -kInf, s[2 * ls + 1] = kNaN;
    std::vector<int32_t> out = rnd_i(static_cast<size_t>(n * lo), 25, -5, 5);
    DevBuf<float> S(s);
    DevBuf<int32_t> O(out);
    ASSERT_EQ(cuda::launch_topk(stream(), S.get(), ls * F, n, c.ld, c.pos0, c.ratio, O.get(), lo * 4, c.k),
              cudaSuccess);
    std::vector<int32_t> idx(static_cast<size_t>(c.ld));
    for (int64_t t = 0; t < n; ++t) {
      const int64_t nvis = std::min<int64_t>(c.ld, cpu::compressed_visible(c.pos0 + t, c.ratio));
      int32_t* o = out.data() + t * lo;
      const int64_t m = cpu::topk_desc_into(s.data() + t * ls, nvis, c.k, o, idx.data());
      for (int64_t i = m; i < c.k; ++i) o[i] = -1;
    }
    expect_bits(O.download(), out, "topk");
  }
}

TEST(CudaOps, RouterTopkBiasHashAndNormalize) {
  const int64_t n = 4, E = 40, K = 6, ll = 43, li = 7, lw = 8;
  std::vector<float> logits = rnd(static_cast<size_t>(n * ll), 26, -25, 25), bias = rnd(static_cast<size_t>(E), 27, -0.5f, 0.5f);
  logits[3] = logits[7];  // ties
  logits[ll + 1] = kNaN, logits[ll + 2] = 30.0f, logits[2 * ll] = -kInf;
  std::vector<int32_t> tid2eid = rnd_i(static_cast<size_t>(11 * K), 28, 0, int32_t(E - 1));
  tid2eid[2] = -1;  // a bad hash id counts as s = 0
  const std::vector<int32_t> tokens = {3, 10, 0, 7};
  for (int mode = 0; mode < 3; ++mode)
    for (bool normalize : {true, false}) {
      const bool hash = mode == 2, with_bias = mode == 1;
      std::vector<int32_t> ids = rnd_i(static_cast<size_t>(n * li), 29, -3, 3);
      std::vector<float> w = rnd(static_cast<size_t>(n * lw), 30);
      DevBuf<float> L(logits), B(bias), Wt(w);
      DevBuf<int32_t> T(tid2eid), Tok(tokens), I(ids);
      ASSERT_EQ(cuda::launch_router(stream(), L.get(), ll * F, n, E, K, with_bias ? B.get() : nullptr,
                                    hash ? T.get() : nullptr, K * 4, 11, Tok.get(), normalize, 2.5f, I.get(), li * 4,
                                    Wt.get(), lw * F),
                cudaSuccess);
      std::vector<float> scratch(static_cast<size_t>(2 * E));
      std::vector<int32_t> iscratch(static_cast<size_t>(E));
      for (int64_t t = 0; t < n; ++t)
        cpu::route_token_into(logits.data() + t * ll, int(E), int(K), with_bias ? bias.data() : nullptr,
                              hash ? tid2eid.data() + tokens[t] * K : nullptr, normalize, 2.5f, ids.data() + t * li,
                              w.data() + t * lw, scratch.data(), iscratch.data());
      expect_bits(I.download(), ids, "router ids");
      expect_bits(Wt.download(), w, "router weights");
    }
  EXPECT_EQ(cuda::launch_router(stream(), nullptr, 0, 1, 4, 5, nullptr, nullptr, 0, 0, nullptr, true, 1.0f, nullptr,
                                0, nullptr, 0),
            cudaErrorInvalidValue);
}

// ---- mHC -----------------------------------------------------------------------------------

TEST(CudaOps, HcPrePostHead) {
  const int hc = 4;
  const int64_t n = 3, dim = 40, lx = hc * dim + 3, R = (2 + hc) * hc, ly = dim + 1, lm = R + 2;
  std::vector<float> x = rnd(static_cast<size_t>(n * lx), 31), fn = rnd(static_cast<size_t>(R * hc * dim), 32, -0.1f, 0.1f),
                     scale = {0.7f, 1.3f, 0.9f}, base = rnd(static_cast<size_t>(R), 33, -1, 1);
  for (int iters : {3, 1}) {
    std::vector<float> y = rnd(static_cast<size_t>(n * ly), 34), mix = rnd(static_cast<size_t>(n * lm), 35);
    DevBuf<float> X(x), Fn(fn), S(scale), B(base), Y(y), M(mix);
    ASSERT_EQ(cuda::launch_hc_pre(stream(), X.get(), lx * F, Fn.get(), hc * dim * F, S.get(), B.get(), hc, dim, n,
                                  iters, 1e-6f, 1e-6f, Y.get(), ly * F, M.get(), lm * F),
              cudaSuccess);
    for (int64_t t = 0; t < n; ++t)
      cpu::hc_pre_row(x.data() + t * lx, fn.data(), scale.data(), base.data(), hc, dim, iters, 1e-6f, 1e-6f,
                      y.data() + t * ly, mix.data() + t * lm);
    expect_bits(Y.download(), y, "hc_pre y");
    expect_bits(M.download(), mix, "hc_pre mix");
    // hc_post with that mix.
    const int64_t lf = dim + 2;
    std::vector<float> f = rnd(static_cast<size_t>(n * lf), 36), xx = x;
    DevBuf<float> Fv(f), X2(xx);
    ASSERT_EQ(cuda::launch_hc_post(stream(), Fv.get(), lf * F, M.get(), lm * F, hc, dim, n, X2.get(), lx * F),
              cudaSuccess);
    std::vector<float> tmp(static_cast<size_t>(hc * dim));
    for (int64_t t = 0; t < n; ++t)
      cpu::hc_post_row(f.data() + t * lf, mix.data() + t * lm, hc, dim, xx.data() + t * lx, tmp.data());
    expect_bits(X2.download(), xx, "hc_post");
  }
  {
    const int64_t lh = dim + 3;
    std::vector<float> fnh = rnd(static_cast<size_t>(hc * hc * dim), 37, -0.1f, 0.1f), baseh = rnd(static_cast<size_t>(hc), 38),
                       h = rnd(static_cast<size_t>(n * lh), 39);
    DevBuf<float> X(x), Fn(fnh), S(scale), B(baseh), H(h);
    ASSERT_EQ(cuda::launch_hc_head(stream(), X.get(), lx * F, Fn.get(), hc * dim * F, S.get(), B.get(), hc, dim, n,
                                   1e-6f, 1e-6f, H.get(), lh * F),
              cudaSuccess);
    for (int64_t t = 0; t < n; ++t)
      cpu::hc_head_row(x.data() + t * lx, fnh.data(), scale.data(), baseh.data(), hc, dim, 1e-6f, 1e-6f,
                       h.data() + t * lh);
    expect_bits(H.download(), h, "hc_head");
  }
}

// ---- attention side --------------------------------------------------------------------------

TEST(CudaOps, SparseAttentionWindowSelectionAndRatios) {
  const int64_t H = 2, D = 40, n = 3, win = 4, pos0 = 5, lq = H * D + 1, lk = D + 2, lr = D + 1, lc = D + 3,
                lo = H * D + 2, cap = 6, ksel = 5, lsel = 6;
  std::vector<float> q = rnd(static_cast<size_t>(n * lq), 40), kv = rnd(static_cast<size_t>(n * lk), 41), ring = rnd(static_cast<size_t>(win * lr), 42),
                     ckv = rnd(static_cast<size_t>(cap * lc), 43), sinks = {0.5f, -1.0f};
  std::vector<int32_t> sel = {2, -1, 0, 5, -1, 0, 1, 1, -1, -1, -1, 0, 4, 3, 2, 1, 0, 0};
  for (int ratio : {4, 8, 0}) {
    std::vector<float> out = rnd(static_cast<size_t>(n * lo), 44);
    DevBuf<float> Q(q), KV(kv), Rg(ring), C(ckv), Sk(sinks), O(out);
    DevBuf<int32_t> Sl(sel);
    ASSERT_EQ(cuda::launch_sparse_attention(stream(), Q.get(), lq * F, KV.get(), lk * F, Rg.get(), lr * F, win, C.get(),
                                            lc * F, cap, Sl.get(), lsel * 4, ksel, Sk.get(), ratio, n, H, D, pos0,
                                            0.125f, O.get(), lo * F),
              cudaSuccess);
    // The CPU device's candidate list (kernels/device_cpu.cpp sparse_attention) + attend_with_sink.
    std::vector<float> scratch(64);
    for (int64_t t = 0; t < n; ++t) {
      const int64_t pos = pos0 + t;
      std::vector<const float*> cand;
      for (int64_t p = std::max<int64_t>(0, pos - win + 1); p <= pos; ++p)
        cand.push_back(p >= pos0 ? kv.data() + (p - pos0) * lk : ring.data() + (p % win) * lr);
      if (ratio == 4) {
        for (int64_t i = 0; i < ksel; ++i)
          if (sel[t * lsel + i] >= 0) cand.push_back(ckv.data() + sel[t * lsel + i] * lc);
      } else if (ratio > 0) {
        for (int64_t j = 0; j < cpu::compressed_visible(pos, ratio); ++j) cand.push_back(ckv.data() + j * lc);
      }
      for (int64_t h = 0; h < H; ++h)
        cpu::attend_with_sink(q.data() + t * lq + h * D, cand.data(), int64_t(cand.size()), D, 0.125f, sinks[h],
                              out.data() + t * lo + h * D, scratch.data());
    }
    expect_bits(O.download(), out, "sparse_attention");
  }
}

/// One sparse_attention case for SparseAttentionDecodeAndEdgeCases: shapes, positions, the
/// selection (ratio 4) and optional special values.
struct SaCase {
  const char* name;
  int64_t H, D, n, win, pos0, cap;  // cap: ckv rows
  int ratio;
  int64_t ksel;
  std::vector<int32_t> sel;  // [n, ksel] packed (ratio 4)
  float scale = 0.06f;
  bool zero_q = false;        // all scores +-0 (with a negative scale: -0)
  float sink0 = 0.25f;        // sinks[0]; the others random
  bool nan_row = false;       // ckv row 1 holds a NaN
};

/// Runs launch_sparse_attention on c and compares with the CPU device's candidate list +
/// attend_with_sink bit for bit (padded row strides everywhere).
void check_sparse_attention(const SaCase& c, uint32_t seed) {
  SCOPED_TRACE(c.name);
  const int64_t H = c.H, D = c.D, n = c.n, lq = H * D + 3, lk = D + 1, lr = D + 2, lc = D + 5, lo = H * D + 1,
                lsel = c.ksel + 2;
  const auto sz = [](int64_t v) { return static_cast<size_t>(v); };
  std::vector<float> q = rnd(sz(n * lq), seed, -0.3f, 0.3f), kv = rnd(sz(n * lk), seed + 1),
                     ring = rnd(sz(c.win * lr), seed + 2), ckv = rnd(sz(std::max<int64_t>(1, c.cap) * lc), seed + 3),
                     sinks = rnd(sz(H), seed + 4), out = rnd(sz(n * lo), seed + 5);
  sinks[0] = c.sink0;
  if (c.zero_q) std::fill(q.begin(), q.end(), 0.0f);
  if (c.nan_row) ckv[1 * lc + 7] = std::numeric_limits<float>::quiet_NaN();
  std::vector<int32_t> sel(static_cast<size_t>(std::max<int64_t>(1, n * lsel)), -7);
  for (int64_t t = 0; t < n; ++t)
    for (int64_t i = 0; i < c.ksel; ++i) sel[t * lsel + i] = c.sel[t * c.ksel + i];
  DevBuf<float> Q(q), KV(kv), Rg(ring), C(ckv), Sk(sinks), O(out);
  DevBuf<int32_t> Sl(sel);
  ASSERT_EQ(cuda::launch_sparse_attention(stream(), Q.get(), lq * F, KV.get(), lk * F, Rg.get(), lr * F, c.win,
                                          C.get(), lc * F, c.cap, Sl.get(), lsel * 4, c.ksel, Sk.get(), c.ratio, n, H,
                                          D, c.pos0, c.scale, O.get(), lo * F),
            cudaSuccess);
  std::vector<float> scratch(static_cast<size_t>(c.win + c.ksel + c.cap + 1));
  for (int64_t t = 0; t < n; ++t) {
    const int64_t pos = c.pos0 + t;
    std::vector<const float*> cand;
    for (int64_t p = std::max<int64_t>(0, pos - c.win + 1); p <= pos; ++p)
      cand.push_back(p >= c.pos0 ? kv.data() + (p - c.pos0) * lk : ring.data() + (p % c.win) * lr);
    if (c.ratio == 4) {
      for (int64_t i = 0; i < c.ksel; ++i) {
        const int32_t id = sel[t * lsel + i];
        if (id >= 0 && id < c.cap) cand.push_back(ckv.data() + id * lc);  // the selection holds valid ids or -1
      }
    } else if (c.ratio > 0) {
      for (int64_t j = 0; j < cpu::compressed_visible(pos, c.ratio); ++j) cand.push_back(ckv.data() + j * lc);
    }
    for (int64_t h = 0; h < H; ++h)
      cpu::attend_with_sink(q.data() + t * lq + h * D, cand.data(), int64_t(cand.size()), D, c.scale, sinks[h],
                            out.data() + t * lo + h * D, scratch.data());
  }
  expect_bits(O.download(), out, c.name);
}

/// A top-k style selection row: the given ids first, then -1 up to ksel.
std::vector<int32_t> sel_row(std::vector<int32_t> ids, int64_t ksel) {
  ids.resize(static_cast<size_t>(ksel), -1);
  return ids;
}

TEST(CudaOps, SparseAttentionDecodeAndEdgeCases) {
  const float inf = std::numeric_limits<float>::infinity();
  std::vector<SaCase> cases;
  // Decode at position 10 of a Flash-shaped ratio-4 layer: 2 visible compressed rows, the other 510
  // selection entries -1 (the topk padding), window not yet full.
  cases.push_back({"decode ratio 4 pos 10", 3, 512, 1, 128, 10, 4, 4, 512, sel_row({1, 0}, 512)});
  {  // valid ids scattered over the whole selection, across the 256-entry chunk boundaries
    std::vector<int32_t> s(512, -1);
    for (int i : {0, 1, 31, 32, 200, 255, 256, 257, 300, 383, 384, 510, 511}) s[i] = (i * 7) % 50;
    cases.push_back({"decode ratio 4 scattered", 2, 512, 1, 128, 700, 50, 4, 512, s});
  }
  {  // past the window, 40 % skipped, duplicates; D not a multiple of 32
    std::vector<int32_t> s = rnd_i(600, 80, -1, 99);
    for (size_t i = 0; i < s.size(); i += 3) s[i] = -1;
    cases.push_back({"decode ratio 4 mixed", 2, 200, 1, 128, 401, 100, 4, 600, s});
  }
  // Prefill chunk of 5 crossing the window edge: per-row selections.
  cases.push_back({"prefill ratio 4", 2, 64, 5, 8, 6, 6, 4, 5,
                   {3, -1, 0, 1, -1, -1, -1, -1, -1, -1, 2, 2, 5, -1, 4, 0, 1, 2, 3, 4, -1, -1, -1, -1, 5}});
  // Many candidates: 3,000 selection entries (12 chunks), nv above 512 (strided max / exp / divide).
  cases.push_back({"ratio 4 long selection", 2, 96, 1, 64, 5000, 1200, 4, 3000, rnd_i(3000, 81, -1, 1199)});
  cases.push_back({"ratio 128 none visible", 2, 512, 1, 128, 100, 4, 128, 0, {}});
  cases.push_back({"ratio 128 first row", 2, 512, 2, 128, 126, 4, 128, 0, {}});
  cases.push_back({"ratio 128 long", 2, 128, 2, 128, 90000, 800, 128, 0, {}});
  cases.push_back({"ratio 0 short", 2, 512, 1, 128, 3, 0, 0, 0, {}});
  cases.push_back({"ratio 0 prefill", 3, 72, 4, 16, 14, 0, 0, 0, {}});
  // D above 512: the generic dot and two output passes.
  cases.push_back({"ratio 4 D 600", 2, 600, 2, 16, 40, 12, 4, 10, rnd_i(20, 82, -1, 11)});
  {  // special values: all scores -0 with a +0 sink (a zero max), a -inf sink, a NaN in a row that
     // only token 0 selects
    SaCase z{"zero scores", 2, 64, 2, 8, 20, 8, 4, 6, rnd_i(12, 83, -1, 7), -0.5f, true, 0.0f};
    cases.push_back(z);
    z.name = "zero scores, -0 sink";
    z.sink0 = -0.0f;
    z.scale = 0.5f;
    cases.push_back(z);
    SaCase ni{"-inf sink", 2, 64, 2, 8, 20, 8, 4, 6, rnd_i(12, 84, -1, 7)};
    ni.sink0 = -inf;
    cases.push_back(ni);
    ni.name = "NaN rows";
    ni.nan_row = true;
    ni.sel = sel_row({1, -1, 2, 1}, 6);
    ni.sel.insert(ni.sel.end(), {0, 2, 3, -1, -1, -1});
    cases.push_back(ni);
  }
  uint32_t seed = 90;
  for (const SaCase& c : cases) {
    check_sparse_attention(c, seed);
    seed += 10;
  }
  // The kMaxCand limit: 128 window + 11,137 compressed rows is one candidate too many.
  EXPECT_EQ(cuda::launch_sparse_attention(stream(), nullptr, 0, nullptr, 0, nullptr, 0, 128, nullptr, 0, 20000,
                                          nullptr, 0, 0, nullptr, 128, 1, 1, 512, 11137 * 128, 0.1f, nullptr, 0),
            cudaErrorInvalidValue);
  std::vector<int32_t> dummy(1);
  DevBuf<int32_t> Dm(dummy);
  EXPECT_EQ(cuda::launch_sparse_attention(stream(), nullptr, 0, nullptr, 0, nullptr, 0, 128, nullptr, 0, 20000,
                                          Dm.get(), 0, 11137, nullptr, 4, 1, 1, 512, 500, 0.1f, nullptr, 0),
            cudaErrorInvalidValue);
}

TEST(CudaOps, CompressorOverlapAndPlainAcrossBlocks) {
  struct C {
    int ratio;
    bool overlap;
    int64_t pos0, n;
  };
  for (C c : {C{4, true, 2, 11}, C{4, true, 0, 4}, C{8, false, 3, 14}}) {
    const int64_t d = 16, w = c.overlap ? 2 * d : d, la = w + 1, lg = w + 2, cap = 4, lc = d + 1;
    const int half = 4;
    std::vector<float> a = rnd(static_cast<size_t>(c.n * la), 45), g = rnd(static_cast<size_t>(c.n * lg), 46, -4, 4),
                       ape = rnd(static_cast<size_t>(c.ratio * w), 47), norm = rnd(static_cast<size_t>(d), 48),
                       freqs = {1.0f, 0.1f, 0.01f, 0.001f};
    std::vector<float> cur = rnd(static_cast<size_t>(2 * c.ratio * w), 49), prev = rnd(static_cast<size_t>(2 * c.ratio * d), 50),
                       cache = rnd(static_cast<size_t>(cap * lc), 51);
    DevBuf<float> A(a), G(g), Ap(ape), Nm(norm), Fr(freqs), Cu(cur), Pv(prev), Ca(cache);
    ASSERT_EQ(cuda::launch_compressor(stream(), A.get(), la * F, G.get(), lg * F, c.n, Ap.get(), Nm.get(), 1e-6f,
                                      Fr.get(), half, c.ratio, d, c.pos0, Cu.get(), c.overlap ? Pv.get() : nullptr,
                                      Ca.get(), lc * F, cap),
              cudaSuccess);
    // The CPU device's loop (kernels/device_cpu.cpp compressor).
    cpu::CompressorView v{c.ratio, d, cur.data(), cur.data() + c.ratio * w, c.overlap ? prev.data() : nullptr,
                          c.overlap ? prev.data() + c.ratio * d : nullptr};
    for (int64_t t = 0; t < c.n; ++t) {
      const int64_t pos = c.pos0 + t, b = pos / c.ratio;
      if (!cpu::compressor_push(v, pos, a.data() + t * la, g.data() + t * lg, ape.data(), cache.data() + b * lc))
        continue;
      float* blk = cache.data() + b * lc;
      cpu::rmsnorm_row(blk, norm.data(), d, 1e-6f, blk);
      cpu::rope_apply(blk, d, freqs.data(), half, b * c.ratio, false);
    }
    expect_bits(Ca.download(), cache, "compressor cache");
    expect_bits(Cu.download(), cur, "compressor cur");
    expect_bits(Pv.download(), prev, "compressor prev");
  }
  EXPECT_EQ(cuda::launch_compressor(stream(), nullptr, 0, nullptr, 0, 12, nullptr, nullptr, 0, nullptr, 0, 4, 8, 0,
                                    nullptr, nullptr, nullptr, 0, 2),
            cudaErrorInvalidValue);  // positions 0..11 complete block 2; the cache holds 2 rows
}

TEST(CudaOps, IndexerScoresShards) {
  const int64_t hs = 2, shards = 2, H = 5, D = 40, n = 3, pos0 = 9, key_rows = 5, ld = 6, lq = H * D + 1, lw = H + 2,
                lk = D + 1, lo = ld + 1;
  std::vector<float> q = rnd(static_cast<size_t>(n * lq), 52), w = rnd(static_cast<size_t>(n * lw), 53), keys = rnd(static_cast<size_t>(key_rows * lk), 54),
                     out = rnd(static_cast<size_t>(shards * n * lo), 55);
  DevBuf<float> Q(q), Wt(w), K(keys), O(out);
  ASSERT_EQ(cuda::launch_indexer_scores(stream(), Q.get(), lq * F, Wt.get(), lw * F, K.get(), lk * F, key_rows, n, D,
                                        hs, shards, pos0, O.get(), lo * F, n * lo * F, ld),
            cudaSuccess);
  std::vector<float> kp(static_cast<size_t>(key_rows * D));  // the CPU reference takes packed keys
  for (int64_t j = 0; j < key_rows; ++j) std::memcpy(kp.data() + j * D, keys.data() + j * lk, D * 4);
  for (int64_t k = 0; k < shards; ++k)
    for (int64_t t = 0; t < n; ++t)
      cpu::indexer_scores(q.data() + t * lq + k * hs * D, w.data() + t * lw + k * hs, hs, D, kp.data(),
                          cpu::compressed_visible(pos0 + t, 4), out.data() + (k * n + t) * lo);
  expect_bits(O.download(), out, "indexer_scores");
  EXPECT_EQ(cuda::launch_indexer_scores(stream(), nullptr, 0, nullptr, 0, nullptr, 0, 2, 3, D, hs, shards, pos0,
                                        nullptr, 0, 0, ld),
            cudaErrorInvalidValue);  // 3 visible keys, 2 rows
}

// ---- DeepSeek-V4-Flash shapes (hidden 4096, hc 4, heads of 512 with rope 64, window 128, index
// top-512 of 4-compressed rows, ratio-128 layers, 64 indexer heads of 128, 256 experts top-6) ------

TEST(CudaOps, FlashShapes) {
  {  // hc_pre + hc_head: hc 4 copies of 4096, 20 Sinkhorn iterations
    const int hc = 4;
    const int64_t n = 2, dim = 4096, W = hc * dim, R = (2 + hc) * hc;
    std::vector<float> x = rnd(static_cast<size_t>(n * W), 60), fn = rnd(static_cast<size_t>(R * W), 61, -0.02f, 0.02f), scale = {0.5f, 1.f, 2.f},
                       base = rnd(static_cast<size_t>(R), 62), y(static_cast<size_t>(n * dim)), mix(static_cast<size_t>(n * R)), h(static_cast<size_t>(n * dim));
    DevBuf<float> X(x), Fn(fn), S(scale), B(base), Y(y), M(mix), H(h);
    ASSERT_EQ(cuda::launch_hc_pre(stream(), X.get(), W * F, Fn.get(), W * F, S.get(), B.get(), hc, dim, n, 20, 1e-6f,
                                  1e-6f, Y.get(), dim * F, M.get(), R * F),
              cudaSuccess);
    ASSERT_EQ(cuda::launch_hc_head(stream(), X.get(), W * F, Fn.get(), W * F, S.get(), B.get(), hc, dim, n, 1e-6f,
                                   1e-6f, H.get(), dim * F),
              cudaSuccess);
    for (int64_t t = 0; t < n; ++t) {
      cpu::hc_pre_row(x.data() + t * W, fn.data(), scale.data(), base.data(), hc, dim, 20, 1e-6f, 1e-6f,
                      y.data() + t * dim, mix.data() + t * R);
      cpu::hc_head_row(x.data() + t * W, fn.data(), scale.data(), base.data(), hc, dim, 1e-6f, 1e-6f,
                       h.data() + t * dim);
    }
    expect_bits(Y.download(), y, "flash hc_pre y");
    expect_bits(M.download(), mix, "flash hc_pre mix");
    expect_bits(H.download(), h, "flash hc_head");
  }
  {  // sparse attention: 4 of the 64 heads of 512, window 128, ratio 4 (top-512 selection) and 128
    const int64_t H = 4, D = 512, n = 2, win = 128, cap = 1024, ksel = 512;
    for (int ratio : {4, 128}) {
      const int64_t pos0 = ratio == 4 ? 3000 : 20000;
      std::vector<float> q = rnd(static_cast<size_t>(n * H * D), 63, -0.2f, 0.2f), kv = rnd(static_cast<size_t>(n * D), 64),
                         ring = rnd(static_cast<size_t>(win * D), 65), ckv = rnd(static_cast<size_t>(cap * D), 66), sinks = rnd(static_cast<size_t>(H), 67),
                         out(static_cast<size_t>(n * H * D));
      std::vector<int32_t> sel = rnd_i(static_cast<size_t>(n * ksel), 68, -1, int32_t(cap - 1));
      DevBuf<float> Q(q), KV(kv), Rg(ring), C(ckv), Sk(sinks), O(out);
      DevBuf<int32_t> Sl(sel);
      ASSERT_EQ(cuda::launch_sparse_attention(stream(), Q.get(), H * D * F, KV.get(), D * F, Rg.get(), D * F, win,
                                              C.get(), D * F, cap, Sl.get(), ksel * 4, ksel, Sk.get(), ratio, n, H, D,
                                              pos0, 0.044f, O.get(), H * D * F),
                cudaSuccess);
      std::vector<float> scratch(static_cast<size_t>(win + cap));
      for (int64_t t = 0; t < n; ++t) {
        const int64_t pos = pos0 + t;
        std::vector<const float*> cand;
        for (int64_t p = std::max<int64_t>(0, pos - win + 1); p <= pos; ++p)
          cand.push_back(p >= pos0 ? kv.data() + (p - pos0) * D : ring.data() + (p % win) * D);
        if (ratio == 4) {
          for (int64_t i = 0; i < ksel; ++i)
            if (sel[t * ksel + i] >= 0) cand.push_back(ckv.data() + sel[t * ksel + i] * D);
        } else {
          for (int64_t j = 0; j < cpu::compressed_visible(pos, ratio); ++j) cand.push_back(ckv.data() + j * D);
        }
        for (int64_t hh = 0; hh < H; ++hh)
          cpu::attend_with_sink(q.data() + (t * H + hh) * D, cand.data(), int64_t(cand.size()), D, 0.044f, sinks[hh],
                                out.data() + (t * H + hh) * D, scratch.data());
      }
      expect_bits(O.download(), out, "flash sparse_attention");
    }
  }
  {  // indexer: 64 heads of 128 in one shard, 1024 visible compressed keys; then its top-512
    const int64_t Hn = 64, D = 128, n = 1, pos0 = 4095, keys_n = 1024, ld = 1024, k = 512;
    std::vector<float> q = rnd(static_cast<size_t>(n * Hn * D), 69), w = rnd(static_cast<size_t>(n * Hn), 70), keys = rnd(static_cast<size_t>(keys_n * D), 71),
                       out = rnd(static_cast<size_t>(n * ld), 72);
    DevBuf<float> Q(q), Wt(w), K(keys), O(out);
    ASSERT_EQ(cuda::launch_indexer_scores(stream(), Q.get(), Hn * D * F, Wt.get(), Hn * F, K.get(), D * F, keys_n, n,
                                          D, Hn, 1, pos0, O.get(), ld * F, n * ld * F, ld),
              cudaSuccess);
    cpu::indexer_scores(q.data(), w.data(), Hn, D, keys.data(), cpu::compressed_visible(pos0, 4), out.data());
    expect_bits(O.download(), out, "flash indexer_scores");
    std::vector<int32_t> top(static_cast<size_t>(k), 0), idx(static_cast<size_t>(ld));
    DevBuf<int32_t> T(top);
    ASSERT_EQ(cuda::launch_topk(stream(), O.get(), ld * F, n, ld, pos0, 4, T.get(), k * 4, k), cudaSuccess);
    cpu::topk_desc_into(out.data(), cpu::compressed_visible(pos0, 4), k, top.data(), idx.data());
    expect_bits(T.download(), top, "flash topk");
  }
  {  // router: 256 experts, top-6 with bias, normalized, route scale 1.5
    const int64_t n = 3, E = 256, K = 6;
    std::vector<float> logits = rnd(static_cast<size_t>(n * E), 73, -4, 4), bias = rnd(static_cast<size_t>(E), 74, -0.1f, 0.1f),
                       w(static_cast<size_t>(n * K));
    std::vector<int32_t> ids(static_cast<size_t>(n * K));
    DevBuf<float> L(logits), B(bias), Wt(w);
    DevBuf<int32_t> I(ids);
    ASSERT_EQ(cuda::launch_router(stream(), L.get(), E * F, n, E, K, B.get(), nullptr, 0, 0, nullptr, true, 1.5f,
                                  I.get(), K * 4, Wt.get(), K * F),
              cudaSuccess);
    std::vector<float> scratch(static_cast<size_t>(2 * E));
    std::vector<int32_t> iscratch(static_cast<size_t>(E));
    for (int64_t t = 0; t < n; ++t)
      cpu::route_token_into(logits.data() + t * E, int(E), int(K), bias.data(), nullptr, true, 1.5f,
                            ids.data() + t * K, w.data() + t * K, scratch.data(), iscratch.data());
    expect_bits(I.download(), ids, "flash router ids");
    expect_bits(Wt.download(), w, "flash router weights");
  }
  {  // compressor: head 512 with rope 64; ratio 4 (overlap) over 9 tokens, ratio 128 over 130
    for (int ratio : {4, 128}) {
      const bool overlap = ratio == 4;
      const int64_t d = 512, w = overlap ? 2 * d : d, n = overlap ? 9 : 130, cap = 8;
      const int half = 32;
      std::vector<float> a = rnd(static_cast<size_t>(n * w), 75), g = rnd(static_cast<size_t>(n * w), 76, -3, 3), ape = rnd(static_cast<size_t>(ratio * w), 77),
                         norm = rnd(static_cast<size_t>(d), 78), freqs(static_cast<size_t>(half)), cur(static_cast<size_t>(2 * ratio * w), 0.0f),
                         prev(static_cast<size_t>(2 * ratio * d), 0.0f), cache(static_cast<size_t>(cap * d), 0.0f);
      for (int i = 0; i < half; ++i) freqs[i] = float(1.0 / std::pow(10000.0, 2.0 * i / 64));
      DevBuf<float> A(a), G(g), Ap(ape), Nm(norm), Fr(freqs), Cu(cur), Pv(prev), Ca(cache);
      ASSERT_EQ(cuda::launch_compressor(stream(), A.get(), w * F, G.get(), w * F, n, Ap.get(), Nm.get(), 1e-6f,
                                        Fr.get(), half, ratio, d, 0, Cu.get(), overlap ? Pv.get() : nullptr, Ca.get(),
                                        d * F, cap),
                cudaSuccess);
      cpu::CompressorView v{ratio, d, cur.data(), cur.data() + ratio * w, overlap ? prev.data() : nullptr,
                            overlap ? prev.data() + ratio * d : nullptr};
      for (int64_t t = 0; t < n; ++t) {
        const int64_t b = t / ratio;
        if (!cpu::compressor_push(v, t, a.data() + t * w, g.data() + t * w, ape.data(), cache.data() + b * d)) continue;
        cpu::rmsnorm_row(cache.data() + b * d, norm.data(), d, 1e-6f, cache.data() + b * d);
        cpu::rope_apply(cache.data() + b * d, d, freqs.data(), half, b * ratio, false);
      }
      expect_bits(Ca.download(), cache, "flash compressor cache");
      expect_bits(Cu.download(), cur, "flash compressor cur");
    }
  }
}


// ---- the matrix-product family (ops_cuda_matmul.h): F32-path matmul, embed_rows, MoE gather /
// scatter, against kernels/cpu (matmul_rows with q8 = false, embed_rows) or the plain copy.

/// `rows` weight rows of `cols` elements of `type`, `row_bytes` apart (>= the packed row), made
/// from random values: quantized by cpu::quantize_row where it can, else random blocks with sane
/// scales (NVFP4: E4M3 block scales 0x30..0x3F; F8_E4M3_R128: exponents 2^-4..2^4, no NaN codes).
/// With `specials`, row 0 of F32 / F16 / BF16 holds NaN, +-inf, subnormals and -0.
std::vector<uint8_t> make_weights(GgmlType type, int64_t rows, int64_t cols, uint64_t row_bytes, uint32_t seed,
                                  bool specials) {
  const uint64_t rb = uint64_t(cpu::row_bytes(type, cols));
  EXPECT_GE(row_bytes, rb);
  std::vector<uint8_t> w(size_t(row_bytes * uint64_t(rows)) + 16, 0xA5);
  std::mt19937 g(seed);
  for (int64_t r = 0; r < rows; ++r) {
    uint8_t* row = w.data() + uint64_t(r) * row_bytes;
    if (cpu::can_quantize(type)) {
      const std::vector<float> v = rnd(size_t(cols), seed * 131 + uint32_t(r));
      cpu::quantize_row(type, v.data(), row, cols);
    } else {
      for (uint64_t b = 0; b < rb; ++b) row[b] = uint8_t(g());
      if (type == GgmlType::NVFP4) {
        for (int64_t blk = 0; blk < cols / 64; ++blk)
          for (int j = 0; j < 4; ++j) row[blk * int64_t(sizeof(quant::BlockNVFP4)) + j] = uint8_t(0x30 + g() % 16);
      } else if (type == GgmlType::F8_E4M3_R128) {
        for (int64_t blk = 0; blk < cols / 128; ++blk) {
          uint8_t* b = row + blk * int64_t(sizeof(quant::BlockF8R128));
          b[0] = uint8_t(123 + g() % 9);
          for (int j = 1; j < 129; ++j)
            if ((b[j] & 0x7F) == 0x7F) b[j] = uint8_t(b[j] - 1);  // E4M3's NaN codes
        }
      }
    }
  }
  if (specials) {
    uint8_t* row = w.data();
    if (type == GgmlType::F32) {
      const float v[] = {kNaN, kInf, -kInf, 1e-45f, -1e-40f, -0.0f, 3e38f};
      std::memcpy(row, v, sizeof(v));
    } else if (type == GgmlType::F16 || type == GgmlType::BF16) {
      const uint16_t h16[] = {0x7E01, 0x7C00, 0xFC00, 0x0001, 0x83FF, 0x8000, 0x7BFF, 0x0200};
      const uint16_t hb[] = {0x7FC1, 0x7F80, 0xFF80, 0x0001, 0x807F, 0x8000, 0x7F7F, 0x0040};
      std::memcpy(row, type == GgmlType::F16 ? h16 : hb, sizeof(h16));
      // Subnormals only (and zeros) in row 1: finite, so its dot is a number to compare bit for bit.
      if (rows > 1)
        for (int64_t c = 0; c < cols; c += 3) {
          const uint16_t v = uint16_t(type == GgmlType::F16 ? (0x0001 + (c * 37) % 0x3FF) : (0x0001 + (c * 11) % 0x7F)) |
                             uint16_t(c % 2 ? 0x8000 : 0);
          std::memcpy(row + row_bytes + uint64_t(c) * 2, &v, 2);
        }
    }
  }
  return w;
}

struct MatF32Case {
  GgmlType type;
  int64_t rows, cols, n;
  bool strided;  // padded weight rows, x and y rows, weights at an offset into the buffer
};

// Every F32-path output equals cpu::matmul_rows (q8 = false, the dot_f32 order of the decoded
// row) bit for bit: the direct kernel (F32 / F16 / BF16) with row counts not a multiple of its 4
// warps per block, widths below, at and past its 1024-element load step, the decode shape (one
// token, 4096 wide), 1..17 tokens (token groups of 8, partial), strided rows, NaN / inf /
// subnormal weights; the staged kernel for block types of every unit length (32, 64, 128, 256)
// and for F16 rows at an odd byte offset (not element-aligned: the byte-wise fallback).
TEST(CudaOps, MatmulF32EqualsCpuBitForBit) {
  const MatF32Case cases[] = {
      {GgmlType::F16, 1, 4096, 1, false},    {GgmlType::F16, 37, 4096, 1, false},  {GgmlType::BF16, 6, 4096, 1, true},
      {GgmlType::F32, 5, 4096, 1, false},    {GgmlType::F16, 130, 1024, 1, false}, {GgmlType::F16, 9, 1056, 3, true},
      {GgmlType::F32, 7, 96, 9, true},       {GgmlType::BF16, 4, 32, 17, false},   {GgmlType::F16, 3, 2080, 8, false},
      {GgmlType::F32, 11, 1280, 16, true},   {GgmlType::Q8_0, 13, 1280, 3, true},  {GgmlType::Q8_0, 5, 4096, 1, false},
      {GgmlType::MXFP4, 9, 288, 10, false},  {GgmlType::Q2_K, 6, 1280, 2, false},  {GgmlType::Q8_K, 5, 1280, 1, true},
      {GgmlType::NVFP4, 7, 1088, 9, false},  {GgmlType::F8_E4M3_R128, 6, 1152, 2, true},
      {GgmlType::IQ2_XXS, 3, 512, 1, false},
  };
  uint32_t seed = 300;
  for (const MatF32Case& c : cases) {
    SCOPED_TRACE(std::string(ggml_type_name(uint32_t(c.type))) + " rows " + std::to_string(c.rows) + " cols " +
                 std::to_string(c.cols) + " n " + std::to_string(c.n) + (c.strided ? " strided" : ""));
    const uint64_t rb = uint64_t(cpu::row_bytes(c.type, c.cols)), wnb = c.strided ? rb + 64 : rb;
    const int64_t ldx = c.strided ? c.cols + 5 : c.cols, ldy = c.strided ? c.rows + 3 : c.rows;
    const bool specials = c.type == GgmlType::F32 || c.type == GgmlType::F16 || c.type == GgmlType::BF16;
    const std::vector<uint8_t> w = make_weights(c.type, c.rows, c.cols, wnb, seed++, specials);
    std::vector<float> x = rnd(size_t(c.n * ldx), seed++), y = rnd(size_t(c.n * ldy), seed++);
    if (c.n > 2) x[size_t(2 * ldx + 7)] = kNaN;  // token 2: NaN everywhere
    DevBuf<uint8_t> W(w);
    DevBuf<float> X(x), Y(y);
    ASSERT_EQ(cuda::launch_matmul_f32(stream(), c.type, W.get(), c.rows, c.cols, wnb, X.get(), uint64_t(ldx) * F, c.n,
                                      Y.get(), uint64_t(ldy) * F),
              cudaSuccess);
    cpu::matmul_rows(cpu::WRows{c.type, w.data(), c.cols, c.rows, wnb}, cpu::F32Rows{x.data(), ldx}, nullptr, c.n,
                     false, cpu::F32Rows{y.data(), ldy}, 0, c.rows);
    expect_bits(Y.download(), y, "matmul_f32");
    // The same rows at an odd byte offset (F16: not element-aligned, the staged kernel's path).
    if (c.type == GgmlType::F16 && !c.strided) {
      std::vector<uint8_t> w1(w.size() + 1);
      std::memcpy(w1.data() + 1, w.data(), w.size());
      DevBuf<uint8_t> W1(w1);
      std::vector<float> y1 = rnd(size_t(c.n * ldy), seed++);
      DevBuf<float> Y1(y1);
      ASSERT_EQ(cuda::launch_matmul_f32(stream(), c.type, W1.get() + 1, c.rows, c.cols, wnb, X.get(), uint64_t(ldx) * F,
                                        c.n, Y1.get(), uint64_t(ldy) * F),
                cudaSuccess);
      expect_bits(Y1.download(), y, "matmul_f32 (odd offset)");
    }
  }
}

// embed_rows: exact decode per token (one element per thread for F32 / F16 / BF16, rows of any
// length: split staging gathers one routing weight per slot; one unit per thread for block
// types), +0 outside [vocab0, vocab1), strided output rows, NaN / inf / subnormal F16 values (the
// CPU's decode: their exact bits, NaN payload included).
TEST(CudaOps, EmbedRowsEqualsCpuBitForBit) {
  struct Case {
    GgmlType type;
    int64_t cols;
  };
  for (const Case c : {Case{GgmlType::F16, 4096}, Case{GgmlType::F32, 96}, Case{GgmlType::F32, 1}, Case{GgmlType::F32, 7},
                       Case{GgmlType::BF16, 288}, Case{GgmlType::F16, 5},
                       Case{GgmlType::Q8_0, 4096}, Case{GgmlType::Q2_K, 512}, Case{GgmlType::MXFP4, 8224}}) {
    SCOPED_TRACE(std::string(ggml_type_name(uint32_t(c.type))) + " cols " + std::to_string(c.cols));
    const int64_t vocab = 9, n = 5, ld = c.cols + 3;
    const uint64_t rb = uint64_t(cpu::row_bytes(c.type, c.cols));
    const std::vector<uint8_t> w = make_weights(c.type, vocab, c.cols, rb, 40 + uint32_t(c.type), true);
    const std::vector<int32_t> ids = {0, 3, 8, 9, 1};  // id 9: outside [0, 9) -> zeros
    std::vector<float> out = rnd(size_t(n * ld), 41);
    DevBuf<uint8_t> W(w);
    DevBuf<int32_t> I(ids);
    DevBuf<float> O(out);
    ASSERT_EQ(cuda::launch_embed_rows(stream(), c.type, W.get(), c.cols, rb, I.get(), n, 0, vocab, O.get(), ld * F),
              cudaSuccess);
    cpu::embed_rows(cpu::WRows{c.type, w.data(), c.cols, vocab, rb}, ids.data(), 0, vocab, cpu::F32Rows{out.data(), ld},
                    0, n);
    const std::vector<float> got = O.download();
    expect_bits(got, out, "embed_rows");
    if (c.type == GgmlType::F16) {  // the NaN's payload too: a plain decode (F16 0x7E01)
      uint32_t bits;
      std::memcpy(&bits, &got[0], 4);
      EXPECT_EQ(bits, 0x7FC02000u);
    }
  }
}

// MoE gather / scatter: one slot (the decode shape), several, a row width past one block and not a
// multiple of it; rows strided; only the listed slots written.
TEST(CudaOps, MoeGatherScatterCopyTheRows) {
  for (const int64_t dim : {int64_t(4096), int64_t(300)}) {
    for (const int64_t m : {int64_t(1), int64_t(5)}) {
      SCOPED_TRACE("dim " + std::to_string(dim) + " m " + std::to_string(m));
      const int64_t n = 4, k = 6, ldx = dim + 2, ldw = k + 1, lds = dim + 4;
      const std::vector<float> x = rnd(size_t(n * ldx), 50), wts = rnd(size_t(n * ldw), 51);
      const std::vector<int32_t> pairs = m == 1 ? std::vector<int32_t>{17} : std::vector<int32_t>{0, 5, 7, 16, 23};
      std::vector<float> xe = rnd(size_t(m * dim), 52), rw = rnd(size_t(m), 53);
      DevBuf<float> X(x), Wt(wts), Xe(xe), Rw(rw);
      DevBuf<int32_t> P(pairs);
      ASSERT_EQ(cuda::launch_moe_gather(stream(), X.get(), ldx * F, dim, Wt.get(), ldw * F, int(k), P.get(), m, Xe.get(),
                                        Rw.get()),
                cudaSuccess);
      for (int64_t i = 0; i < m; ++i) {
        const int64_t t = pairs[size_t(i)] / k;
        std::memcpy(xe.data() + i * dim, x.data() + t * ldx, size_t(dim) * 4);
        rw[size_t(i)] = wts[size_t(t * ldw + pairs[size_t(i)] % k)];
      }
      expect_bits(Xe.download(), xe, "moe_gather rows");
      expect_bits(Rw.download(), rw, "moe_gather weights");
      std::vector<float> slots = rnd(size_t(n * k * lds), 54);
      DevBuf<float> S(slots);
      ASSERT_EQ(cuda::launch_moe_scatter(stream(), Xe.get(), dim, P.get(), m, S.get(), lds * F), cudaSuccess);
      for (int64_t i = 0; i < m; ++i)
        std::memcpy(slots.data() + pairs[size_t(i)] * lds, xe.data() + i * dim, size_t(dim) * 4);
      expect_bits(S.download(), slots, "moe_scatter");
    }
  }
}

}  // namespace
}  // namespace ds4
