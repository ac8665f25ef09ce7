// engine/cli/plan_decode_probe.h — the all-CPU decode calibration of `ds4-offload plan --probe`
// (HwProfile::cpu_decode; the terms it calibrates are in placement/cost_model.h).
//
// Per activation mode (q8, f32):
//  1. matmul rates per weight type (placement/cpu_rate_probe.h): hot (a matrix of min(LLC/4,
//     16 MiB), compute bound) and cold (a buffer of max(cold_mib, 4 x LLC), DRAM), in both modes.
//     (f32-mode cold rates used to be derived as min(hot f32, cold q8); on Zen 4 the fused f32
//     kernels read DRAM at about half that (Q8_0 16.6 against 27 GB/s, MXFP4 8.9 against 16.5),
//     so the derived rate predicted the 455 MiB model's f32 decode 1.4-1.5x too fast.)
//  1b. the reuse curve (placement/cpu_rate_probe.h probe_reuse_curve): read rates of repeated
//     passes over buffers from the hot matrix size to the cold buffer's, which decide the share
//     of a model's weight reads the caches serve (placement/cost_model.h cache_hit_share).
//  2. a decode micro-run: two random-weight models written to a temporary folder with make-tiny's
//     writer (engine/tiny_model.h; dim 256, 16 heads x 512, window 128, indexer top-64, Q8_0
//     experts; 6 and 3 layers), each decoded through the Session API at context depths 8 and
//     384 (one prompt, then `reps` chunks of `tokens` decode steps, the fastest chunk counts, as
//     the rates keep their best pass); the eight
//     samples fit token_us, layer_us and attn_gflops (fit_decode_fixed_costs) after the weight
//     reads the rates of step 1 price are subtracted.
// Step 2's fit is one over the samples of both modes (the same three figures go to both): those
// costs are the non-matmul work, which the activation mode does not change.
// About 80-110 s on the 2-core development VM (loaded). The figures describe this machine under
// its present load.
#pragma once

#include <string>

#include "ds4/result.h"
#include "placement/hw_profile.h"

namespace ds4::cli {

/// Micro-run settings.
struct DecodeProbeOptions {
  int threads = 0;              ///< engine threads (0 = all hardware threads)
  std::string dir = "/tmp";     ///< where the temporary models are written (removed after)
  int64_t cold_mib = 1024;      ///< minimum cold-rate buffer
  int tokens = 12;              ///< timed decode steps per run
  int reps = 5;                 ///< timed chunks per sample (fastest kept)
};

/// Runs the calibration; `report` (when not null) gets a human-readable summary: rates, samples
/// (measured vs modeled), the fitted costs. Errors: temporary folder, model write/load, eval.
Result<placement::CpuDecodeProfile> probe_cpu_decode(const DecodeProbeOptions& o, std::string* report);

}  // namespace ds4::cli
