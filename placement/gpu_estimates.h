// placement/gpu_estimates.h — GPU constants that a short copy probe cannot measure: device memory
// bandwidth, the fraction of it a batch-1 quantized matvec reaches, and prefill GEMM throughput.
//
// A probed profile (hw_probe.h) measures each GPU's H2D link and reads its name and VRAM from
// CUDA; these three numbers come from this table keyed by the CUDA device name, or from a
// conservative default for cards not listed. Every profile built with them lists them as
// estimated in its description.
//
// Conventions (the same as the shipped configs/hw profiles): vram_gbps = the vendor's public
// memory bandwidth spec; kernel_efficiency = 0.6; tflops = about 0.7 x the vendor's public FP32
// peak, rounded (configs/hw/4x2080ti-22g-pcie3-2s.json: 10 for the 2080 Ti's 13.4 TFLOPS;
// configs/hw/2x3080-20g-pcie3.json: 20 for the 3080's 29.8).
#pragma once

#include <string>

namespace ds4::placement {

/// Estimated constants for one GPU model.
struct GpuEstimate {
  std::string match;              ///< case-insensitive substring of the CUDA name ("" = the default)
  double vram_gbps = 0;           ///< device memory bandwidth, GB/s (1e9 B/s)
  double kernel_efficiency = 0;   ///< fraction of vram_gbps a batch-1 quantized matvec reaches
  double tflops = 0;              ///< effective quantized GEMM throughput for prefill, TFLOP/s
  std::string source;             ///< where the numbers come from (printed in the description)
};

/// The entry for a CUDA device name (e.g. "NVIDIA GeForce RTX 2080 Ti", "NVIDIA H200"): the first
/// table row whose `match` occurs in `cuda_name` ignoring case (specific names precede general
/// ones: "H100 PCIe" before "H100"), or the conservative default (match == "").
GpuEstimate gpu_estimate_for_name(const std::string& cuda_name);

}  // namespace ds4::placement
