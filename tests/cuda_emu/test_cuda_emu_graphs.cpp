// tests/cuda_emu/test_cuda_emu_graphs.cpp — cuda_emu_test's stream-capture cases
// (tests/cuda_emu/cuda_emu_graphs.cpp): captured work does not run until a launch of the graph,
// each launch replays it with the by-value kernel arguments of the capture, cudaGraphExecUpdate
// takes a new capture's arguments and refuses a changed topology, calls that conflict with a
// capture fail and invalidate it (stream synchronize, pageable copies, waits across the capture
// boundary, unsafe calls outside Relaxed mode), and NCCL collectives captured on two devices replay.
#include <gtest/gtest.h>
#include <nccl.h>

#include <cstring>
#include <vector>

#include "tests/cuda_emu/test_cuda_emu_kernels.h"

namespace ds4::emutest {
namespace {

#define CK(x) ASSERT_EQ((x), cudaSuccess)

class CudaEmuGraphs : public ::testing::Test {
 protected:
  void SetUp() override { ds4::emu::reset(); }
  /// A device buffer of n floats holding `v` (the legacy-stream copy landed before any
  /// non-blocking stream reads it: the device is synchronized).
  float* dev_floats(const std::vector<float>& v) {
    void* p = nullptr;
    EXPECT_EQ(cudaMalloc(&p, v.size() * 4), cudaSuccess);
    EXPECT_EQ(cudaMemcpy(p, v.data(), v.size() * 4, cudaMemcpyHostToDevice), cudaSuccess);
    EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    return static_cast<float*>(p);
  }
  std::vector<float> host(const float* d, size_t n) {
    std::vector<float> h(n);
    EXPECT_EQ(cudaMemcpy(h.data(), d, n * 4, cudaMemcpyDeviceToHost), cudaSuccess);
    return h;
  }
  cudaStream_t stream() {
    cudaStream_t s = nullptr;
    EXPECT_EQ(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), cudaSuccess);
    return s;
  }
};

constexpr int kN = 1000;

TEST_F(CudaEmuGraphs, CapturedWorkRunsOnlyWhenTheGraphIsLaunched) {
  float* x = dev_floats(std::vector<float>(kN, 1.0f));
  float* y = dev_floats(std::vector<float>(kN, 0.0f));
  cudaStream_t s = stream();
  CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeRelaxed));
  cudaStreamCaptureStatus cs = cudaStreamCaptureStatusNone;
  CK(cudaStreamIsCapturing(s, &cs));
  EXPECT_EQ(cs, cudaStreamCaptureStatusActive);
  CK(launch_axpy(s, x, y, 2.0f, kN));  // y += 2 x
  cudaGraph_t g = nullptr;
  CK(cudaStreamEndCapture(s, &g));
  ASSERT_NE(g, nullptr);
  size_t nodes = 0;
  CK(cudaGraphGetNodes(g, nullptr, &nodes));
  EXPECT_EQ(nodes, 1u);
  CK(cudaStreamIsCapturing(s, &cs));
  EXPECT_EQ(cs, cudaStreamCaptureStatusNone);
  CK(cudaStreamSynchronize(s));
  EXPECT_EQ(host(y, kN), std::vector<float>(kN, 0.0f)) << "captured work ran at capture";
  EXPECT_EQ(ds4::emu::stats().kernels, 0u);
  cudaGraphExec_t e = nullptr;
  CK(cudaGraphInstantiate(&e, g, 0));
  for (int i = 0; i < 3; ++i) CK(cudaGraphLaunch(e, s));
  CK(cudaStreamSynchronize(s));
  EXPECT_EQ(host(y, kN), std::vector<float>(kN, 6.0f));
  EXPECT_EQ(ds4::emu::stats().kernels, 3u);
  EXPECT_EQ(ds4::emu::stats().graph_launches, 3u);
  EXPECT_EQ(ds4::emu::stats().captured_nodes, 1u);
  CK(cudaGraphExecDestroy(e));
  CK(cudaGraphDestroy(g));
}

TEST_F(CudaEmuGraphs, ReplaysUseTheCapturedByValueArgumentsAndUpdateTakesNewOnes) {
  float* x = dev_floats(std::vector<float>(kN, 1.0f));
  float* y = dev_floats(std::vector<float>(kN, 0.0f));
  cudaStream_t s = stream();
  float a = 1.0f;
  cudaGraph_t g1 = nullptr, g5 = nullptr;
  CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeRelaxed));
  CK(launch_axpy(s, x, y, a, kN));
  CK(cudaStreamEndCapture(s, &g1));
  a = 5.0f;  // the next capture's value; g1 keeps 1
  CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeRelaxed));
  CK(launch_axpy(s, x, y, a, kN));
  CK(cudaStreamEndCapture(s, &g5));
  cudaGraphExec_t e = nullptr;
  CK(cudaGraphInstantiate(&e, g1, 0));
  CK(cudaGraphLaunch(e, s));
  CK(cudaStreamSynchronize(s));
  EXPECT_EQ(host(y, kN), std::vector<float>(kN, 1.0f));
  cudaGraphExecUpdateResultInfo info{};
  CK(cudaGraphExecUpdate(e, g5, &info));
  EXPECT_EQ(info.result, cudaGraphExecUpdateSuccess);
  CK(cudaGraphLaunch(e, s));
  CK(cudaStreamSynchronize(s));
  EXPECT_EQ(host(y, kN), std::vector<float>(kN, 6.0f));
  CK(cudaGraphExecDestroy(e));
  CK(cudaGraphDestroy(g1));
  CK(cudaGraphDestroy(g5));
}

TEST_F(CudaEmuGraphs, UpdateRefusesAChangedTopologyAndKeepsTheOldGraph) {
  float* x = dev_floats(std::vector<float>(256, 1.0f));
  float* y = dev_floats(std::vector<float>(256, 0.0f));
  cudaStream_t s = stream();
  auto capture = [&](int kind) {
    cudaGraph_t g = nullptr;
    EXPECT_EQ(cudaStreamBeginCapture(s, cudaStreamCaptureModeRelaxed), cudaSuccess);
    if (kind == 2) {
      EXPECT_EQ(launch_reverse(s, x, y, 1, 256), cudaSuccess);
    } else {
      for (int i = 0; i <= kind; ++i) EXPECT_EQ(launch_axpy(s, x, y, 1.0f, 256), cudaSuccess);
    }
    EXPECT_EQ(cudaStreamEndCapture(s, &g), cudaSuccess);
    return g;
  };
  cudaGraph_t one = capture(0), two = capture(1), other = capture(2);
  cudaGraphExec_t e = nullptr;
  CK(cudaGraphInstantiate(&e, one, 0));
  cudaGraphExecUpdateResultInfo info{};
  EXPECT_EQ(cudaGraphExecUpdate(e, two, &info), cudaErrorGraphExecUpdateFailure);
  EXPECT_EQ(info.result, cudaGraphExecUpdateErrorTopologyChanged);
  EXPECT_EQ(cudaGraphExecUpdate(e, other, &info), cudaErrorGraphExecUpdateFailure);
  EXPECT_EQ(info.result, cudaGraphExecUpdateErrorFunctionChanged);
  (void)cudaGetLastError();
  CK(cudaGraphLaunch(e, s));  // still the one-kernel graph
  CK(cudaStreamSynchronize(s));
  EXPECT_EQ(host(y, 256), std::vector<float>(256, 1.0f));
  CK(cudaGraphExecDestroy(e));
  for (cudaGraph_t g : {one, two, other}) CK(cudaGraphDestroy(g));
}

TEST_F(CudaEmuGraphs, AHostWaitOnACapturingStreamFailsAndInvalidatesTheCapture) {
  float* y = dev_floats(std::vector<float>(kN, 0.0f));
  cudaStream_t s = stream();
  // cudaStreamSynchronize (what a download does after its copy).
  CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeRelaxed));
  EXPECT_EQ(cudaStreamSynchronize(s), cudaErrorStreamCaptureUnsupported);
  cudaStreamCaptureStatus cs = cudaStreamCaptureStatusNone;
  CK(cudaStreamIsCapturing(s, &cs));
  EXPECT_EQ(cs, cudaStreamCaptureStatusInvalidated);
  cudaGraph_t g = reinterpret_cast<cudaGraph_t>(1);
  EXPECT_EQ(cudaStreamEndCapture(s, &g), cudaErrorStreamCaptureInvalidated);
  EXPECT_EQ(g, nullptr);
  // A copy into pageable host memory (it would need a host wait).
  std::vector<float> h(kN);
  CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeRelaxed));
  EXPECT_EQ(cudaMemcpyAsync(h.data(), y, kN * 4, cudaMemcpyDeviceToHost, s), cudaErrorStreamCaptureUnsupported);
  EXPECT_EQ(cudaStreamEndCapture(s, &g), cudaErrorStreamCaptureInvalidated);
  // cudaDeviceSynchronize while a stream of the device captures.
  CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeRelaxed));
  EXPECT_EQ(cudaDeviceSynchronize(), cudaErrorStreamCaptureUnsupported);
  EXPECT_EQ(cudaStreamEndCapture(s, &g), cudaErrorStreamCaptureInvalidated);
  (void)cudaGetLastError();
  CK(cudaStreamSynchronize(s));  // usable again once the capture ended
}

TEST_F(CudaEmuGraphs, UnsafeCallsFollowTheCaptureMode) {
  cudaStream_t s = stream();
  void* p = nullptr;
  cudaGraph_t g = nullptr;
  for (cudaStreamCaptureMode m : {cudaStreamCaptureModeGlobal, cudaStreamCaptureModeThreadLocal}) {
    CK(cudaStreamBeginCapture(s, m));
    EXPECT_EQ(cudaMalloc(&p, 1024), cudaErrorStreamCaptureUnsupported) << "mode " << int(m);
    EXPECT_EQ(cudaStreamEndCapture(s, &g), cudaErrorStreamCaptureInvalidated);
  }
  CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeRelaxed));
  CK(cudaMalloc(&p, 1024));  // Relaxed: allowed (not part of the graph)
  cudaStream_t other = stream();
  CK(cudaMemsetAsync(p, 0, 1024, other));
  CK(cudaStreamSynchronize(other));  // another stream: allowed in Relaxed mode
  CK(cudaStreamEndCapture(s, &g));
  size_t nodes = 9;
  CK(cudaGraphGetNodes(g, nullptr, &nodes));
  EXPECT_EQ(nodes, 0u);
  CK(cudaGraphDestroy(g));
  CK(cudaFree(p));
}

TEST_F(CudaEmuGraphs, EventsAcrossTheCaptureBoundary) {
  cudaStream_t s = stream(), other = stream();
  cudaEvent_t outside = nullptr, inside = nullptr;
  CK(cudaEventCreateWithFlags(&outside, cudaEventDisableTiming));
  CK(cudaEventCreateWithFlags(&inside, cudaEventDisableTiming));
  CK(cudaEventRecord(outside, other));
  cudaGraph_t g = nullptr;
  CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeRelaxed));
  EXPECT_EQ(cudaStreamWaitEvent(s, outside, 0), cudaErrorStreamCaptureIsolation);
  EXPECT_EQ(cudaStreamEndCapture(s, &g), cudaErrorStreamCaptureInvalidated);
  // An event recorded inside a capture: not queryable until the capture ended; a launch records it.
  CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeRelaxed));
  CK(cudaEventRecord(inside, s));
  EXPECT_EQ(cudaEventQuery(inside), cudaErrorCapturedEvent);
  CK(cudaStreamWaitEvent(s, inside, 0));  // same capture: in-stream order
  CK(cudaStreamEndCapture(s, &g));
  cudaGraphExec_t e = nullptr;
  CK(cudaGraphInstantiate(&e, g, 0));
  CK(cudaGraphLaunch(e, s));
  CK(cudaEventSynchronize(inside));
  CK(cudaEventQuery(inside));
  CK(cudaGraphExecDestroy(e));
  CK(cudaGraphDestroy(g));
}

TEST_F(CudaEmuGraphs, NcclCollectivesCapturedOnTwoDevicesReplay) {
  ds4::emu::set_device_count(2);
  ncclComm_t comms[2];
  ASSERT_EQ(ncclCommInitAll(comms, 2, nullptr), ncclSuccess);
  cudaStream_t st[2];
  float* buf[2];
  cudaGraphExec_t ex[2];
  for (int d = 0; d < 2; ++d) {
    CK(cudaSetDevice(d));
    st[d] = stream();
    buf[d] = dev_floats(std::vector<float>(kN, float(d + 1)));
    cudaGraph_t g = nullptr;
    CK(cudaStreamBeginCapture(st[d], cudaStreamCaptureModeRelaxed));
    ASSERT_EQ(ncclAllReduce(buf[d], buf[d], kN, ncclFloat32, ncclSum, comms[d], st[d]), ncclSuccess);
    CK(cudaStreamEndCapture(st[d], &g));
    CK(cudaGraphInstantiate(&ex[d], g, 0));
    CK(cudaGraphDestroy(g));  // the exec keeps its nodes
  }
  for (int d = 0; d < 2; ++d) {
    CK(cudaSetDevice(d));
    CK(cudaStreamSynchronize(st[d]));
    EXPECT_EQ(host(buf[d], kN), std::vector<float>(kN, float(d + 1))) << "the capture ran the collective";
  }
  for (int round = 0; round < 2; ++round)
    for (int d = 0; d < 2; ++d) {
      CK(cudaSetDevice(d));
      CK(cudaGraphLaunch(ex[d], st[d]));
    }
  for (int d = 0; d < 2; ++d) {
    CK(cudaSetDevice(d));
    CK(cudaStreamSynchronize(st[d]));
    EXPECT_EQ(host(buf[d], kN), std::vector<float>(kN, 6.0f));  // (1 + 2) then (3 + 3)
    CK(cudaGraphExecDestroy(ex[d]));
  }
}

}  // namespace
}  // namespace ds4::emutest
