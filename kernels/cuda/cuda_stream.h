// kernels/cuda/cuda_stream.h — the CUDA backend's device memory, streams and events
// (device_cuda.cpp): one cudaMalloc per buffer (or a view of a copy-engine slot), the grow-only
// per-stream scratch of the ops queued on a stream, the non-blocking stream that owns them, and
// the event type. Internal to the backend.
#pragma once

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <vector>

#include "kernels/cuda/cuda_check.h"
#include "kernels/device.h"

namespace ds4::cuda::detail {

using dev::Buffer;

/// The backend tag of every CUDA buffer (Buffer::backend()).
inline const char kCudaBackendTag = 0;

/// Makes CUDA device `ordinal` the calling host thread's current device (allocations, streams,
/// events and launches use the current device; a rank thread of the engine, or the thread that
/// loads the weights, may come with another one current).
inline void use_device(int ordinal) {
  int cur = -1;
  DS4_CUDA_CHECK(cudaGetDevice(&cur));
  if (cur != ordinal) DS4_CUDA_CHECK(cudaSetDevice(ordinal));
}

/// One cudaMalloc (contents undefined: Device::alloc zeroes it on the compute stream), or a view
/// of `n` bytes of device memory owned elsewhere (a copy-engine slot); `staged` marks the slots of
/// the staging ring (tier accounting).
class CudaBuffer final : public Buffer {
 public:
  CudaBuffer(uint64_t n, bool staged) : bytes_(n), staged_(staged) { DS4_CUDA_CHECK(cudaMalloc(&mem_, n ? n : 1)); }
  /// Non-owning view of [mem, mem + n) (device memory that outlives the view).
  CudaBuffer(void* mem, uint64_t n, bool staged) : bytes_(n), staged_(staged), mem_(mem), owned_(false) {}
  ~CudaBuffer() override {
    if (owned_) (void)cudaFree(mem_);
  }
  uint64_t bytes() const override { return bytes_; }
  const void* backend() const override { return &kCudaBackendTag; }
  uint8_t* base() const { return static_cast<uint8_t*>(mem_); }
  bool staged() const { return staged_; }

 private:
  uint64_t bytes_;
  bool staged_;
  void* mem_ = nullptr;
  bool owned_ = true;
};

/// Grow-only device scratch of one stream: the ops queued on that stream reuse it in stream
/// order. Growing first waits for the stream (host sync), so no queued kernel still uses the old
/// allocation when it is freed; contents are undefined (every user writes before reading). While
/// the stream captures a graph region (graph_cuda.h) it may not be waited for: the old buffer,
/// which work queued before the region and the region's own earlier nodes may read, is kept
/// (`retired`) until the next growth outside a region has waited for the stream.
struct Scratch {
  std::unique_ptr<CudaBuffer> b;
  std::vector<std::unique_ptr<CudaBuffer>> retired;
  /// At least `bytes` of device memory; `st` is the stream every user of this scratch runs on.
  uint8_t* get(uint64_t bytes, cudaStream_t st) {
    if (!b || b->bytes() < bytes) {
      cudaStreamCaptureStatus cap = cudaStreamCaptureStatusNone;
      DS4_CUDA_CHECK(cudaStreamIsCapturing(st, &cap));
      if (b && cap == cudaStreamCaptureStatusNone) {
        DS4_CUDA_CHECK(cudaStreamSynchronize(st));
        retired.clear();
      }
      const uint64_t grown = std::max<uint64_t>(bytes, b ? 2 * b->bytes() : 0);
      if (b && cap != cudaStreamCaptureStatusNone) retired.push_back(std::move(b));
      b.reset();
      b = std::make_unique<CudaBuffer>(grown, false);  // cudaMalloc: allowed in a Relaxed capture
    }
    return b->base();
  }
};

/// A CUDA stream (non-blocking: not ordered with the legacy default stream) and the scratch
/// buffers of the ops queued on it (per stream, so ops on two streams never share scratch).
class CudaStream final : public dev::Stream {
 public:
  /// A stream of CUDA device `ordinal` (made now when `create`; the device's compute stream is
  /// made by the device).
  CudaStream(bool create, int ordinal) : dev_(ordinal) {
    if (create) {
      use_device(ordinal);
      DS4_CUDA_CHECK(cudaStreamCreateWithFlags(&s_, cudaStreamNonBlocking));
    }
  }
  ~CudaStream() override {
    if (s_) {
      (void)cudaStreamSynchronize(s_);  // queued kernels may still use the scratch below
      (void)cudaStreamDestroy(s_);
    }
  }
  cudaStream_t s_ = nullptr;
  int dev_ = 0;  // CUDA ordinal of the stream's device
  // all_reduce_sum: the R gathered partials [R, count].
  Scratch coll;
  // run_matmuls: packed x, Q8_1 activations, FP8-QDQ activations, packed w, packed y.
  Scratch xpack, actq, xqdq, wpack, ypack;
  // moe_experts: pair list (grouped: remapped ids), gathered x, route weights, gate, up, expert
  // output; the grouped path's expert weight pointers, sort output and Q8_1 hidden activations.
  Scratch moe_pairs, moe_x, moe_w, moe_g, moe_u, moe_y, moe_wptr, moe_sort, moe_hq;
};

/// A CUDA event without timing (Device::record / wait).
class CudaEvent final : public dev::Event {
 public:
  /// `timing`: an event cudaEventElapsedTime can read (Device::record_timed); else the cheaper
  /// cudaEventDisableTiming kind.
  explicit CudaEvent(bool timing = false) {
    DS4_CUDA_CHECK(cudaEventCreateWithFlags(&e_, timing ? cudaEventDefault : cudaEventDisableTiming));
  }
  ~CudaEvent() override { (void)cudaEventDestroy(e_); }
  cudaEvent_t e_ = nullptr;
};

}  // namespace ds4::cuda::detail
