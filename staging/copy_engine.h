// staging/copy_engine.h — the copy engine of the device expert cache: stream-ordered copies of
// host bytes into cache slots, each identified by a ticket that can be polled, waited on from the
// host, or waited on by a consumer stream (CUDA: cudaStreamWaitEvent on the compute stream).
//
// Backends: the host engine (memcpy, synchronous; slots are host memory) used without CUDA, and
// the CUDA engine (staging/cuda/copy_engine_cuda.cpp, only in CUDA builds): slot memory is one
// cudaMalloc per layer, copies are cudaMemcpyAsync from pinned host memory on a dedicated
// non-blocking stream, and every submitted copy records one cudaEvent.
// Ordering: copies complete in submission order (one copy stream per engine), so a ticket being
// complete implies every earlier ticket of the same engine is complete.
// Not thread-safe: one thread submits, polls and waits.
#pragma once

#include <cstdint>
#include <memory>

#include "ds4/result.h"
#include "kernels/link_timing.h"

namespace ds4::staging {

/// One submitted copy. id 0 means "nothing in flight" (always complete).
struct CopyTicket {
  uint64_t id = 0;
  bool operator==(const CopyTicket&) const = default;
};

/// Opaque backend handles: cudaStream_t / cudaEvent_t in the CUDA engine, nullptr in the host one.
using StreamHandle = void*;
using EventHandle = void*;

class CopyEngine {
 public:
  virtual ~CopyEngine() = default;
  /// "host-memcpy", "cuda", or a test engine's name.
  virtual const char* name() const = 0;
  /// True when slots live in device memory (not readable by host code; use copy_to_host).
  virtual bool device_slots() const = 0;
  /// Allocates `slots_per_layer` slots of `slot_bytes` for each of `n_layer` layers (CUDA: one
  /// cudaMalloc per layer). Called once. Error when the memory cannot be allocated.
  virtual Result<void> allocate_slots(int n_layer, int slots_per_layer, uint64_t slot_bytes) = 0;
  /// Address of slot `slot` of `layer` (device address for a device engine).
  virtual uint8_t* slot(int layer, int slot) const = 0;
  /// Allocates `bytes` of host staging memory that the engine can copy from asynchronously
  /// (CUDA: cudaHostAlloc, pinned; host: 4096-aligned plain memory), owned by the engine and freed
  /// with it. Error when the allocation fails.
  virtual Result<uint8_t*> alloc_staging(uint64_t bytes) = 0;
  /// Queues a copy of `bytes` from host memory `src` to the start of slot (`layer`, `slot`).
  /// `src` must stay unchanged until the ticket completes; the CUDA engine requires it to be
  /// pinned (route pageable data through a BounceRing) and returns an Error otherwise. Errors:
  /// slot out of range, bytes larger than the slot, a failed backend call (named).
  virtual Result<CopyTicket> submit(int layer, int slot, const void* src, uint64_t bytes) = 0;
  /// True when the copy of `t` has completed (CUDA: cudaEventQuery).
  virtual bool ready(CopyTicket t) = 0;
  /// Blocks the calling thread until `t` has completed (CUDA: cudaEventSynchronize).
  virtual Result<void> wait(CopyTicket t) = 0;
  /// Makes work queued later on `consumer` wait for `t` without blocking the host
  /// (CUDA: cudaStreamWaitEvent). Host engine: same as wait(t).
  virtual Result<void> stream_wait(CopyTicket t, StreamHandle consumer) = 0;
  /// Declares that work queued so far on `consumer` reads slot (`layer`, `slot`): the next copy
  /// into that slot is ordered after it (CUDA: an event recorded on `consumer` that the copy
  /// stream waits for with cudaStreamWaitEvent; no host block). Host engine: nothing to do.
  /// Error when the slot is out of range or a backend call fails.
  virtual Result<void> consumer_done(int layer, int slot, StreamHandle consumer) = 0;
  /// The copy stream (nullptr for the host engine).
  virtual StreamHandle copy_stream() const = 0;
  /// The event recorded after `t`'s copy, or nullptr when `t` has already completed. Valid until
  /// the next call into the engine.
  virtual EventHandle event(CopyTicket t) = 0;
  /// Copies `bytes` at slot address `slot_addr` (from slot()) back to host memory `dst`,
  /// synchronously, after every submitted copy: for tests and diagnosis.
  virtual Result<void> copy_to_host(const uint8_t* slot_addr, void* dst, uint64_t bytes) = 0;
  /// The link's timing so far (kernels/link_timing.h: copy time, compute-stream stall, host
  /// waits), over the copies and waits whose events have completed by this call (it polls them,
  /// never blocks). Default (the host engine): not measured.
  virtual dev::LinkTiming timing() { return {}; }
};

/// The host engine: slots are 4096-aligned host memory, submit() copies with memcpy at once, so
/// every ticket is complete when returned.
std::unique_ptr<CopyEngine> make_host_copy_engine();

/// The CUDA engine on device `device`. Error when the build has no CUDA ("built without CUDA"),
/// there is no such device, or stream creation fails (message names device, file, line, call).
Result<std::unique_ptr<CopyEngine>> make_cuda_copy_engine(int device = 0);

}  // namespace ds4::staging
