// placement/cpu_rate_probe.h — matrix-vector rates of the engine's CPU matmul per weight type, for
// the all-CPU decode calibration of `plan --probe` (HwProfile::cpu_decode, cost_model.h).
//
// Each rate runs kernels/cpu/ops.h matmul_rows (the body of the CPU device's matmul op) for one
// token over a weight matrix of `cols` columns, rows split over `threads` std::threads in blocks
// of 16 (as the device's pool does), activations quantized to Q8_1 once per run when the mode is
// q8 and the type takes that path (kernels/device.h dev::uses_q8_1), else exact decode + dot_f32.
// hot: one matrix of hot_bytes passed repeatedly (it stays in the last-level cache: the compute
// bound); cold: distinct rows tiled over cold_bytes (>= 4 x the LLC to measure DRAM), one pass per
// repeat. GB/s = weight bytes / wall time / 1e9; best of 2 x `repeats` runs (hot) or `repeats` passes
// (cold). "default" = the slowest type
// measured. Weights: 16 distinct quantized rows of a deterministic pattern (sane scales), tiled.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "ds4/result.h"
#include "placement/hw_profile.h"

namespace ds4::placement {

/// Rate probe settings.
struct CpuRateProbeOptions {
  int threads = 1;                      ///< engine threads (>= 1)
  bool q8 = true;                       ///< activation mode: Q8_1 where the type takes it, else F32
  int64_t cols = 2048;                  ///< row length (a multiple of 256)
  int64_t hot_bytes = int64_t(4) << 20; ///< resident matrix size
  int64_t cold_bytes = int64_t(1) << 30;///< streamed buffer; 0 = skip the cold rates
  int repeats = 3;                      ///< cold passes (one each); hot runs take 2 x repeats
  double min_hot_seconds = 0.03;        ///< hot: passes per run until this much time elapsed
  std::vector<std::string> types = {"F32", "F16", "BF16", "Q8_0", "Q2_K", "IQ2_XXS", "IQ2_XS",
                                    "IQ1_S", "IQ1_M", "MXFP4"};
};

/// Measured rates per ggml type name (GB/s of weight bytes), "default" = slowest.
struct CpuRates {
  std::map<std::string, double> hot_gbps, cold_gbps;
  double seconds = 0;  ///< wall time the probe took
};

/// Runs the probe. Types the CPU kernels cannot quantize are skipped. Errors: options out of
/// range, allocation failure.
Result<CpuRates> probe_cpu_matvec_rates(const CpuRateProbeOptions& o);

/// Measures CpuDecodeProfile::reuse_curve: for buffer sizes from_bytes * 2^(k/2) (k = 0, 1, ...)
/// up to to_bytes (always the last point), the read rate of repeated passes over the first S bytes
/// of one buffer (kernels/cpu/mem_bandwidth.h timed_stream_read, `threads` threads). `sweeps`
/// times over all sizes in ascending order; per size and sweep one warm-up pass, then passes until
/// 3 of them and min_seconds have elapsed; a point keeps its best pass over all sweeps (the
/// convention of the matmul rates above, so that the first point and the hot rates describe the
/// same unloaded cache; a second sweep replaces a size whose passes all fell in a busy moment of
/// a shared machine). Errors: from_bytes < 1 MiB, to_bytes <= from_bytes, threads < 1,
/// sweeps < 1, allocation failure.
Result<std::vector<ReusePoint>> probe_reuse_curve(int threads, int64_t from_bytes, int64_t to_bytes,
                                                  double min_seconds, int sweeps = 2);

}  // namespace ds4::placement
