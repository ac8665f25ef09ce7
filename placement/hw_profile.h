// placement/hw_profile.h — a machine's capacities and measured/estimated bandwidths.
//
// A profile is what the planner and the cost model know about a machine: NUMA nodes (memory,
// cores, memory bandwidth, CPU expert throughput), GPUs (VRAM, host-to-device link bandwidth,
// VRAM bandwidth, NUMA locality), NVMe devices, link/collective latencies and runtime overheads.
// It comes from a JSON file (configs/hw/*.json, format in configs/hw/README.md) or from topology
// discovery (topology.h). Units: bytes for capacities, GB/s = 1e9 bytes/s, microseconds.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "ds4/result.h"

namespace ds4::placement {

/// One NUMA node (socket): its memory and the throughput of CPU expert compute on its cores.
struct NumaNodeProfile {
  int id = 0;
  int64_t memory_bytes = 0;   ///< installed memory on the node
  int cores = 0;
  double mem_read_gbps = 0;   ///< node-local streaming read bandwidth, all cores
  /// Batch-1 expert matvec throughput on all cores of the node, in GB/s of weight bytes read,
  /// per ggml type name ("IQ2_XXS"); "default" is used for types not listed.
  std::map<std::string, double> cpu_expert_gbps;
  double cpu_gflops = 0;      ///< batched (prefill) expert GEMM throughput of the node, GFLOP/s

  /// GB/s for type `type_name`, or the "default" entry.
  double cpu_gbps_for(const std::string& type_name) const;
};

/// One GPU as a TP rank.
struct GpuProfile {
  std::string name;
  int numa_node = 0;          ///< node whose PCIe root the GPU hangs off
  int64_t vram_bytes = 0;
  double h2d_gbps = 0;        ///< pinned host-to-device bandwidth from its local node, alone
  double vram_gbps = 0;       ///< device memory bandwidth
  double kernel_efficiency = 0;  ///< fraction of vram_gbps a batch-1 quantized matvec reaches
  double tflops = 0;          ///< effective quantized GEMM throughput for prefill (TFLOP/s)
  std::string pci_bus_id;     ///< optional, e.g. "0000:3b:00.0" (matched to CUDA when present)
};

/// One NVMe device holding the model file.
struct NvmeProfile {
  std::string name;
  int numa_node = 0;
  double read_gbps = 0;       ///< large-block direct read bandwidth (io_uring, deep queue)
};

/// Decode-step calibration of the all-CPU path for one activation mode (`plan --probe`,
/// hw_probe.h and engine/cli/plan_decode_probe.h measure every field).
struct CpuDecodeMode {
  /// Matrix-vector rate through the engine's matmul kernel (kernels/cpu/ops.h matmul_rows), one
  /// token, all `threads`, in GB/s of weight bytes, per ggml type name ("F16", "Q8_0"; "default"
  /// for types not listed): `hot` = a matrix resident in the last-level cache (compute bound),
  /// `cold` = matrices streamed from DRAM.
  std::map<std::string, double> hot_gbps, cold_gbps;
  double token_us = 0;     ///< fixed cost per decode step (embedding, head-side ops, sampling, calls)
  double layer_us = 0;     ///< fixed cost per layer per decode step (op dispatches, norms, mHC, RoPE)
  double attn_gflops = 0;  ///< decode attention + indexer FLOP rate (cost_model.h counts the FLOPs)

  /// Hot / cold GB/s for `type_name` (its entry or "default"; 0 when neither is present).
  double hot_for(const std::string& type_name) const;
  double cold_for(const std::string& type_name) const;
};

/// One point of the measured cache reuse curve: the read rate of repeated passes over a buffer of
/// `bytes` (all engine threads; kernels/cpu/mem_bandwidth.h timed_stream_read), in GB/s (1e9 B/s).
struct ReusePoint {
  double bytes = 0;
  double gbps = 0;
};

/// The all-CPU decode calibration: optional (profiles written before it have none, and the cost
/// model then uses the node rates alone, as before).
struct CpuDecodeProfile {
  int threads = 0;          ///< engine threads the figures were measured with
  int64_t llc_bytes = 0;    ///< last-level cache the OS reports (bytes; only used without reuse_curve)
  /// Ascending buffer sizes, the first = the hot matrices' size, the last = the cold buffer's
  /// (cost_model.h cache_hit_share). Empty in profiles written before it: llc_bytes decides.
  std::vector<ReusePoint> reuse_curve;
  std::map<std::string, CpuDecodeMode> modes;  ///< by activation mode name: "q8", "f32"
  bool empty() const { return modes.empty(); }
};

/// A machine profile. Validated: node ids unique, every numa_node reference exists, positive
/// bandwidths and capacities.
struct HwProfile {
  std::string name;
  std::string description;
  std::vector<NumaNodeProfile> nodes;
  std::vector<GpuProfile> gpus;
  std::vector<NvmeProfile> nvme;
  double h2d_aggregate_gbps = 0;  ///< all GPUs copying at once (root complex / memory limit)
  double inter_socket_gbps = 0;   ///< cap on a copy whose source is on another node
  double pageable_h2d_gbps = 0;   ///< cap on a copy from pageable (not page-locked) memory
  double copy_latency_us = 0;     ///< fixed cost of one host-to-device copy (launch + DMA setup)
  double allreduce_latency_us = 0;///< one small TP all-reduce (decode, 16 KiB)
  double allreduce_gbps = 0;      ///< large all-reduce bus bandwidth (prefill)
  int64_t memlock_bytes = -1;     ///< RLIMIT_MEMLOCK; -1 = unlimited
  int64_t host_reserved_bytes = 0;///< host memory kept free for the OS and the process, total
  int64_t vram_reserved_bytes = 0;///< per GPU: CUDA context, NCCL buffers, fragmentation
  double layer_overhead_us = 0;   ///< per layer per decode step: launches and syncs
  double cpu_expert_latency_us = 0;  ///< fixed cost of one CPU expert call (fork-join)
  CpuDecodeProfile cpu_decode;       ///< optional key "cpu_decode" (see CpuDecodeProfile)

  /// Index of node `id` in `nodes`, or -1.
  int node_index(int id) const;
};

/// Checks the invariants listed on HwProfile; the error names `source` and the field.
Result<void> validate_hw_profile(const HwProfile& p, const std::string& source);

/// Parses a profile from JSON text; `source` names it in errors. Unknown keys are errors (a typo
/// must not silently fall back to a default); every key is required except "description",
/// "nvme", "pci_bus_id", "cpu_decode". "cpu_decode" is
///   {"threads": 2, "llc_mib": 32, "modes": {"q8": {"token_us": 120, "layer_us": 300,
///    "attn_gflops": 4, "hot_gbps": {"default": 20, "Q8_0": 30}, "cold_gbps": {"default": 8}}, "f32": {...}},
///    "reuse_curve": [[16, 40.5], [32, 38.0], ..., [1040, 9.8]]}
/// with every key of a mode required, "default" required in both rate maps, rates > 0, the
/// microseconds >= 0; "reuse_curve" (optional) is [MiB, GB/s] pairs, sizes strictly ascending,
/// rates > 0, at least 2 points.
Result<HwProfile> parse_hw_profile(const std::string& json_text, const std::string& source);

/// Reads and parses the profile file at `path`.
Result<HwProfile> load_hw_profile(const std::string& path);

/// Serializes a profile to the same JSON format (for `plan --probe`/discovery output).
std::string hw_profile_to_json(const HwProfile& p);

}  // namespace ds4::placement
