// placement/hw_probe.h — `ds4-offload plan --probe`: short measurements that turn the discovered
// machine (topology.h) into a hardware profile with measured instead of estimated rates.
//
// Measured: per NUMA node, streaming read and memcpy bandwidth with threads bound to the node's
// cores and the buffer bound to its memory (hwloc; where binding is refused the run is unbound and
// says so); NVMe read bandwidth of a temporary file read through staging::NvmeReader (O_DIRECT,
// io_uring or the pread pool, the same path expert staging uses). GPU H2D (pinned/pageable) needs
// the CUDA backend: a CPU-only build lists no GPU and a machine with GPUs is an error, as in
// discover_hw_profile(). Still estimated (listed in the profile description): CPU expert rate (50%
// of the node's read bandwidth), prefill GFLOP/s, latencies, all-reduce figures.
#pragma once

#include <cstdint>
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
};

/// One node's measurement (GB/s = 1e9 B/s).
struct NodeProbe {
  int node = 0;
  int threads = 0;
  bool bound = false;       ///< threads and memory were bound to the node
  double read_gbps = 0;
  double copy_gbps = 0;     ///< bytes copied per second (each read once and written once)
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
