// kernels/link_timing.h — timing of one host -> device copy link (a device's staging copies), as
// the CUDA copy engine measures it with events (staging/cuda/copy_engine_cuda.cpp) and
// Device::link_timing reports it; bench prints it per GPU (engine/cli/cmd_bench.cpp).
#pragma once

#include <algorithm>
#include <cstdint>

namespace ds4::dev {

/// Copy-link counters, monotone (take differences around the steps of interest). Seconds.
/// - copy_s: sum over completed copies of the device time between two timing events recorded on
///   the copy stream around each cudaMemcpyAsync (cudaEventElapsedTime): time the link was busy.
/// - stall_s: sum over the compute stream's waits for a copy not yet complete when the wait was
///   enqueued of max(0, copy end - C), C an event recorded on the compute stream just before the
///   cudaStreamWaitEvent (the time the compute stream reached the wait): device time the compute
///   stream sat idle waiting for copies.
/// - host_wait_s: host seconds blocked waiting for copies (CopyEngine::wait, steady clock).
/// Overlap (overlap()) = 1 - min(1, (stall_s + host_wait_s) / copy_s): the fraction of copy time
/// hidden behind compute. Host waits are charged in full although the GPU may still run work
/// queued before them, so this is a lower bound. Under the CUDA emulator (tests/cuda_emu) events
/// carry host time and nothing runs concurrently: its figures check the plumbing, not the overlap.
struct LinkTiming {
  bool measured = false;  ///< false: the backend does not time its copies (CPU: "n/a")
  uint64_t copies = 0;    ///< completed copies timed
  uint64_t bytes = 0;     ///< their bytes
  uint64_t stream_waits = 0;  ///< compute-stream waits on an incomplete copy (each gives stall_s)
  double copy_s = 0, stall_s = 0, host_wait_s = 0;

  LinkTiming& operator+=(const LinkTiming& o) {
    measured = measured || o.measured;
    copies += o.copies;
    bytes += o.bytes;
    stream_waits += o.stream_waits;
    copy_s += o.copy_s;
    stall_s += o.stall_s;
    host_wait_s += o.host_wait_s;
    return *this;
  }
  /// This minus `earlier` (the same link's counters taken before): the activity in between.
  LinkTiming since(const LinkTiming& earlier) const {
    LinkTiming d = *this;
    d.copies -= earlier.copies;
    d.bytes -= earlier.bytes;
    d.stream_waits -= earlier.stream_waits;
    d.copy_s -= earlier.copy_s;
    d.stall_s -= earlier.stall_s;
    d.host_wait_s -= earlier.host_wait_s;
    return d;
  }
  /// True when overlap() is defined: measured and some copy time (> 0) was recorded.
  bool has_overlap() const { return measured && copy_s > 0; }
  /// 1 - min(1, (stall_s + host_wait_s) / copy_s), in [0, 1]; 0 when !has_overlap() (print "n/a").
  double overlap() const {
    if (!has_overlap()) return 0;
    return 1.0 - std::min(1.0, std::max(0.0, stall_s + host_wait_s) / copy_s);
  }
};

}  // namespace ds4::dev
