// cuda_emu_quantize_q8_1_test (labels emu, unit): the CUDA Q8_1 activation quantizer
// (kernels/cuda/q8_1/quantize_q8_1.cu, compiled as host C++ against tests/cuda_emu) against the
// CPU reference cpu::quantize_row_q8_1, byte for byte, on rows mixing ordinary values, zeros,
// tiny and huge magnitudes and non-finite values. The contract (kernels/quant/quantize_q8.h):
// a block holding a NaN or an infinity gets the fp16 NaN scale 0x7E00 (d and s) and all-zero
// codes; that is also asserted directly from the contract's text, not only by comparison.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "kernels/cpu/quant_ref.h"
#include "kernels/cuda/quant_matmul.h"
#include "kernels/quant/blocks.h"

namespace ds4 {
namespace {

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr size_t kBlockBytes = sizeof(quant::BlockQ8_1);  // 36: d, s (fp16), 32 int8 codes

/// Runs the CUDA quantizer on `x` ([n rows, cols]) and returns the blocks it wrote.
std::vector<uint8_t> cuda_quantize(const std::vector<float>& x, int64_t n, int64_t cols) {
  const size_t out_bytes = size_t(n) * size_t(cols / 32) * kBlockBytes;
  void* dx = nullptr;
  void* dq = nullptr;
  EXPECT_EQ(cudaMalloc(&dx, x.size() * 4), cudaSuccess);
  EXPECT_EQ(cudaMalloc(&dq, out_bytes), cudaSuccess);
  EXPECT_EQ(cudaMemcpy(dx, x.data(), x.size() * 4, cudaMemcpyHostToDevice), cudaSuccess);
  cudaStream_t st = nullptr;
  EXPECT_EQ(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking), cudaSuccess);
  // The copy above is on the legacy stream; the non-blocking stream must wait for it.
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  EXPECT_EQ(cuda::quantize_q8_1(static_cast<const float*>(dx), n, cols, dq, st), cudaSuccess);
  EXPECT_EQ(cudaStreamSynchronize(st), cudaSuccess);
  std::vector<uint8_t> got(out_bytes);
  EXPECT_EQ(cudaMemcpy(got.data(), dq, out_bytes, cudaMemcpyDeviceToHost), cudaSuccess);
  EXPECT_EQ(cudaStreamDestroy(st), cudaSuccess);
  cudaFree(dx);
  cudaFree(dq);
  return got;
}

/// fp16 bits of the scale d of block `b` in `blocks`.
uint16_t d_bits(const std::vector<uint8_t>& blocks, size_t b) {
  uint16_t d;
  std::memcpy(&d, blocks.data() + b * kBlockBytes, 2);
  return d;
}

TEST(CudaEmuQuantizeQ8_1, EqualsTheCpuReferenceByteForByteIncludingNonFiniteBlocks) {
  const int64_t n = 5, cols = 32 * 9;  // 45 blocks over 5 rows (the grid's last block partial)
  std::mt19937 g(7);
  std::normal_distribution<float> d(0.0f, 1.5f);
  std::vector<float> x(size_t(n * cols));
  for (auto& v : x) v = d(g);
  auto block = [&](int64_t row, int64_t b) { return x.data() + row * cols + 32 * b; };
  // Edge blocks: all zero, tiny (fp16 subnormal scale), huge (scale clamps to 65504), signed zeros.
  for (int j = 0; j < 32; ++j) block(0, 1)[j] = 0.0f;
  for (int j = 0; j < 32; ++j) block(0, 2)[j] = 1e-6f * float(j - 16);
  for (int j = 0; j < 32; ++j) block(0, 3)[j] = 3.0e38f * (j % 2 ? 1.0f : -0.5f);
  for (int j = 0; j < 32; ++j) block(0, 4)[j] = j % 2 ? -0.0f : 0.0f;
  // Non-finite blocks (expected NaN scale): a NaN first / last / middle, +inf, -inf, both.
  std::vector<std::pair<int64_t, int64_t>> bad = {{1, 0}, {1, 8}, {2, 4}, {3, 3}, {4, 5}, {4, 6}};
  block(1, 0)[0] = kNaN;
  block(1, 8)[31] = kNaN;
  block(2, 4)[13] = -kNaN;
  block(3, 3)[7] = kInf;
  block(4, 5)[20] = -kInf;
  block(4, 6)[2] = kInf;
  block(4, 6)[9] = kNaN;

  std::vector<uint8_t> want(size_t(n) * size_t(cols / 32) * kBlockBytes);
  for (int64_t r = 0; r < n; ++r)
    cpu::quantize_row_q8_1(x.data() + r * cols, want.data() + size_t(r * (cols / 32)) * kBlockBytes, cols);
  const std::vector<uint8_t> got = cuda_quantize(x, n, cols);
  ASSERT_EQ(got.size(), want.size());
  for (size_t b = 0; b < got.size() / kBlockBytes; ++b)
    EXPECT_EQ(0, std::memcmp(got.data() + b * kBlockBytes, want.data() + b * kBlockBytes, kBlockBytes))
        << "block " << b << " (row " << b / (cols / 32) << ", block " << b % (cols / 32) << ")";

  // The contract, independently of the CPU code: non-finite blocks -> d = s = 0x7E00, codes 0;
  // finite blocks never get a NaN or infinite scale.
  for (auto [r, b] : bad) {
    const size_t i = size_t(r * (cols / 32) + b);
    EXPECT_EQ(d_bits(got, i), 0x7E00u) << "block " << i;
    uint16_t s;
    std::memcpy(&s, got.data() + i * kBlockBytes + 2, 2);
    EXPECT_EQ(s, 0x7E00u) << "block " << i;
    for (size_t j = 0; j < 32; ++j) EXPECT_EQ(got[i * kBlockBytes + 4 + j], 0u) << "block " << i << " code " << j;
  }
  for (size_t i = 0; i < got.size() / kBlockBytes; ++i) {
    bool is_bad = false;
    for (auto [r, b] : bad) is_bad = is_bad || size_t(r * (cols / 32) + b) == i;
    if (!is_bad) EXPECT_NE(d_bits(got, i) & 0x7C00u, 0x7C00u) << "finite block " << i << " got a non-finite scale";
  }
  EXPECT_EQ(d_bits(got, 3), 0x7BFFu);  // huge block: amax/127 overflows fp16, clamped to 65504
  EXPECT_EQ(d_bits(got, 1), 0x0000u);  // all-zero block: d = 0
}

// The decode shape (one 4096-wide row: 128 blocks, 16 CUDA blocks of 8 warps), a single block,
// and rows whose block count is not a multiple of 8 (a partial last CUDA block), with values at
// rounding ties of the code (x / d = k + 0.5: roundf away from zero) and at the clamp.
TEST(CudaEmuQuantizeQ8_1, DecodeRowAndTiesEqualTheCpuReference) {
  struct Shape {
    int64_t n, cols;
  };
  uint32_t seed = 11;
  for (const Shape sh : {Shape{1, 4096}, Shape{1, 32}, Shape{3, 32 * 13}, Shape{2, 2048}}) {
    SCOPED_TRACE(std::to_string(sh.n) + " x " + std::to_string(sh.cols));
    std::mt19937 g(seed++);
    std::normal_distribution<float> d(0.0f, 3.0f);
    std::vector<float> x(size_t(sh.n * sh.cols));
    for (auto& v : x) v = d(g);
    // Block 0: amax 63.5 = 127 * 0.5, so d = 0.5 exactly and x = k / 2 + 1/4 lands on ties.
    for (int j = 0; j < 32; ++j) x[size_t(j)] = j == 0 ? 63.5f : 0.5f * float(j - 16) + 0.25f;
    // Last block (the only one of the 32-wide row): magnitudes across many binades.
    float* last = x.data() + x.size() - 32;
    for (int j = 0; j < 32; ++j) last[j] = std::ldexp(1.0f, j - 20) * (j % 3 ? 1.0f : -1.0f) * 1.37f;
    std::vector<uint8_t> want(size_t(sh.n) * size_t(sh.cols / 32) * kBlockBytes);
    for (int64_t r = 0; r < sh.n; ++r)
      cpu::quantize_row_q8_1(x.data() + r * sh.cols, want.data() + size_t(r * (sh.cols / 32)) * kBlockBytes, sh.cols);
    const std::vector<uint8_t> got = cuda_quantize(x, sh.n, sh.cols);
    ASSERT_EQ(got.size(), want.size());
    for (size_t b = 0; b < got.size() / kBlockBytes; ++b)
      EXPECT_EQ(0, std::memcmp(got.data() + b * kBlockBytes, want.data() + b * kBlockBytes, kBlockBytes)) << "block " << b;
    if (x.size() > 32) EXPECT_EQ(d_bits(got, 0), 0x3800u);  // d = 0.5
  }
}

TEST(CudaEmuQuantizeQ8_1, RejectsBadShapes) {
  EXPECT_EQ(cuda::quantize_q8_1(nullptr, 1, 33, nullptr, nullptr), cudaErrorInvalidValue);
  EXPECT_EQ(cuda::quantize_q8_1(nullptr, -1, 32, nullptr, nullptr), cudaErrorInvalidValue);
  EXPECT_EQ(cuda::quantize_q8_1(nullptr, 0, 32, nullptr, nullptr), cudaSuccess);  // nothing to do
}

}  // namespace
}  // namespace ds4
