// tests/gpu/test_mmq_host_sim.cpp — CPU-only run (labels unit, emu) of the real MMQ and MMVQ kernel
// bodies (kernels/cuda/mmq/mmq.cuh, kernels/cuda/mmvq/mmvq.cuh) block by block on the CUDA
// emulator (tests/cuda_emu: one fiber per CUDA thread, emulated barriers, warp shuffles and
// intrinsics; tests/gpu/cuda_host_emu.h is the block runner). Both integer engines run: DP4A and
// the int8 mma.sync path (emulated from its PTX fragment layout, kernels/cuda/common/mma.cuh).
// Checks, bit for bit against cpu::matvec_q8_1, for every weight type: dense MMQ with row and
// column tails and with empty contract lanes (K = 768: 24 chunks), grouped MoE MMQ through the
// host counting sort, MMVQ (1 and 8 columns), the fused SwiGLU MMVQ; and the MoE sort and combine
// kernels (kernels/cuda/moe/moe_kernels.cuh) against their host mirrors. It exercises the kernels'
// staging, K walk, epilogue, ownership and write-back logic without a GPU; the gpu tests check the
// same on hardware.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "tests/gpu/cuda_host_emu.h"  // before any kernels/cuda header

#include "kernels/cuda/common/type_list.cuh"
#include "kernels/cuda/mmq/mmq.cuh"
#include "kernels/cuda/mmvq/mmvq.cuh"
#include "kernels/cuda/moe/moe_kernels.cuh"
#include "kernels/cuda/moe/moe_sort_host.h"
#include "tests/gpu/quant_test_data.h"

namespace ds4::gputest {
namespace {

using quant::BlockQ8_1;

/// Runs the MMQ kernel (kMma: the mma.sync path, else DP4A) over its whole grid on the host.
template <class Tr, bool kMma>
void sim_mmq(const uint8_t* W, const void* const* w_experts, int64_t rows, int64_t cols, const uint8_t* act,
             int64_t n_cols, cuda::MmqColumns cm, const int32_t* tiles, const int32_t* counters, int64_t grid_y,
             float* y) {
  const int64_t nchunks = cols / 32;
  const int64_t rb = cols / (32 * Tr::kChunks) * int64_t(sizeof(typename Tr::Block));
  const auto* a = reinterpret_cast<const BlockQ8_1*>(act);
  for (unsigned by = 0; by < unsigned(grid_y); ++by)
    for (unsigned bx = 0; bx < unsigned((rows + cuda::kMmqRows - 1) / cuda::kMmqRows); ++bx)
      emu::run_block(bx, by, cuda::kMmqThreads, [&] {
        cuda::mmq_kernel<Tr, kMma>(W, w_experts, rows, rb, nchunks, a, n_cols, cm, tiles, counters, y);
      });
}

/// Runs the MMVQ kernel for nc <= 8 columns on the host.
template <class Tr>
void sim_mmvq(const uint8_t* W, int64_t rows, int64_t cols, const uint8_t* act, int nc, float* y) {
  const int64_t nchunks = cols / 32;
  const int64_t rb = cols / (32 * Tr::kChunks) * int64_t(sizeof(typename Tr::Block));
  const auto* a = reinterpret_cast<const BlockQ8_1*>(act);
  for (unsigned bx = 0; bx < unsigned((rows + cuda::kMmvqRowsPerBlock - 1) / cuda::kMmvqRowsPerBlock); ++bx)
    emu::run_block(bx, 0, 32 * cuda::kMmvqRowsPerBlock,
                   [&] { cuda::mmvq_kernel<Tr, 8>(W, rows, rb, nchunks, a, nchunks, nc, y); });
}

/// Runs the fused gate/up SwiGLU MMVQ kernel for nc <= 8 columns on the host.
template <class Tr>
void sim_mmvq_swiglu(const uint8_t* Wg, const uint8_t* Wu, int64_t rows, int64_t cols, const uint8_t* act, int nc,
                     float limit, float* h) {
  const int64_t nchunks = cols / 32;
  const int64_t rb = cols / (32 * Tr::kChunks) * int64_t(sizeof(typename Tr::Block));
  const auto* a = reinterpret_cast<const BlockQ8_1*>(act);
  for (unsigned bx = 0; bx < unsigned((rows + cuda::kMmvqRowsPerBlock - 1) / cuda::kMmvqRowsPerBlock); ++bx)
    emu::run_block(bx, 0, 32 * cuda::kMmvqRowsPerBlock,
                   [&] { cuda::mmvq_swiglu_kernel<Tr, 8>(Wg, Wu, rows, rb, nchunks, a, nchunks, nc, limit, h); });
}

template <class Tr>
void check_type() {
  const GgmlType type = Tr::kType;
  SCOPED_TRACE(type_name(type));
  std::mt19937 rng(900 + uint32_t(type));
  const int64_t rows = 70, n = 21;  // 2 row tiles (tail of 6), 2 column tiles (tail of 5)
  for (const int64_t cols : {int64_t(768), int64_t(1280)}) {  // 24 chunks (8 empty lanes), 40
    const auto w = random_weights(type, rows, cols, rng);
    const auto act = cpu_q8_1(random_acts(n, cols, rng), n, cols);
    const auto want = cpu_matmul(type, w, rows, cols, act, n);

    std::vector<float> y(size_t(n * rows), -1.0f), ym(size_t(n * rows), -1.0f);
    sim_mmq<Tr, false>(w.data(), nullptr, rows, cols, act.data(), n, cuda::MmqColumns{nullptr, 1}, nullptr, nullptr,
                       (n + cuda::kMmqCols - 1) / cuda::kMmqCols, y.data());
    EXPECT_EQ(count_bit_mismatches(y, want, "mmq dp4a K=" + std::to_string(cols)), 0);
    sim_mmq<Tr, true>(w.data(), nullptr, rows, cols, act.data(), n, cuda::MmqColumns{nullptr, 1}, nullptr, nullptr,
                      (n + cuda::kMmqCols - 1) / cuda::kMmqCols, ym.data());
    EXPECT_EQ(count_bit_mismatches(ym, want, "mmq mma K=" + std::to_string(cols)), 0);

    // MMVQ on the first 9 rows (3 blocks of 4 warps, one partial): rows are independent.
    for (const int nc : {1, 8}) {
      const int64_t sub = 9;
      std::vector<float> yv(size_t(nc * sub), -1.0f), wv(size_t(nc * sub));
      sim_mmvq<Tr>(w.data(), sub, cols, act.data(), nc, yv.data());
      for (int c = 0; c < nc; ++c)
        for (int64_t r = 0; r < sub; ++r) wv[size_t(c * sub + r)] = want[size_t(c * rows + r)];
      EXPECT_EQ(count_bit_mismatches(yv, wv, "mmvq nc=" + std::to_string(nc)), 0);
    }
  }

  // Fused SwiGLU: on the host the kernel's expf is the C library's, so the result must equal the
  // engine formula (engine/moe_routing.cpp swiglu_clamped) on the CPU dots exactly.
  {
    const int64_t sub = 5, cols = 768;
    const int nc = 3;
    const auto wg = random_weights(type, sub, cols, rng), wu = random_weights(type, sub, cols, rng);
    const auto act = cpu_q8_1(random_acts(nc, cols, rng), nc, cols);
    const auto g = cpu_matmul(type, wg, sub, cols, act, nc), u = cpu_matmul(type, wu, sub, cols, act, nc);
    float gmax = 0.0f;
    for (float v : g) gmax = std::max(gmax, std::fabs(v));
    for (const float limit : {0.5f * gmax, 0.0f}) {
      std::vector<float> h(size_t(nc * sub), -1.0f), want(size_t(nc * sub));
      sim_mmvq_swiglu<Tr>(wg.data(), wu.data(), sub, cols, act.data(), nc, limit, h.data());
      for (size_t i = 0; i < want.size(); ++i) {
        float gi = g[i], ui = u[i];
        if (limit > 0) {
          gi = std::min(gi, limit);
          ui = std::clamp(ui, -limit, limit);
        }
        want[i] = gi / (1.0f + std::exp(-gi)) * ui;
      }
      EXPECT_EQ(count_bit_mismatches(h, want, "swiglu limit " + std::to_string(limit)), 0);
    }
  }

  // Grouped MoE: 3 experts, 2 slots per token, 11 tokens, one invalid pair.
  const int E = 3, k = 2;
  const int64_t n_tokens = 11, cols = 768, n_pairs = n_tokens * k;
  std::vector<std::vector<uint8_t>> we;
  std::vector<const void*> ptrs;
  for (int e = 0; e < E; ++e) we.push_back(random_weights(type, rows, cols, rng));
  for (const auto& m : we) ptrs.push_back(m.data());
  std::vector<int32_t> ids(static_cast<size_t>(n_pairs));
  for (int64_t t = 0; t < n_tokens; ++t) {
    ids[size_t(t * k)] = int32_t(rng() % E);
    ids[size_t(t * k + 1)] = int32_t((ids[size_t(t * k)] + 1 + rng() % (E - 1)) % E);
  }
  ids[5] = -1;
  const auto act = cpu_q8_1(random_acts(n_tokens, cols, rng), n_tokens, cols);
  const auto sorted = cuda::moe_sort_host(ids.data(), n_pairs, E, cuda::kMmqCols);
  const int32_t counters[2] = {int32_t(sorted.tiles.size() / 3), sorted.n_invalid};
  std::vector<float> y(size_t(n_pairs * rows), 0.0f), want(size_t(n_pairs * rows), 0.0f);
  const int64_t arb = cols / 32 * int64_t(sizeof(BlockQ8_1));
  for (int64_t p = 0; p < n_pairs; ++p)
    if (ids[size_t(p)] >= 0)
      cpu::matvec_q8_1(type, we[size_t(ids[size_t(p)])].data(), rows, cols, act.data() + (p / k) * arb,
                       want.data() + p * rows, 1);
  sim_mmq<Tr, false>(nullptr, ptrs.data(), rows, cols, act.data(), n_pairs, cuda::MmqColumns{sorted.sorted.data(), k},
                     sorted.tiles.data(), counters, int64_t(counters[0]) + 2 /* surplus blocks must exit */, y.data());
  EXPECT_EQ(count_bit_mismatches(y, want, "mmq_moe dp4a"), 0);
  std::fill(y.begin(), y.end(), 0.0f);
  sim_mmq<Tr, true>(nullptr, ptrs.data(), rows, cols, act.data(), n_pairs, cuda::MmqColumns{sorted.sorted.data(), k},
                    sorted.tiles.data(), counters, int64_t(counters[0]) + 2, y.data());
  EXPECT_EQ(count_bit_mismatches(y, want, "mmq_moe mma"), 0);
}

TEST(KernelHostSim, MmqAndMmvqBitIdenticalToCpuForEveryType) {
#define DS4_CASE(T) check_type<cuda::Traits##T>();
  DS4_CUDA_WEIGHT_TYPES(DS4_CASE)
#undef DS4_CASE
}

TEST(KernelHostSim, MoeSortKernelEqualsHostMirror) {
  std::mt19937 rng(17);
  for (const int64_t n_pairs : {int64_t(0), int64_t(1), int64_t(97), int64_t(600)}) {
    const int E = 1 + int(rng() % 70);  // more experts than threads in some cases
    std::vector<int32_t> ids(static_cast<size_t>(n_pairs));
    for (auto& v : ids) v = int32_t(rng() % uint32_t(E + 2)) - 1;
    const auto want = cuda::moe_sort_host(ids.data(), n_pairs, E, cuda::kMmqCols);
    std::vector<int32_t> bounds(size_t(E + 1), -7), sorted(size_t(n_pairs) + 1, -7),
        tiles(size_t(3 * (n_pairs / cuda::kMmqCols + E + 1)), -7), counters(2, -7);
    emu::run_block(0, 0, 32, [&] {
      cuda::moe_sort_kernel(ids.data(), n_pairs, E, bounds.data(), sorted.data(), tiles.data(), counters.data());
    });
    EXPECT_EQ(bounds, want.expert_bounds);
    EXPECT_EQ(std::vector<int32_t>(sorted.begin(), sorted.begin() + long(want.sorted.size())), want.sorted);
    ASSERT_EQ(size_t(counters[0]) * 3, want.tiles.size());
    EXPECT_EQ(std::vector<int32_t>(tiles.begin(), tiles.begin() + long(want.tiles.size())), want.tiles);
    EXPECT_EQ(counters[1], want.n_invalid);
  }
}

TEST(KernelHostSim, MoeCombineKernelSumsInAscendingExpertOrder) {
  std::mt19937 rng(19);
  const int64_t n_tokens = 9, dim = 37;
  const int k = 6, E = 16;
  std::vector<int32_t> ids(size_t(n_tokens * k));
  for (auto& v : ids) v = int32_t(rng() % (E + 1)) - (rng() % 9 == 0 ? E + 1 : 0);  // some invalid
  ids[0] = ids[1] = 3;                                                               // a tie: slot order
  std::vector<float> y(size_t(n_tokens * k * dim)), w(size_t(n_tokens * k));
  for (auto& v : y) v = std::ldexp(float(int(rng() % 2001) - 1000), int(rng() % 30) - 15);
  for (auto& v : w) v = float(rng() % 1000) / 997.0f;
  for (const bool weighted : {true, false}) {
    std::vector<float> out(size_t(n_tokens * dim), -1.0f), want(out.size());
    for (int64_t t = 0; t < n_tokens; ++t) {
      std::vector<int> order;
      for (int s = 0; s < k; ++s)
        if (ids[size_t(t * k + s)] >= 0 && ids[size_t(t * k + s)] < E) order.push_back(s);
      std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return ids[size_t(t * k + a)] < ids[size_t(t * k + b)]; });
      for (int64_t d = 0; d < dim; ++d) {
        float acc = 0.0f;
        for (int s : order) {
          const float v = weighted ? w[size_t(t * k + s)] * y[size_t((t * k + s) * dim + d)] : y[size_t((t * k + s) * dim + d)];
          acc = acc + v;
        }
        want[size_t(t * dim + d)] = acc;
      }
    }
    const int64_t total = n_tokens * dim;
    for (unsigned bx = 0; bx < unsigned((total + 63) / 64); ++bx)
      emu::run_block(bx, 0, 64, [&] {
        cuda::moe_combine_kernel(y.data(), ids.data(), weighted ? w.data() : nullptr, n_tokens, k, E, dim, out.data());
      });
    EXPECT_EQ(count_bit_mismatches(out, want, weighted ? "combine weighted" : "combine"), 0);
  }
}

}  // namespace
}  // namespace ds4::gputest
