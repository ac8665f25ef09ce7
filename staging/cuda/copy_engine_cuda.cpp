// staging/cuda/copy_engine_cuda.cpp — the CUDA copy engine of the device expert cache (compiled
// only when the build has CUDA; staging/CMakeLists.txt adds it and defines DS4_HAVE_CUDA).
//
// Slots: one cudaMalloc per layer. Copies: cudaMemcpyAsync host->device on one dedicated stream
// created with cudaStreamNonBlocking (so it never serialises with the legacy default stream),
// from pinned memory only (checked with cudaPointerGetAttributes; pageable data goes through a
// BounceRing). Around each copy two timing events are recorded (start, end); the ticket maps to
// the end event. Events are recycled once they are seen complete; since the stream completes copies
// in order, a completed ticket implies every earlier one completed, which lets ready() answer
// from one counter for old tickets. Consumers call stream_wait(t, compute_stream), which issues
// cudaStreamWaitEvent: the host never blocks on the copy. The reverse hazard (a copy overwriting
// a slot that a consumer stream still reads) is ordered by consumer_done(): an event recorded on
// the consumer stream that the next copy into that slot waits for on the copy stream.
// Timing (timing(), kernels/link_timing.h): a retired copy adds cudaEventElapsedTime(start, end)
// to copy_s; a stream_wait on an incomplete copy also records an event C on the consumer before
// the wait and, once both have completed, adds max(0, end - C) to stall_s (the end event is kept
// out of the recycling pool until then); wait() adds its host seconds to host_wait_s.
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <map>
#include <set>

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
    for (auto& f : inflight_) {
      cudaEventDestroy(f.ev);
      cudaEventDestroy(f.start);
    }
    for (const StallPair& p : stalls_) cudaEventDestroy(p.c);
    for (cudaEvent_t e : retired_held_) cudaEventDestroy(e);
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
    DS4_TRY(cudaEvent_t start, take_event());
    const Result<cudaEvent_t> end = take_event();
    if (!end) {
      free_events_.push_back(start);
      return end.error();
    }
    cudaEvent_t ev = *end;
    const cudaError_t e0 = cudaEventRecord(start, stream_);
    const cudaError_t e1 =
        e0 != cudaSuccess ? e0 : cudaMemcpyAsync(slot(layer, s), src, bytes, cudaMemcpyHostToDevice, stream_);
    const cudaError_t e2 = e1 != cudaSuccess ? e1 : cudaEventRecord(ev, stream_);
    if (e2 != cudaSuccess) {
      free_events_.push_back(ev);
      free_events_.push_back(start);
      return cuda_error(device_, __FILE__, __LINE__,
                        "cudaEventRecord(start) / cudaMemcpyAsync(slot, src, bytes, H2D, copy_stream) / "
                        "cudaEventRecord(end)",
                        e2);
    }
    inflight_.push_back({++last_, ev, start, bytes});
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
    const auto t0 = std::chrono::steady_clock::now();
    while (!inflight_.empty() && inflight_.front().id <= t.id) {
      DS4_STAGING_CUDA(cudaEventSynchronize(inflight_.front().ev));
      retire_front();
    }
    timing_.host_wait_s += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    return ok();
  }

  Result<void> stream_wait(CopyTicket t, StreamHandle consumer) override {
    if (ready(t)) return ok();
    cudaEvent_t ev = find(t);
    DS4_CHECK(ev != nullptr);
    DS4_STAGING_CUDA(cudaSetDevice(device_));
    // The stall probe: C on the consumer before the wait; (C, ev) resolved by harvest_stalls().
    DS4_TRY(cudaEvent_t c, take_event());
    if (const cudaError_t e = cudaEventRecord(c, static_cast<cudaStream_t>(consumer)); e != cudaSuccess) {
      free_events_.push_back(c);
      return cuda_error(device_, __FILE__, __LINE__, "cudaEventRecord(stall probe, consumer)", e);
    }
    stalls_.push_back({c, ev});
    ++held_[ev];
    DS4_STAGING_CUDA(cudaStreamWaitEvent(static_cast<cudaStream_t>(consumer), ev, 0));
    if (stalls_.size() > 64) harvest_stalls();
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

  dev::LinkTiming timing() override {
    if (cudaSetDevice(device_) != cudaSuccess) {
      cudaGetLastError();
      return timing_;
    }
    while (!inflight_.empty()) {  // retire what has completed (polling, never blocking)
      const cudaError_t e = cudaEventQuery(inflight_.front().ev);
      if (e != cudaSuccess) {
        if (e != cudaErrorNotReady) cudaGetLastError();
        break;
      }
      retire_front();
    }
    harvest_stalls();
    return timing_;
  }

 private:
  struct InFlight {
    uint64_t id;
    cudaEvent_t ev;     // recorded after the copy (the ticket's event)
    cudaEvent_t start;  // recorded before it
    uint64_t bytes;
  };
  /// A stall probe: `c` on the consumer before its wait for copy-end event `end`.
  struct StallPair {
    cudaEvent_t c, end;
  };
  /// An event (timing enabled) from the pool, or a new one.
  Result<cudaEvent_t> take_event() {
    cudaEvent_t ev = nullptr;
    if (!free_events_.empty()) {
      ev = free_events_.back();
      free_events_.pop_back();
      return ev;
    }
    DS4_STAGING_CUDA(cudaEventCreateWithFlags(&ev, cudaEventDefault));
    return ev;
  }
  /// Adds the front copy's time to timing_, recycles its events (the end event only once no stall
  /// probe refers to it) and marks it done.
  void retire_front() {
    const InFlight f = inflight_.front();
    inflight_.pop_front();
    done_ = f.id;
    float ms = 0;
    if (cudaEventElapsedTime(&ms, f.start, f.ev) == cudaSuccess)
      timing_.copy_s += double(ms) * 1e-3;
    else
      cudaGetLastError();
    timing_.measured = true;
    ++timing_.copies;
    timing_.bytes += f.bytes;
    free_events_.push_back(f.start);
    if (held_.count(f.ev))
      retired_held_.insert(f.ev);
    else
      free_events_.push_back(f.ev);
  }
  /// Resolves the stall probes whose two events have completed: stall_s += max(0, end - c).
  void harvest_stalls() {
    size_t keep = 0;
    for (size_t i = 0; i < stalls_.size(); ++i) {
      const StallPair p = stalls_[i];
      const cudaError_t qc = cudaEventQuery(p.c);
      const cudaError_t qe = qc == cudaSuccess ? cudaEventQuery(p.end) : cudaSuccess;
      if (qc != cudaSuccess || qe != cudaSuccess) {
        if ((qc != cudaSuccess && qc != cudaErrorNotReady) || (qe != cudaSuccess && qe != cudaErrorNotReady))
          cudaGetLastError();  // a failed probe stays pending; errors are reported by the copies' own waits
        stalls_[keep++] = p;
        continue;
      }
      float ms = 0;
      if (cudaEventElapsedTime(&ms, p.c, p.end) == cudaSuccess)
        timing_.stall_s += std::max(0.0, double(ms) * 1e-3);
      else
        cudaGetLastError();
      ++timing_.stream_waits;
      free_events_.push_back(p.c);
      if (--held_[p.end] == 0) {
        held_.erase(p.end);
        if (retired_held_.erase(p.end)) free_events_.push_back(p.end);
      }
    }
    stalls_.resize(keep);
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
  std::vector<StallPair> stalls_;           // stall probes not yet resolved
  std::map<cudaEvent_t, int> held_;         // end events referred to by stall probes (count)
  std::set<cudaEvent_t> retired_held_;      // of which already retired (recycled when released)
  dev::LinkTiming timing_;
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
