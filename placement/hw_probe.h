// placement/hw_probe.h — `ds4-offload plan --probe`: short measurements that turn the discovered
// machine (topology.h) into a hardware profile with measured instead of estimated rates.
//
// Measured: per NUMA node, streaming read and memcpy bandwidth with threads bound to the node's
// cores and the buffer bound to its memory (hwloc; where binding is refused the run is unbound and
// says so); NVMe read bandwidth of a temporary file read through staging::NvmeReader (O_DIRECT,
// io_uring or the pread pool, the same path expert staging uses). GPU H2D (pinned/pageable) needs
// the CUDA backend: a CPU-only build lists no GPU and a machine with GPUs is an error, as in
// discover_hw_profile(). CPU expert rate per ggml type: batch-1 matvec_q8_1 (kernels/cpu/quant_ref.h,
// the engine's CPU expert path) over expert-shaped matrices (4096 columns) filling the node buffer,
// one bound thread per core, GB/s of weight bytes; "default" = the slowest type measured.
// Still estimated (listed in the profile description): prefill GFLOP/s, latencies, all-reduce.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "ds4/result.h"
#include "placement/hw_profile.h"

namespace ds4::placement {

/// Probe settings. Defaults keep the whole probe to a few seconds.
struct HwProbeOptions {
  int64_t mem_bytes = int64_t(256) << 20;   ///< buffer per NUMA node (>= 16 MiB)
  int threads = 0;                          ///< threads per node; 0 = the node's cores
  int repeats = 3;                          ///< timed passes, best kept (STREAM convention)
  int64_t nvme_bytes = int64_t(256) << 20;  ///< temporary file size (>= 8 MiB); 0 = skip NVMe
  std::string nvme_dir = ".";               ///< where the temporary file is written (then deleted)
  /// ggml types whose CPU expert matvec rate is measured (those the CPU kernels cannot quantize or
  /// dot with Q8_1 are skipped); empty = none (CPU expert rate estimated as 50% of read).
  std::vector<std::string> expert_types = {"IQ2_XXS", "Q2_K", "IQ1_M", "MXFP4", "Q4_K", "Q8_0"};
};

/// One node's measurement (GB/s = 1e9 B/s).
struct NodeProbe {
  int node = 0;
  int threads = 0;
  bool bound = false;       ///< threads and memory were bound to the node
  double read_gbps = 0;
  double copy_gbps = 0;     ///< bytes copied per second (each read once and written once)
  std::map<std::string, double> expert_gbps;  ///< measured matvec rate per ggml type name
};

/// The NVMe (file read) measurement.
struct NvmeProbe {
  bool ran = false;
  std::string dir;
  std::string backend;      ///< staging::reader_backend_name()
  std::string reason;       ///< why the reader chose it
  bool direct = false;      ///< the file was read with O_DIRECT
  int64_t bytes = 0;
  double read_gbps = 0;
};

/// Everything measured, plus the profile built from it.
struct HwProbeResult {
  std::vector<NodeProbe> nodes;
  NvmeProbe nvme;
  std::string gpu_note;     ///< why the GPU list is what it is
  HwProfile profile;        ///< validated; description lists what is measured and what is estimated
};

/// Runs the probe. Errors: hwloc discovery fails, GPUs present without the CUDA backend, options
/// out of range, the temporary file cannot be written/read (message names the path).
Result<HwProbeResult> probe_hw_profile(const HwProbeOptions& opts);

/// Human-readable summary of a probe (several lines).
std::string format_probe(const HwProbeResult& r);

}  // namespace ds4::placement
