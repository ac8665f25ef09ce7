// tests/gpu/test_quant_matmul_gpu.cpp — the CUDA quantized kernels against the scalar CPU
// reference (label gpu; exits 77 = skipped without a CUDA device).
//
// What is asserted, bit for bit (the contract of kernels/cuda/quant_matmul.h):
//   - Q8_1 activation blocks == cpu::quantize_row_q8_1
//   - every chunk partial P_b (exact int32 DP4A sums + fp32 epilogue) == the CPU's dot_chunk_*,
//     which also pins the integer sub-block sums (float(I) is exact; a wrong I changes P_b)
//   - MMVQ and MMQ (MMA and DP4A paths) outputs == cpu::matvec_q8_1, for every type and batch
//     sizes 1..8, 16, 64, 512; identical across three runs and across batch sizes
// and with a named tolerance: the fused SwiGLU (kSwigluRelTol; expf differs between libraries).
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include "kernels/cuda/quant_matmul.h"
#include "tests/gpu/gpu_test_util.h"

namespace ds4::gputest {
namespace {

using quant::BlockQ8_1;

const std::vector<int64_t> kBatches = {1, 2, 3, 4, 5, 6, 7, 8, 16, 64, 512};

TEST(CudaQuantizeQ8_1, BitIdenticalToCpu) {
  std::mt19937 rng(1);
  for (const int64_t cols : {32, 4096}) {
    const int64_t n = 37;
    std::vector<float> x = random_acts(n, cols, rng, 3.0f);
    // Edge values: a block at the fp16 scale limit and one of fp16-subnormal scale.
    for (int j = 0; j < 32; ++j) x[size_t(j)] = (j % 2 ? -1.0f : 1.0f) * 65504.0f * 127.0f * (j + 1) / 32.0f;
    for (int j = 0; j < 32; ++j) x[size_t(32 * (n - 1) + j)] = 1e-9f * float(j - 16);
    const auto want = cpu_q8_1(x, n, cols);
    auto dx = to_device(x);
    DevBuf da(want.size());
    ASSERT_EQ(cuda::quantize_q8_1(dx->get<float>(), n, cols, da.get(), nullptr), cudaSuccess);
    const auto got = da.download<uint8_t>(want.size());
    ASSERT_EQ(std::memcmp(got.data(), want.data(), want.size()), 0) << "cols " << cols;
  }
}

TEST(CudaQuantizeQ8_1, RejectsBadShape) {
  EXPECT_EQ(cuda::quantize_q8_1(nullptr, 1, 33, nullptr, nullptr), cudaErrorInvalidValue);
}

TEST(CudaChunkPartials, BitIdenticalToCpuForEveryType) {
  std::mt19937 rng(2);
  const int64_t cols = 8192;  // 256 chunks: 32 super-blocks / 128 NVFP4 blocks / 256 32-blocks
  for (GgmlType type : all_types()) {
    SCOPED_TRACE(type_name(type));
    const auto w = random_weights(type, 1, cols, rng);
    const auto act = cpu_q8_1(random_acts(1, cols, rng, 2.0f), 1, cols);
    auto dw = to_device(w);
    auto dact = to_device(act);
    DevBuf dp(size_t(cols / 32) * sizeof(float));
    ASSERT_EQ(cuda::chunk_partials(type, dw->get(), cols, dact->get(), dp.get<float>(), nullptr), cudaSuccess);
    const auto got = dp.download<float>(size_t(cols / 32));
    std::vector<float> want(size_t(cols / 32));
    for (int64_t b = 0; b < cols / 32; ++b) {
      BlockQ8_1 a;
      std::memcpy(&a, act.data() + b * int64_t(sizeof(BlockQ8_1)), sizeof(a));
      want[size_t(b)] = cpu_chunk_partial(type, w.data(), a, b);
    }
    EXPECT_EQ(count_bit_mismatches(got, want, "P_b"), 0);
  }
}

/// One weight matrix + 512 activation columns + the CPU reference for all of them.
struct Case {
  GgmlType type;
  int64_t rows, cols;
  std::vector<uint8_t> w, act;
  std::vector<float> want;  // [512, rows]
};

Case make_case(GgmlType type, int64_t rows, int64_t cols, uint32_t seed) {
  std::mt19937 rng(seed);
  Case c{type, rows, cols, random_weights(type, rows, cols, rng), {}, {}};
  c.act = cpu_q8_1(random_acts(512, cols, rng), 512, cols);
  c.want = cpu_matmul(type, c.w, rows, cols, c.act, 512);
  return c;
}

/// Shapes: 70 rows (not a multiple of the 4-row MMVQ block or the 64-row MMQ tile); K = 2816
/// (88 chunks: uneven chunks per lane) and K = 768 (24 chunks: 8 empty lanes).
class CudaMatmul : public ::testing::TestWithParam<GgmlType> {};

TEST_P(CudaMatmul, MmvqBitIdenticalToCpuAllBatches) {
  for (const int64_t cols : {2816, 768}) {
    const Case c = make_case(GetParam(), 70, cols, 100 + uint32_t(GetParam()));
    auto dw = to_device(c.w);
    auto dact = to_device(c.act);
    DevBuf dy(size_t(512 * c.rows) * sizeof(float));
    for (const int64_t n : kBatches) {
      std::vector<float> first;
      for (int run = 0; run < 3; ++run) {
        DS4_CUDA_CHECK(cudaMemset(dy.get(), 0xFF, size_t(512 * c.rows) * sizeof(float)));
        ASSERT_EQ(cuda::mmvq(c.type, dw->get(), c.rows, c.cols, dact->get(), n, dy.get<float>(), nullptr), cudaSuccess);
        const auto got = dy.download<float>(size_t(n * c.rows));
        if (run == 0) {
          first = got;
          const std::vector<float> want(c.want.begin(), c.want.begin() + n * c.rows);
          EXPECT_EQ(count_bit_mismatches(got, want, "mmvq K=" + std::to_string(cols) + " n=" + std::to_string(n)), 0);
        } else {
          EXPECT_EQ(count_bit_mismatches(got, first, "mmvq rerun n=" + std::to_string(n)), 0);
        }
      }
    }
  }
}

TEST_P(CudaMatmul, MmqBitIdenticalToCpuAllBatchesBothPaths) {
  std::vector<cuda::MmqPath> paths = {cuda::MmqPath::Dp4a};
  if (device_cc() >= 75) paths.push_back(cuda::MmqPath::Mma);
  for (const int64_t cols : {2816, 768}) {
    const Case c = make_case(GetParam(), 70, cols, 200 + uint32_t(GetParam()));
    auto dw = to_device(c.w);
    auto dact = to_device(c.act);
    DevBuf dy(size_t(512 * c.rows) * sizeof(float));
    for (const auto path : paths) {
      const std::string pname = path == cuda::MmqPath::Mma ? "mma" : "dp4a";
      for (const int64_t n : kBatches) {
        std::vector<float> first;
        for (int run = 0; run < 3; ++run) {
          DS4_CUDA_CHECK(cudaMemset(dy.get(), 0xFF, size_t(512 * c.rows) * sizeof(float)));
          ASSERT_EQ(cuda::mmq(c.type, dw->get(), c.rows, c.cols, dact->get(), n, dy.get<float>(), path, nullptr), cudaSuccess);
          const auto got = dy.download<float>(size_t(n * c.rows));
          const std::string what = "mmq " + pname + " K=" + std::to_string(cols) + " n=" + std::to_string(n);
          if (run == 0) {
            first = got;
            const std::vector<float> want(c.want.begin(), c.want.begin() + n * c.rows);
            EXPECT_EQ(count_bit_mismatches(got, want, what), 0);
          } else {
            EXPECT_EQ(count_bit_mismatches(got, first, what + " rerun"), 0);
          }
        }
      }
    }
  }
}

TEST_P(CudaMatmul, SameRowSameBitsAcrossBatchSizesAndPaths) {
  // Independent of the CPU: every column of every launch must equal the same column of the
  // n = 512 MMQ launch (MMVQ n = 1..8, MMQ n = 1, 17, 512 on both integer engines).
  const GgmlType type = GetParam();
  const int64_t rows = 130, cols = 4096;
  std::mt19937 rng(400 + uint32_t(type));
  const auto w = random_weights(type, rows, cols, rng);
  const auto act = cpu_q8_1(random_acts(512, cols, rng), 512, cols);
  auto dw = to_device(w);
  auto dact = to_device(act);
  DevBuf dref(size_t(512 * rows) * 4), dy(size_t(512 * rows) * 4);
  ASSERT_EQ(cuda::mmq(type, dw->get(), rows, cols, dact->get(), 512, dref.get<float>(), cuda::MmqPath::Auto, nullptr),
            cudaSuccess);
  const auto ref = dref.download<float>(size_t(512 * rows));
  auto check = [&](int64_t n, const std::string& what) {
    const auto got = dy.download<float>(size_t(n * rows));
    EXPECT_EQ(count_bit_mismatches(got, std::vector<float>(ref.begin(), ref.begin() + n * rows), what), 0);
  };
  for (int64_t n = 1; n <= 8; ++n) {
    ASSERT_EQ(cuda::mmvq(type, dw->get(), rows, cols, dact->get(), n, dy.get<float>(), nullptr), cudaSuccess);
    check(n, "mmvq n=" + std::to_string(n));
  }
  for (const auto path : {cuda::MmqPath::Dp4a, cuda::MmqPath::Auto})
    for (const int64_t n : {1, 17, 512}) {
      ASSERT_EQ(cuda::mmq(type, dw->get(), rows, cols, dact->get(), n, dy.get<float>(), path, nullptr), cudaSuccess);
      check(n, "mmq n=" + std::to_string(n));
    }
}

TEST_P(CudaMatmul, FusedSwigluWithinToleranceOfCpu) {
  const GgmlType type = GetParam();
  const int64_t rows = 70, cols = 2816, n = 8;
  std::mt19937 rng(300 + uint32_t(type));
  const auto wg = random_weights(type, rows, cols, rng), wu = random_weights(type, rows, cols, rng);
  const auto act = cpu_q8_1(random_acts(n, cols, rng), n, cols);
  const auto g = cpu_matmul(type, wg, rows, cols, act, n), u = cpu_matmul(type, wu, rows, cols, act, n);
  // A limit inside the value range, so both clamps are exercised.
  float gmax = 0.0f;
  for (float v : g) gmax = std::max(gmax, std::fabs(v));
  const float limit = 0.5f * gmax;
  auto dg = to_device(wg);
  auto du = to_device(wu);
  auto dact = to_device(act);
  DevBuf dh(size_t(n * rows) * sizeof(float));
  for (const float lim : {limit, 0.0f}) {
    ASSERT_EQ(cuda::mmvq_swiglu(type, dg->get(), du->get(), rows, cols, dact->get(), n, lim, dh.get<float>(), nullptr),
              cudaSuccess);
    const auto h = dh.download<float>(size_t(n * rows));
    int64_t bad = 0;
    for (size_t i = 0; i < h.size(); ++i) {
      float gi = g[i], ui = u[i];
      if (lim > 0) {
        gi = std::min(gi, lim);
        ui = std::clamp(ui, -lim, lim);
      }
      const float want = gi / (1.0f + std::exp(-gi)) * ui;
      const float tol = cuda::kSwigluRelTol * std::fabs(want) + 1e-37f;
      if (!(std::fabs(h[i] - want) <= tol) && bad++ < 5)
        ADD_FAILURE() << "swiglu limit " << lim << " index " << i << ": got " << h[i] << " want " << want;
    }
    EXPECT_EQ(bad, 0);
  }
}

INSTANTIATE_TEST_SUITE_P(AllTypes, CudaMatmul, ::testing::ValuesIn(all_types()),
                         [](const auto& info) { return type_name(info.param); });

TEST(CudaMatmul, RejectsBadArguments) {
  DevBuf buf(4096);
  EXPECT_EQ(cuda::mmvq(GgmlType::F16, buf.get(), 1, 32, buf.get(), 1, buf.get<float>(), nullptr), cudaErrorInvalidValue);
  EXPECT_EQ(cuda::mmvq(GgmlType::Q2_K, buf.get(), 1, 32, buf.get(), 1, buf.get<float>(), nullptr), cudaErrorInvalidValue);
  EXPECT_EQ(cuda::mmq(GgmlType::NVFP4, buf.get(), 1, 32, buf.get(), 1, buf.get<float>(), cuda::MmqPath::Auto, nullptr),
            cudaErrorInvalidValue);
  EXPECT_EQ(cuda::mmvq(GgmlType::Q8_0, buf.get(), 1, 32, buf.get(), 0, buf.get<float>(), nullptr), cudaSuccess);
}

}  // namespace
}  // namespace ds4::gputest

int main(int argc, char** argv) { return ds4::gputest::gpu_test_main(argc, argv); }
