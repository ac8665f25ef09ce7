// tests/staging/test_cuda_pinning.cpp — chunked cudaHostRegister on a real device (label gpu;
// exit 77 = skipped without one): a genuine registration failure in the middle (a slab registered
// beforehand makes every chunk covering it fail with "already registered") halves, then rolls
// back every chunk and leaves no pending CUDA error; afterwards the region registers cleanly.
#include <gtest/gtest.h>

#include <cstdio>

#include "staging/host_memory.h"

namespace ds4::staging {
namespace {

TEST(CudaPinning, MidRegistrationFailureRollsBackWithoutStickyError) {
  const PinOps ops = default_pin_ops();
  ASSERT_EQ(ops.kind, PinKind::Cuda);
  const uint64_t slab = 2 << 20, n = 16;
  auto r = HostRegion::allocate(slab * n, -1);
  ASSERT_TRUE(r.ok());
  std::vector<uint64_t> offs;
  for (uint64_t i = 0; i < n; ++i) offs.push_back(i * slab);
  // Make slab 9 unregistrable: it is already registered.
  ASSERT_TRUE(ops.pin(r->data() + 9 * slab, slab).ok());
  int pins = 0, unpins = 0;
  PinOps counted = ops;
  counted.pin = [&](void* p, uint64_t b) {
    Result<void> x = ops.pin(p, b);
    if (x) ++pins;
    return x;
  };
  counted.unpin = [&](void* p, uint64_t b) {
    ++unpins;
    ops.unpin(p, b);
  };
  PinStats st;
  auto res = pin_in_chunks(r->data(), offs, slab * n, 4 * slab, counted, &st);
  ASSERT_FALSE(res.ok());
  EXPECT_GT(pins, 0);
  EXPECT_EQ(pins, unpins);
  EXPECT_GT(st.halvings, 0);
  EXPECT_FALSE(pin_error_pending());
  ops.unpin(r->data() + 9 * slab, slab);
  auto again = pin_in_chunks(r->data(), offs, slab * n, 4 * slab, counted, &st);
  ASSERT_TRUE(again.ok()) << again.error().message;
  for (const PinnedChunk& c : *again) ops.unpin(r->data() + c.offset, c.bytes);
  EXPECT_FALSE(pin_error_pending());
}

}  // namespace
}  // namespace ds4::staging

// Exit 77 without a device: ctest reports the test skipped, never passed.
int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  if (!ds4::staging::have_cuda_pinning()) {
    std::printf("no CUDA device: skipped\n");
    return 77;
  }
  return RUN_ALL_TESTS();
}
