// staging/cuda/copy_engine_cuda.cpp — the CUDA copy engine of the device expert cache (compiled
// only when the build has CUDA; staging/CMakeLists.txt adds it and defines DS4_HAVE_CUDA).
//
// Slots: one cudaMalloc per layer. Copies: cudaMemcpyAsync host->device on one dedicated stream
// created with cudaStreamNonBlocking (so it never serialises with the legacy default stream),
// from pinned memory only (checked with cudaPointerGetAttributes; pageable data goes through a
// BounceRing). After each copy one event (cudaEventDisableTiming) is recorded; the ticket maps to
// that event. Events are recycled once they are seen complete; since the stream completes copies
// in order, a completed ticket implies every earlier one completed, which lets ready() answer
// from one counter for old tickets. Consumers call stream_wait(t, compute_stream), which issues
// cudaStreamWaitEvent: the host never blocks on the copy. The reverse hazard (a copy overwriting
// a slot that a consumer stream still reads) is ordered by consumer_done(): an event recorded on
// the consumer stream that the next copy into that slot waits for on the copy stream.
#include <cuda_runtime.h>

#include <deque>
#include <string>
#include <vector>

#include "staging/copy_engine.h"

namespace ds4::staging {

namespace {

/// Error naming the device, source location, failed statement and CUDA's message. The sticky
/// "last error" is cleared so later unrelated calls do not report it again.
Error cuda_error(int device, const char* file, int line, const char* stmt, cudaError_t e) {
  cudaGetLastError();
  return Error{"CUDA device " + std::to_string(device) + ": " + file + ":" + std::to_string(line) + ": " + stmt +
               " failed: " + cudaGetErrorName(e) + " (" + cudaGetErrorString(e) + ")"};
}

/// Inside a member function of CudaCopyEngine returning Result<...>.
#define DS4_STAGING_CUDA(stmt)                                                   \
  do {                                                                           \
    const cudaError_t ds4_ce = (stmt);                                           \
    if (ds4_ce != cudaSuccess) return cuda_error(device_, __FILE__, __LINE__, #stmt, ds4_ce); \
  } while (0)

class CudaCopyEngine final : public CopyEngine {
 public:
  explicit CudaCopyEngine(int device) : device_(device) {}

  ~CudaCopyEngine() override {
    // Best effort: finish in-flight copies before freeing their buffers; errors are dropped.
    if (cudaSetDevice(device_) != cudaSuccess) { cudaGetLastError(); return; }
    if (stream_) cudaStreamSynchronize(stream_);
    for (auto& f : inflight_) cudaEventDestroy(f.ev);
    for (cudaEvent_t e : free_events_) cudaEventDestroy(e);
    for (cudaEvent_t e : consumer_ev_)
      if (e) cudaEventDestroy(e);
    for (uint8_t* p : layers_) cudaFree(p);
    for (uint8_t* p : staging_) cudaFreeHost(p);
    if (stream_) cudaStreamDestroy(stream_);
    cudaGetLastError();
  }

  Result<void> init() {
    int n = 0;
    DS4_STAGING_CUDA(cudaGetDeviceCount(&n));
    if (device_ < 0 || device_ >= n)
      return Error{"CUDA copy engine: device " + std::to_string(device_) + " requested, " + std::to_string(n) +
                   " present"};
    DS4_STAGING_CUDA(cudaSetDevice(device_));
    DS4_STAGING_CUDA(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    return ok();
  }

  const char* name() const override { return "cuda"; }
  bool device_slots() const override { return true; }

  Result<void> allocate_slots(int n_layer, int slots_per_layer, uint64_t slot_bytes) override {
    DS4_CHECK(layers_.empty());
    if (n_layer < 1 || slots_per_layer < 1 || slot_bytes == 0)
      return Error{"CUDA copy engine: expected n_layer, slots_per_layer and slot_bytes > 0"};
    DS4_STAGING_CUDA(cudaSetDevice(device_));
    slots_ = slots_per_layer;
    slot_bytes_ = slot_bytes;
    for (int l = 0; l < n_layer; ++l) {
      void* p = nullptr;
      DS4_STAGING_CUDA(cudaMalloc(&p, slot_bytes * static_cast<uint64_t>(slots_per_layer)));
      layers_.push_back(static_cast<uint8_t*>(p));
    }
    consumer_ev_.assign(static_cast<size_t>(n_layer * slots_per_layer), nullptr);
    consumer_pending_.assign(static_cast<size_t>(n_layer * slots_per_layer), 0);
    return ok();
  }

  uint8_t* slot(int layer, int s) const override {
    DS4_CHECK(layer >= 0 && layer < static_cast<int>(layers_.size()) && s >= 0 && s < slots_);
    return layers_[static_cast<size_t>(layer)] + static_cast<uint64_t>(s) * slot_bytes_;
  }

  Result<uint8_t*> alloc_staging(uint64_t bytes) override {
    DS4_STAGING_CUDA(cudaSetDevice(device_));
    void* p = nullptr;
    DS4_STAGING_CUDA(cudaHostAlloc(&p, bytes, cudaHostAllocPortable));
    staging_.push_back(static_cast<uint8_t*>(p));
    return static_cast<uint8_t*>(p);
  }

  Result<CopyTicket> submit(int layer, int s, const void* src, uint64_t bytes) override {
    if (layer < 0 || layer >= static_cast<int>(layers_.size()) || s < 0 || s >= slots_ || bytes > slot_bytes_)
      return Error{"CUDA copy engine: copy of " + std::to_string(bytes) + " bytes to (layer " + std::to_string(layer) +
                   ", slot " + std::to_string(s) + ") outside the " + std::to_string(layers_.size()) + " x " +
                   std::to_string(slots_) + " slots of " + std::to_string(slot_bytes_) + " bytes"};
    cudaPointerAttributes attr{};
    DS4_STAGING_CUDA(cudaPointerGetAttributes(&attr, src));
    if (attr.type != cudaMemoryTypeHost)
      return Error{"CUDA copy engine: source of the copy to (layer " + std::to_string(layer) + ", slot " +
                   std::to_string(s) + ") is not pinned host memory; copy pageable data through a BounceRing"};
    DS4_STAGING_CUDA(cudaSetDevice(device_));
    const size_t ci = static_cast<size_t>(layer * slots_ + s);
    if (consumer_pending_[ci]) {  // a consumer still reads the old contents: copy after it
      DS4_STAGING_CUDA(cudaStreamWaitEvent(stream_, consumer_ev_[ci], 0));
      consumer_pending_[ci] = 0;
    }
    cudaEvent_t ev = nullptr;
    if (!free_events_.empty()) {
      ev = free_events_.back();
      free_events_.pop_back();
    } else {
      DS4_STAGING_CUDA(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));
    }
    const cudaError_t e1 = cudaMemcpyAsync(slot(layer, s), src, bytes, cudaMemcpyHostToDevice, stream_);
    if (e1 != cudaSuccess) {
      free_events_.push_back(ev);
      return cuda_error(device_, __FILE__, __LINE__, "cudaMemcpyAsync(slot, src, bytes, H2D, copy_stream)", e1);
    }
    const cudaError_t e2 = cudaEventRecord(ev, stream_);
    if (e2 != cudaSuccess) {
      free_events_.push_back(ev);
      return cuda_error(device_, __FILE__, __LINE__, "cudaEventRecord(ev, copy_stream)", e2);
    }
    inflight_.push_back({++last_, ev});
    return CopyTicket{last_};
  }

  bool ready(CopyTicket t) override {
    if (t.id <= done_) return true;
    DS4_CHECK(t.id <= last_);
    // Retire completed events in order up to t.
    while (!inflight_.empty() && inflight_.front().id <= t.id) {
      const cudaError_t e = cudaEventQuery(inflight_.front().ev);
      if (e == cudaErrorNotReady) return false;
      if (e != cudaSuccess) {
        // A failed copy: answer "not ready"; the caller's wait() then reports the error.
        cudaGetLastError();
        return false;
      }
      retire_front();
    }
    return t.id <= done_;
  }

  Result<void> wait(CopyTicket t) override {
    if (t.id <= done_) return ok();
    DS4_CHECK(t.id <= last_);
    DS4_STAGING_CUDA(cudaSetDevice(device_));
    while (!inflight_.empty() && inflight_.front().id <= t.id) {
      DS4_STAGING_CUDA(cudaEventSynchronize(inflight_.front().ev));
      retire_front();
    }
    return ok();
  }

  Result<void> stream_wait(CopyTicket t, StreamHandle consumer) override {
    if (ready(t)) return ok();
    cudaEvent_t ev = find(t);
    DS4_CHECK(ev != nullptr);
    DS4_STAGING_CUDA(cudaStreamWaitEvent(static_cast<cudaStream_t>(consumer), ev, 0));
    return ok();
  }

  Result<void> consumer_done(int layer, int s, StreamHandle consumer) override {
    if (layer < 0 || layer >= static_cast<int>(layers_.size()) || s < 0 || s >= slots_)
      return Error{"CUDA copy engine: consumer_done on (layer " + std::to_string(layer) + ", slot " +
                   std::to_string(s) + ") out of range"};
    DS4_STAGING_CUDA(cudaSetDevice(device_));
    const size_t ci = static_cast<size_t>(layer * slots_ + s);
    if (!consumer_ev_[ci]) DS4_STAGING_CUDA(cudaEventCreateWithFlags(&consumer_ev_[ci], cudaEventDisableTiming));
    // Re-recording is safe: a cudaStreamWaitEvent already issued waits for the earlier record.
    DS4_STAGING_CUDA(cudaEventRecord(consumer_ev_[ci], static_cast<cudaStream_t>(consumer)));
    consumer_pending_[ci] = 1;
    return ok();
  }

  StreamHandle copy_stream() const override { return static_cast<StreamHandle>(stream_); }

  EventHandle event(CopyTicket t) override {
    if (ready(t)) return nullptr;
    return static_cast<EventHandle>(find(t));
  }

  Result<void> copy_to_host(const uint8_t* slot_addr, void* dst, uint64_t bytes) override {
    DS4_STAGING_CUDA(cudaSetDevice(device_));
    DS4_STAGING_CUDA(cudaStreamSynchronize(stream_));
    DS4_STAGING_CUDA(cudaMemcpy(dst, slot_addr, bytes, cudaMemcpyDeviceToHost));
    return ok();
  }

 private:
  struct InFlight {
    uint64_t id;
    cudaEvent_t ev;
  };
  void retire_front() {
    done_ = inflight_.front().id;
    free_events_.push_back(inflight_.front().ev);
    inflight_.pop_front();
  }
  cudaEvent_t find(CopyTicket t) const {
    for (const InFlight& f : inflight_)
      if (f.id == t.id) return f.ev;
    return nullptr;
  }

  int device_ = 0;
  cudaStream_t stream_ = nullptr;
  std::vector<uint8_t*> layers_, staging_;
  int slots_ = 0;
  uint64_t slot_bytes_ = 0;
  std::deque<InFlight> inflight_;
  std::vector<cudaEvent_t> free_events_;
  std::vector<cudaEvent_t> consumer_ev_;    // [layer * slots + slot], created on first use
  std::vector<char> consumer_pending_;      // [layer * slots + slot] recorded, not yet waited on
  uint64_t last_ = 0, done_ = 0;
};

#undef DS4_STAGING_CUDA

}  // namespace

Result<std::unique_ptr<CopyEngine>> make_cuda_copy_engine(int device) {
  auto e = std::make_unique<CudaCopyEngine>(device);
  DS4_TRY_VOID(e->init());
  std::unique_ptr<CopyEngine> out = std::move(e);
  return out;
}

}  // namespace ds4::staging
