// tests/staging/test_copy_engine_gpu.cpp — the CUDA copy engine through the same checks as the
// host engine (copy_engine_checks.h): cache on synthetic traces vs direct reads, with consumers
// that order on the copy event from their own stream (cudaStreamWaitEvent) instead of blocking;
// the bounce ring under real asynchronous copies; pageable sources rejected. Exits 77 (skipped)
// without a CUDA device.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "copy_engine_checks.h"
#include "staging/bounce_ring.h"
#include "staging/copy_engine.h"

namespace ds4::staging {
namespace {

bool have_device() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();
    return false;
  }
  return n > 0;
}

std::unique_ptr<CopyEngine> cuda_engine() {
  auto e = make_cuda_copy_engine(0);
  if (!e) {
    ADD_FAILURE() << e.error().message;
    return make_host_copy_engine();  // keeps the check running; the failure is already recorded
  }
  return std::move(*e);
}

/// Consumer on its own stream: waits for the copy event with cudaStreamWaitEvent (no host
/// block), then reads the slot back on that stream.
struct StreamConsumer {
  cudaStream_t s = nullptr;
  uint64_t waited_on_event = 0;
  StreamConsumer() { EXPECT_EQ(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), cudaSuccess); }
  ~StreamConsumer() { cudaStreamDestroy(s); }
  Result<void> read(CopyEngine& engine, const uint8_t* slot, CopyTicket t, uint8_t* dst, uint64_t bytes) {
    if (engine.event(t) != nullptr) ++waited_on_event;
    DS4_TRY_VOID(engine.stream_wait(t, static_cast<StreamHandle>(s)));
    if (cudaMemcpyAsync(dst, slot, bytes, cudaMemcpyDeviceToHost, s) != cudaSuccess ||
        cudaStreamSynchronize(s) != cudaSuccess)
      return Error{"consumer stream read failed"};
    return ok();
  }
};

TEST(CudaCopyEngineGpu, CacheMatchesDirectReadsWithStreamOrderedConsumers) {
  if (!have_device()) GTEST_SKIP() << "no CUDA device";
  StreamConsumer consumer;
  auto rd = [&](CopyEngine& e, const uint8_t* p, CopyTicket t, uint8_t* d, uint64_t n) {
    return consumer.read(e, p, t, d, n);
  };
  testing::TraceCheckConfig cfg;
  cfg.slot_bytes = (256u << 10) + 4096;  // large enough for copies to be observably in flight
  cfg.steps = 30;
  cfg.consumer = static_cast<StreamHandle>(consumer.s);
  EXPECT_GT(testing::check_cache_matches_direct_reads(cuda_engine, cfg, rd), 0u);
  cfg.use_pinned_source = true;
  EXPECT_GT(testing::check_cache_matches_direct_reads(cuda_engine, cfg, rd), 0u);
  std::printf("consumer reads that waited on a pending copy event: %llu\n",
              static_cast<unsigned long long>(consumer.waited_on_event));
  // Host-blocking consumers (engine.wait) on the same traces.
  cfg.use_pinned_source = false;
  EXPECT_GT(testing::check_cache_matches_direct_reads(cuda_engine, cfg), 0u);
}

TEST(CudaCopyEngineGpu, BounceRingNeverOverwritesInFlightBuffer) {
  if (!have_device()) GTEST_SKIP() << "no CUDA device";
  auto e = cuda_engine();
  const uint64_t blocked = testing::check_bounce_ring_no_overwrite(*e, 2, 16, uint64_t(8) << 20);
  std::printf("bounce ring acquires that blocked on an in-flight copy: %llu of 14 possible\n",
              static_cast<unsigned long long>(blocked));
}

TEST(CudaCopyEngineGpu, TicketsCompleteInOrderAndPageableSourcesAreRejected) {
  if (!have_device()) GTEST_SKIP() << "no CUDA device";
  auto e = cuda_engine();
  const uint64_t bytes = uint64_t(16) << 20;
  ASSERT_TRUE(e->allocate_slots(1, 4, bytes).ok());
  auto src = e->alloc_staging(bytes);
  ASSERT_TRUE(src.ok()) << src.error().message;
  std::memset(*src, 0x3c, bytes);
  std::vector<CopyTicket> t;
  for (int s = 0; s < 4; ++s) {
    auto k = e->submit(0, s, *src, bytes);
    ASSERT_TRUE(k.ok()) << k.error().message;
    t.push_back(*k);
  }
  ASSERT_TRUE(e->wait(t[3]).ok());
  for (const CopyTicket& k : t) EXPECT_TRUE(e->ready(k));
  EXPECT_EQ(e->event(t[0]), nullptr);
  std::vector<uint8_t> back(bytes);
  ASSERT_TRUE(e->copy_to_host(e->slot(0, 2), back.data(), bytes).ok());
  EXPECT_EQ(back[0], 0x3c);
  EXPECT_EQ(back[bytes - 1], 0x3c);
  std::vector<uint8_t> pageable(4096, 1);
  auto bad = e->submit(0, 0, pageable.data(), pageable.size());
  EXPECT_FALSE(bad.ok());
  EXPECT_FALSE(e->submit(0, 4, *src, 64).ok());  // slot out of range
}

// timing() (kernels/link_timing.h): every completed copy counted with its bytes and a positive
// device time; a consumer-stream wait on a copy in flight resolves into one stall probe; a host
// wait on a 64 MiB copy takes host time; the overlap is defined and in [0, 1]. The copy of 64 MiB
// takes milliseconds on any PCIe link, so the first stream_wait finds it in flight.
TEST(CudaCopyEngineGpu, TimingCountsCopiesStallsAndHostWaits) {
  if (!have_device()) GTEST_SKIP() << "no CUDA device";
  auto e = cuda_engine();
  const uint64_t bytes = uint64_t(64) << 20;
  ASSERT_TRUE(e->allocate_slots(1, 2, bytes).ok());
  auto src = e->alloc_staging(bytes);
  ASSERT_TRUE(src.ok()) << src.error().message;
  std::memset(*src, 0x5a, bytes);
  const dev::LinkTiming t0 = e->timing();
  EXPECT_EQ(t0.copies, 0u);
  StreamConsumer consumer;
  auto a = e->submit(0, 0, *src, bytes);
  ASSERT_TRUE(a.ok()) << a.error().message;
  ASSERT_TRUE(e->stream_wait(*a, consumer.s).ok());
  ASSERT_EQ(cudaStreamSynchronize(consumer.s), cudaSuccess);
  auto b = e->submit(0, 1, *src, bytes);
  ASSERT_TRUE(b.ok()) << b.error().message;
  ASSERT_TRUE(e->wait(*b).ok());
  const dev::LinkTiming t = e->timing();
  EXPECT_TRUE(t.measured);
  EXPECT_EQ(t.copies, 2u);
  EXPECT_EQ(t.bytes, 2 * bytes);
  EXPECT_GT(t.copy_s, 0.0);
  EXPECT_LT(t.copy_s, 10.0);
  EXPECT_EQ(t.stream_waits, 1u) << "the first copy was waited on by the consumer while in flight";
  EXPECT_GE(t.stall_s, 0.0);
  EXPECT_GT(t.host_wait_s, 0.0);
  ASSERT_TRUE(t.has_overlap());
  EXPECT_GE(t.overlap(), 0.0);
  EXPECT_LE(t.overlap(), 1.0);
  std::printf("  2 x 64 MiB: copy %.3f ms (%.2f GB/s), stall %.3f ms, host wait %.3f ms, overlap %.3f\n",
              t.copy_s * 1e3, 2.0 * double(bytes) / t.copy_s * 1e-9, t.stall_s * 1e3, t.host_wait_s * 1e3,
              t.overlap());
}

TEST(CudaCopyEngineGpu, ConsumerDoneOrdersTheNextCopyAfterTheReader) {
  if (!have_device()) GTEST_SKIP() << "no CUDA device";
  auto e = cuda_engine();
  const uint64_t bytes = uint64_t(64) << 20;
  ASSERT_TRUE(e->allocate_slots(1, 1, bytes).ok());
  auto a = e->alloc_staging(bytes), b = e->alloc_staging(bytes), out = e->alloc_staging(bytes);
  ASSERT_TRUE(a.ok() && b.ok() && out.ok());
  std::memset(*a, 0x11, bytes);
  std::memset(*b, 0x22, bytes);
  std::memset(*out, 0, bytes);
  StreamConsumer consumer;
  for (int rep = 0; rep < 4; ++rep) {
    auto ta = e->submit(0, 0, *a, bytes);
    ASSERT_TRUE(ta.ok()) << ta.error().message;
    // The reader (D2H on its own stream, ~ms for 64 MiB) starts after copy A ...
    ASSERT_TRUE(e->stream_wait(*ta, consumer.s).ok());
    ASSERT_EQ(cudaMemcpyAsync(*out, e->slot(0, 0), bytes, cudaMemcpyDeviceToHost, consumer.s), cudaSuccess);
    // ... and copy B into the same slot must not start before the reader is done.
    ASSERT_TRUE(e->consumer_done(0, 0, static_cast<StreamHandle>(consumer.s)).ok());
    auto tb = e->submit(0, 0, *b, bytes);
    ASSERT_TRUE(tb.ok()) << tb.error().message;
    ASSERT_EQ(cudaStreamSynchronize(consumer.s), cudaSuccess);
    ASSERT_TRUE(e->wait(*tb).ok());
    uint64_t wrong = 0;
    for (uint64_t i = 0; i < bytes; ++i) wrong += (*out)[i] != 0x11;
    EXPECT_EQ(wrong, 0u) << "rep " << rep << ": the reader saw bytes of the later copy";
    std::vector<uint8_t> back(4096);
    ASSERT_TRUE(e->copy_to_host(e->slot(0, 0) + bytes - 4096, back.data(), back.size()).ok());
    EXPECT_EQ(back[0], 0x22);
  }
}

}  // namespace
}  // namespace ds4::staging

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  if (!ds4::staging::have_device()) {
    std::printf("no CUDA device: skipped\n");
    return 77;
  }
  return RUN_ALL_TESTS();
}
