// tests/gpu/test_moe_gpu.cpp — grouped MoE on the GPU (label gpu; exits 77 without a device):
// the device counting sort equals the host mirror, grouped MMQ rows equal cpu::vec_dot_q8_1 bit
// for bit (both MMQ paths, three runs), and the ordered combine equals the CPU loop in ascending
// expert id.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <numeric>

#include "kernels/cuda/moe/moe_sort_host.h"
#include "kernels/cuda/quant_matmul.h"
#include "tests/gpu/gpu_test_util.h"

namespace ds4::gputest {
namespace {

/// Routing ids [n_tokens, k]: k distinct experts per token in random (not sorted) slot order;
/// `n_invalid` pairs get id -1.
std::vector<int32_t> random_ids(int64_t n_tokens, int k, int n_experts, int n_invalid, std::mt19937& rng) {
  std::vector<int32_t> ids(size_t(n_tokens * k));
  std::vector<int32_t> perm(static_cast<size_t>(n_experts));
  for (int64_t t = 0; t < n_tokens; ++t) {
    std::iota(perm.begin(), perm.end(), 0);
    std::shuffle(perm.begin(), perm.end(), rng);
    for (int s = 0; s < k; ++s) ids[size_t(t * k + s)] = perm[size_t(s)];
  }
  for (int i = 0; i < n_invalid; ++i) ids[size_t(rng() % ids.size())] = -1;
  return ids;
}

struct DevSorted {
  DevBuf bounds, sorted, tiles, counters;
  DevSorted(int64_t n_pairs, int n_experts)
      : bounds(size_t(n_experts + 1) * 4), sorted(size_t(n_pairs) * 4 + 4),
        tiles(size_t(cuda::moe_max_tiles(n_pairs, n_experts)) * 12), counters(8) {}
  cuda::MoeSorted view() const {
    return {bounds.get<int32_t>(), sorted.get<int32_t>(), tiles.get<int32_t>(), counters.get<int32_t>()};
  }
};

TEST(CudaMoeSort, EqualsHostMirror) {
  std::mt19937 rng(7);
  for (const int64_t n_tokens : {1, 5, 512}) {
    const int k = 6, E = 64;
    const auto ids = random_ids(n_tokens, k, E, n_tokens > 1 ? 3 : 0, rng);
    const int64_t n_pairs = n_tokens * k;
    const auto want = cuda::moe_sort_host(ids.data(), n_pairs, E, cuda::kMmqTileCols);
    auto dids = to_device(ids);
    DevSorted ds(n_pairs, E);
    ASSERT_EQ(cuda::moe_sort(dids->get<int32_t>(), n_pairs, E, ds.view(), nullptr), cudaSuccess);
    const auto counters = ds.counters.download<int32_t>(2);
    EXPECT_EQ(counters[1], want.n_invalid);
    ASSERT_EQ(size_t(counters[0]) * 3, want.tiles.size());
    EXPECT_EQ(ds.bounds.download<int32_t>(size_t(E + 1)), want.expert_bounds);
    EXPECT_EQ(ds.sorted.download<int32_t>(want.sorted.size()), want.sorted);
    EXPECT_EQ(ds.tiles.download<int32_t>(want.tiles.size()), want.tiles);
  }
}

class CudaMoe : public ::testing::TestWithParam<GgmlType> {};

TEST_P(CudaMoe, GroupedMmqAndCombineBitIdenticalToCpu) {
  const GgmlType type = GetParam();
  const int E = 8, k = 6;
  const int64_t rows = 96, cols = 1024;
  std::mt19937 rng(500 + uint32_t(type));
  std::vector<std::vector<uint8_t>> w(E);
  for (auto& we : w) we = random_weights(type, rows, cols, rng);
  std::vector<std::unique_ptr<DevBuf>> dw;
  std::vector<const void*> ptrs;
  for (const auto& we : w) {
    dw.push_back(to_device(we));
    ptrs.push_back(dw.back()->get());
  }
  auto dptrs = to_device(ptrs);
  std::vector<cuda::MmqPath> paths = {cuda::MmqPath::Dp4a};
  if (device_cc() >= 75) paths.push_back(cuda::MmqPath::Mma);

  for (const int64_t n_tokens : {1, 7, 64, 512}) {
    SCOPED_TRACE("tokens " + std::to_string(n_tokens));
    const int64_t n_pairs = n_tokens * k;
    const auto ids = random_ids(n_tokens, k, E, n_tokens > 1 ? 2 : 0, rng);
    std::vector<float> rw(static_cast<size_t>(n_pairs));
    for (auto& v : rw) v = float(rng() % 1000) / 1000.0f;
    const auto act = cpu_q8_1(random_acts(n_tokens, cols, rng), n_tokens, cols);
    const int64_t arb = cols / 32 * int64_t(sizeof(quant::BlockQ8_1));

    // CPU reference: y[p] = W_{ids[p]} act[p / k]; combine in ascending expert id per token.
    std::vector<float> want_y(size_t(n_pairs * rows), 0.0f);
    for (int64_t p = 0; p < n_pairs; ++p)
      if (ids[size_t(p)] >= 0)
        cpu::matvec_q8_1(type, w[size_t(ids[size_t(p)])].data(), rows, cols, act.data() + (p / k) * arb,
                         want_y.data() + p * rows, 1);
    std::vector<float> want_out(size_t(n_tokens * rows));
    for (int64_t t = 0; t < n_tokens; ++t) {
      std::vector<int> order;
      for (int s = 0; s < k; ++s)
        if (ids[size_t(t * k + s)] >= 0) order.push_back(s);
      std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return ids[size_t(t * k + a)] < ids[size_t(t * k + b)]; });
      for (int64_t d = 0; d < rows; ++d) {
        float acc = 0.0f;
        for (int s : order) {
          const float prod = rw[size_t(t * k + s)] * want_y[size_t((t * k + s) * rows + d)];
          acc = acc + prod;
        }
        want_out[size_t(t * rows + d)] = acc;
      }
    }

    auto dids = to_device(ids);
    auto dact = to_device(act);
    auto drw = to_device(rw);
    DevSorted ds(n_pairs, E);
    ASSERT_EQ(cuda::moe_sort(dids->get<int32_t>(), n_pairs, E, ds.view(), nullptr), cudaSuccess);
    DevBuf dy(size_t(n_pairs * rows) * 4), dout(size_t(n_tokens * rows) * 4);
    for (const auto path : paths) {
      const std::string pname = path == cuda::MmqPath::Mma ? "mma" : "dp4a";
      std::vector<float> first;
      for (int run = 0; run < 3; ++run) {
        DS4_CUDA_CHECK(cudaMemset(dy.get(), 0, size_t(n_pairs * rows) * 4));  // invalid pairs stay 0
        ASSERT_EQ(cuda::mmq_moe(type, dptrs->get<const void*>(), E, rows, cols, dact->get(), k, ds.view(), n_pairs,
                                dy.get<float>(), path, nullptr),
                  cudaSuccess);
        const auto y = dy.download<float>(size_t(n_pairs * rows));
        if (run == 0) {
          first = y;
          EXPECT_EQ(count_bit_mismatches(y, want_y, "mmq_moe " + pname), 0);
        } else {
          EXPECT_EQ(count_bit_mismatches(y, first, "mmq_moe rerun " + pname), 0);
        }
      }
    }
    ASSERT_EQ(cuda::moe_combine(dy.get<float>(), dids->get<int32_t>(), drw->get<float>(), n_tokens, k, E, rows,
                                dout.get<float>(), nullptr),
              cudaSuccess);
    EXPECT_EQ(count_bit_mismatches(dout.download<float>(size_t(n_tokens * rows)), want_out, "moe_combine"), 0);
  }
}

INSTANTIATE_TEST_SUITE_P(AllTypes, CudaMoe, ::testing::ValuesIn(all_types()),
                         [](const auto& info) { return type_name(info.param); });

}  // namespace
}  // namespace ds4::gputest

int main(int argc, char** argv) { return ds4::gputest::gpu_test_main(argc, argv); }
