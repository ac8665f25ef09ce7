// kernels/cpu/mem_bandwidth.h — host memory bandwidth probe (multi-threaded streaming read and
// memcpy), used by `ds4-offload bench --probe`, the roofline columns of `bench`, and the CPU
// kernel micro-benchmarks as the hardware limit a bandwidth-bound kernel is compared with.
#pragma once

#include <cstdint>

#include "ds4/result.h"

namespace ds4::cpu {

/// Probe settings. The buffer must be much larger than the last-level cache to measure DRAM.
struct MemProbeOptions {
  int64_t bytes = 0;  ///< buffer size; 0 = default_probe_bytes()
  int threads = 0;    ///< 0 = all hardware threads
  int repeats = 5;    ///< timed passes; the best (highest) rate is reported (STREAM convention)
};

/// Probe results (bytes per second, 1 GB/s = 1e9 B/s).
struct MemProbeResult {
  int64_t bytes = 0;         ///< buffer size read (the copy moves bytes/2 from one half to the other)
  int threads = 0;
  double read_bps = 0.0;     ///< streaming read (timed_stream_read): bytes read / s, all threads together
  double copy_bps = 0.0;     ///< memcpy: bytes copied / s (each byte is read once and written once)
  int64_t llc_bytes = 0;     ///< last-level cache size reported by the OS (0 if unknown)
};

/// Default probe size: max(1 GiB, 4 x LLC), capped at 4 GiB.
int64_t default_probe_bytes();

/// Size of the last-level data cache in bytes (sysconf; 0 if unknown).
int64_t llc_bytes();

/// Runs the probe. Error when the buffer cannot be allocated or an option is out of range
/// (bytes < 1 MiB, threads < 0, repeats < 1).
Result<MemProbeResult> probe_memory_bandwidth(const MemProbeOptions& opts);

/// Streaming read of `bytes` at `p` in 4 MiB units claimed by up to `threads` threads (one pass); returns seconds and
/// stores a checksum in *sink so the reads cannot be removed. Reader: two 32-byte loads per line plus a 1 KiB
/// software prefetch when the CPU has AVX2 (mem_read_avx2.cpp), else a word sum in the baseline ISA.
double timed_stream_read(const void* p, int64_t bytes, int threads, uint64_t* sink);

}  // namespace ds4::cpu
