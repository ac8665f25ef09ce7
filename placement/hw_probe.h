// placement/hw_probe.h — `ds4-offload plan --probe`: short measurements that turn the discovered
// machine (topology.h) into a hardware profile with measured instead of estimated rates.
//
// Measured: per NUMA node, streaming read and memcpy bandwidth with threads bound to the node's
// cores and the buffer bound to its memory (hwloc; where binding is refused the run is unbound and
// says so); NVMe read bandwidth of a temporary file read through staging::NvmeReader (O_DIRECT,
// io_uring or the pread pool, the same path expert staging uses); GPU H2D per GPU from each node,
// pinned and pageable, and all GPUs at once (gpu_link_probe.h; CUDA build with a device, else the
// GPU list is empty and the result says why; GPUs seen by hwloc that cannot be probed are an
// error, as in discover_hw_profile()). CPU expert rate per ggml type: batch-1 matvec_q8_1 (kernels/cpu/quant_ref.h,
// the engine's CPU expert path) over expert-shaped matrices (4096 columns) filling the node buffer,
// one bound thread per core, GB/s of weight bytes; "default" = the slowest type measured.
// Still estimated (listed in the profile description): prefill GFLOP/s, latencies, all-reduce,
// GPU memory bandwidth / kernel efficiency / TFLOP/s (gpu_estimates.h).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "ds4/result.h"
#include "placement/gpu_link_probe.h"
#include "placement/hw_profile.h"

namespace ds4::placement {

/// Probe settings. Defaults keep the whole probe to a few seconds.
struct HwProbeOptions {
  int64_t mem_bytes = int64_t(256) << 20;   ///< buffer per NUMA node (>= 16 MiB)
  int threads = 0;                          ///< threads per node; 0 = the node's cores
  int repeats = 3;                          ///< timed passes, best kept (STREAM convention)
  int64_t nvme_bytes = int64_t(256) << 20;  ///< temporary file size (>= 8 MiB); 0 = skip NVMe
  std::string nvme_dir = ".";               ///< where the temporary file is written (then deleted)
  /// Called with the temporary file's path right after it is created (created = true) and right
  /// before the probe unlinks it (created = false); the CLI registers the path for removal on
  /// SIGINT/SIGTERM (engine/cli/temp_cleanup.h). Empty = not called.
  std::function<void(const std::string& path, bool created)> on_temp_file;
  int64_t h2d_bytes = int64_t(256) << 20;   ///< bytes per timed H2D copy; 0 = skip GPUs
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
  GpuLinkProbe gpu;         ///< the H2D figures, or why no GPU was probed
  HwProfile profile;        ///< validated; description lists what is measured and what is estimated
};

/// Runs the probe. Errors: hwloc discovery fails, GPUs present that cannot be probed (CPU-only
/// build or no CUDA device; not when h2d_bytes == 0), an H2D probe failure, options out of range, the temporary file cannot be written/read (message names the path).
Result<HwProbeResult> probe_hw_profile(const HwProbeOptions& opts);

/// Human-readable summary of a probe: one line per node, the NVMe line, then one line per GPU x
/// source node (pinned/pageable GB/s), the all-GPUs line and notes, or "gpu: none probed: <why>".
std::string format_probe(const HwProbeResult& r);

}  // namespace ds4::placement
