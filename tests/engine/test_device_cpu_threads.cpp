// The CPU device's decode-shape splits (fewer tokens than threads: hc_pre, hc_post, hc_head and the
// router split over dots, columns and experts; the compressor's pooling split over channels; RoPE
// from the device's rotation table) give, on 1, 2 and 3 threads, the bits of the scalar reference
// functions of kernels/cpu/ops.h applied token by token (the numerics contract: results do not
// depend on the thread count).
#include <gtest/gtest.h>

#include <cstring>

#include "kernels/cpu/ops.h"
#include "kernels/cpu/rope_table.h"
#include "kernels/device.h"
#include "tests/support/random.h"

namespace ds4 {
namespace {

using test::randn;

/// Bitwise equality of two float vectors (NaN payloads and signed zeros included).
void expect_bits(const std::vector<float>& got, const std::vector<float>& want, const char* what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  size_t bad = 0;
  for (size_t i = 0; i < got.size(); ++i) bad += std::memcmp(&got[i], &want[i], 4) != 0;
  EXPECT_EQ(bad, 0u) << what << ": " << bad << " of " << got.size() << " values differ";
}

struct Dev {
  explicit Dev(std::unique_ptr<dev::Device> dev) : d(std::move(dev)) {}
  std::unique_ptr<dev::Device> d;
  std::vector<dev::OwnedTensor> keep;
  dev::Tensor up(const std::vector<float>& v, int64_t row_len, int64_t rows) {
    keep.push_back(d->alloc_tensor(GgmlType::F32, row_len, rows));
    d->upload(d->stream(), keep.back().t, v.data(), v.size() * 4);
    return keep.back().t;
  }
  dev::Tensor up_i32(const std::vector<int32_t>& v, int64_t row_len, int64_t rows) {
    keep.push_back(d->alloc_tensor(GgmlType::I32, row_len, rows));
    d->upload(d->stream(), keep.back().t, v.data(), v.size() * 4);
    return keep.back().t;
  }
  dev::Tensor zeros(GgmlType type, int64_t row_len, int64_t rows) {
    keep.push_back(d->alloc_tensor(type, row_len, rows));
    return keep.back().t;
  }
  template <class T>
  std::vector<T> get(const dev::Tensor& t) {
    std::vector<T> v(static_cast<size_t>(t.ne0 * t.ne1));
    d->download(d->stream(), t, v.data(), v.size() * 4);
    return v;
  }
};

TEST(DeviceCpuThreads, MhcOpsEqualScalarRowsOnAnyThreadCount) {
  const int hc = 4, mr = (2 + hc) * hc, iters = 20;
  for (int64_t dim : {256, 4096}) {
    const int64_t nn = hc * dim;
    for (int64_t n : {1, 2}) {
      const auto X = randn(static_cast<size_t>(n * nn), 1), fn = randn(static_cast<size_t>(mr * nn), 2, 0.02f), f = randn(static_cast<size_t>(n * dim), 3);
      const auto hfn = randn(static_cast<size_t>(hc * nn), 4, 0.02f), base = randn(static_cast<size_t>(mr), 5), hb = randn(static_cast<size_t>(hc), 6);
      const std::vector<float> sc = {0.5f, 0.7f, 1.1f}, hsc = {0.8f};
      // Scalar reference, token by token.
      std::vector<float> y(static_cast<size_t>(n * dim)), mix(static_cast<size_t>(n * mr)), xp = X, h(static_cast<size_t>(n * dim)), tmp(static_cast<size_t>(nn));
      for (int64_t t = 0; t < n; ++t) {
        cpu::hc_pre_row(X.data() + t * nn, fn.data(), sc.data(), base.data(), hc, dim, iters, 1e-6f, 1e-6f,
                        y.data() + t * dim, mix.data() + t * mr);
        cpu::hc_post_row(f.data() + t * dim, mix.data() + t * mr, hc, dim, xp.data() + t * nn, tmp.data());
        cpu::hc_head_row(xp.data() + t * nn, hfn.data(), hsc.data(), hb.data(), hc, dim, 1e-6f, 1e-6f,
                         h.data() + t * dim);
      }
      for (int threads : {1, 2, 3}) {
        SCOPED_TRACE("dim " + std::to_string(dim) + " n " + std::to_string(n) + " threads " + std::to_string(threads));
        Dev D{dev::make_cpu_device(threads)};
        const dev::Tensor XT = D.up(X, nn, n), Y = D.zeros(GgmlType::F32, dim, n), M = D.zeros(GgmlType::F32, mr, n);
        D.d->hc_pre(D.d->stream(), XT, D.d->bind_f32(fn.data(), mr * nn).reshaped(nn, mr), D.d->bind_f32(sc.data(), 3),
                    D.d->bind_f32(base.data(), mr), hc, iters, 1e-6f, 1e-6f, Y, M);
        expect_bits(D.get<float>(Y), y, "hc_pre y");
        expect_bits(D.get<float>(M), mix, "hc_pre mix");
        D.d->hc_post(D.d->stream(), D.up(f, dim, n), M, hc, XT);
        expect_bits(D.get<float>(XT), xp, "hc_post");
        const dev::Tensor H = D.zeros(GgmlType::F32, dim, n);
        D.d->hc_head(D.d->stream(), XT, D.d->bind_f32(hfn.data(), hc * nn).reshaped(nn, hc),
                     D.d->bind_f32(hsc.data(), 1), D.d->bind_f32(hb.data(), hc), hc, 1e-6f, 1e-6f, H);
        expect_bits(D.get<float>(H), h, "hc_head");
      }
    }
  }
}

TEST(DeviceCpuThreads, RouterEqualsRouteTokenIntoOnAnyThreadCount) {
  const int64_t E = 256, K = 6, vocab = 7;
  for (int64_t n : {1, 2, 5}) {
    const auto logits = randn(static_cast<size_t>(n * E), 11, 2.0f), bias = randn(static_cast<size_t>(E), 12, 0.1f);
    std::vector<int32_t> toks(static_cast<size_t>(n)), table(static_cast<size_t>(vocab * K));
    for (int64_t t = 0; t < n; ++t) toks[t] = int32_t((t * 3 + 1) % vocab);
    for (int64_t i = 0; i < vocab * K; ++i) table[i] = int32_t((i * 37) % E);
    for (bool hash : {false, true}) {
      std::vector<int32_t> ids(static_cast<size_t>(n * K)), idx(static_cast<size_t>(E));
      std::vector<float> wt(static_cast<size_t>(n * K)), scratch(static_cast<size_t>(2 * E));
      for (int64_t t = 0; t < n; ++t)
        cpu::route_token_into(logits.data() + t * E, int(E), int(K), hash ? nullptr : bias.data(),
                              hash ? table.data() + toks[t] * K : nullptr, true, 1.5f, ids.data() + t * K,
                              wt.data() + t * K, scratch.data(), idx.data());
      for (int threads : {1, 2, 3}) {
        SCOPED_TRACE("n " + std::to_string(n) + (hash ? " hash" : " topk") + " threads " + std::to_string(threads));
        Dev D{dev::make_cpu_device(threads)};
        const dev::Tensor IDS = D.zeros(GgmlType::I32, K, n), WT = D.zeros(GgmlType::F32, K, n);
        D.d->router(D.d->stream(), D.up(logits, E, n), hash ? dev::Tensor{} : D.d->bind_f32(bias.data(), E),
                    hash ? D.d->bind_i32(table.data(), K, vocab) : dev::Tensor{}, D.up_i32(toks, 1, n), true, 1.5f,
                    IDS, WT);
        EXPECT_EQ(D.get<int32_t>(IDS), ids);
        expect_bits(D.get<float>(WT), wt, "router weights");
      }
    }
  }
}

TEST(DeviceCpuThreads, RopeFromTheTableEqualsRopeAngles) {
  const int64_t heads = 8, D = 128, half = 32;
  std::vector<float> freqs(static_cast<size_t>(half)), freqs2(static_cast<size_t>(half));
  for (int64_t i = 0; i < half; ++i) {
    freqs[i] = float(1.0 / std::pow(10000.0, 2.0 * i / 64));
    freqs2[i] = float(1.0 / std::pow(160000.0, 2.0 * i / 64));
  }
  // Positions in several table blocks, repeated (a row read twice), and beyond the table's range
  // (computed on the spot) and negative.
  const std::vector<int32_t> pos = {0, 1, 255, 256, 4095, 1000000, 255, (1 << 24) + 3, -2};
  const int64_t n = int64_t(pos.size());
  const auto x = randn(static_cast<size_t>(n * heads * D), 21);
  for (int threads : {1, 2}) {
    Dev Dv{dev::make_cpu_device(threads)};
    for (const std::vector<float>* fr : {&freqs, &freqs2, &freqs}) {  // a second table, then the first again
      for (bool inverse : {false, true}) {
        std::vector<float> want = x, cs(static_cast<size_t>(2 * half));
        for (int64_t t = 0; t < n; ++t) {
          cpu::rope_angles(fr->data(), int(half), pos[t], cs.data());
          for (int64_t h = 0; h < heads; ++h)
            cpu::rope_apply_cs(want.data() + (t * heads + h) * D, D, cs.data(), int(half), inverse);
        }
        const dev::Tensor X = Dv.up(x, heads * D, n);
        Dv.d->rope(Dv.d->stream(), X, heads, Dv.d->bind_f32(fr->data(), half), Dv.up_i32(pos, 1, n), inverse);
        expect_bits(Dv.get<float>(X), want, inverse ? "rope inverse" : "rope");
        // Decode: one row at a time (rows served from the table filled above).
        for (int64_t t = 0; t < n; ++t) {
          const std::vector<float> xr(x.begin() + t * heads * D, x.begin() + (t + 1) * heads * D);
          const dev::Tensor XR = Dv.up(xr, heads * D, 1);
          Dv.d->rope(Dv.d->stream(), XR, heads, Dv.d->bind_f32(fr->data(), half), Dv.up_i32({pos[t]}, 1, 1), inverse);
          expect_bits(Dv.get<float>(XR),
                      std::vector<float>(want.begin() + t * heads * D, want.begin() + (t + 1) * heads * D), "rope row");
        }
      }
    }
  }
}

TEST(DeviceCpuThreads, RopeRotationTableRowsAreRopeAnglesAndStayValid) {
  const int half = 16;
  std::vector<float> fr(static_cast<size_t>(half));
  for (int i = 0; i < half; ++i) fr[i] = float(std::pow(10000.0, -2.0 * i / 32));
  cpu::RopeRotationTable table;
  const float* r700 = table.row(fr.data(), half, 700);
  ASSERT_NE(r700, nullptr);
  std::vector<float> saved(r700, r700 + 2 * half), want(static_cast<size_t>(2 * half));
  for (int64_t p : {0, 3, 256, 100000, 700}) {  // fills other blocks
    const float* r = table.row(fr.data(), half, p);
    ASSERT_NE(r, nullptr);
    cpu::rope_angles(fr.data(), half, p, want.data());
    expect_bits(std::vector<float>(r, r + 2 * half), want, "table row");
  }
  expect_bits(std::vector<float>(r700, r700 + 2 * half), saved, "earlier row unchanged");
  EXPECT_EQ(table.row(fr.data(), half, -1), nullptr);
  EXPECT_EQ(table.row(fr.data(), half, cpu::RopeRotationTable::kMaxPos), nullptr);
}

TEST(DeviceCpuThreads, CompressorEqualsPushNormRopeOnAnyThreadCount) {
  for (int ratio : {4, 128}) {
    const int64_t d = ratio == 4 ? 512 : 256, w = (ratio == 4 ? 2 : 1) * d, half = 32;
    const int64_t n = 3 * ratio;
    const bool overlap = ratio == 4;
    const auto a = randn(static_cast<size_t>(n * w), 31), g = randn(static_cast<size_t>(n * w), 32), ape = randn(static_cast<size_t>(ratio * w), 33);
    const auto norm = randn(static_cast<size_t>(d), 34);
    std::vector<float> freqs(static_cast<size_t>(half));
    for (int64_t i = 0; i < half; ++i) freqs[i] = float(std::pow(10000.0, -2.0 * i / 64));
    // Reference: compressor_push, rmsnorm_row, rope_apply per completed block.
    std::vector<float> cur(static_cast<size_t>(2 * ratio * w)), prev(static_cast<size_t>(2 * ratio * d)), want(static_cast<size_t>(4 * d));
    cpu::CompressorView v{ratio, d, cur.data(), cur.data() + ratio * w, overlap ? prev.data() : nullptr,
                          overlap ? prev.data() + ratio * d : nullptr};
    for (int64_t t = 0; t < n; ++t) {
      float* blk = want.data() + (t / ratio) * d;
      if (!cpu::compressor_push(v, t, a.data() + t * w, g.data() + t * w, ape.data(), blk)) continue;
      cpu::rmsnorm_row(blk, norm.data(), d, 1e-6f, blk);
      cpu::rope_apply(blk, d, freqs.data(), int(half), (t / ratio) * ratio, false);
    }
    for (int threads : {1, 2, 3}) {
      SCOPED_TRACE("ratio " + std::to_string(ratio) + " threads " + std::to_string(threads));
      Dev D{dev::make_cpu_device(threads)};
      const dev::Tensor A = D.up(a, w, n), G = D.up(g, w, n), CUR = D.zeros(GgmlType::F32, ratio * w, 2);
      const dev::Tensor PREV = overlap ? D.zeros(GgmlType::F32, ratio * d, 2) : dev::Tensor{};
      const dev::Tensor C = D.zeros(GgmlType::F32, d, 4);
      const dev::Tensor APE = D.d->bind_f32(ape.data(), ratio * w), NORM = D.d->bind_f32(norm.data(), d);
      const dev::Tensor FR = D.d->bind_f32(freqs.data(), half);
      for (int64_t t = 0; t < n; ++t)  // decode: one token per call
        D.d->compressor(D.d->stream(), A.rows_view(t, t + 1), G.rows_view(t, t + 1), APE, NORM, 1e-6f, FR, ratio, t,
                        CUR, PREV, C);
      expect_bits(D.get<float>(C), want, "compressor");
    }
  }
}

}  // namespace
}  // namespace ds4
