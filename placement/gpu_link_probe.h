// placement/gpu_link_probe.h — runs the CUDA H2D probe (staging/h2d_probe.h) for a hardware
// profile: sources bound to every NUMA node when there are several (unbound memory on one node),
// then gpu_link_profile.h turns the figures into GpuProfiles. Used by discover_hw_profile() and
// `plan --probe` (hw_probe.h).
#pragma once

#include <cstdint>
#include <string>

#include "ds4/result.h"
#include "placement/gpu_link_profile.h"
#include "placement/topology.h"
#include "staging/h2d_probe.h"

namespace ds4::placement {

/// What the GPU probe did.
struct GpuLinkProbe {
  bool probed = false;
  std::string why_not;              ///< when !probed: "this build has no CUDA backend",
                                    ///< "CUDA build, no device visible (...)", or "skipped (...)"
  uint64_t bytes = 0;               ///< bytes per timed copy
  int reps = 0;                     ///< timed copies per figure
  int hwloc_gpus = 0;               ///< NVIDIA/AMD GPUs hwloc saw on the PCI bus
  staging::H2dProbeResult raw;      ///< the measured figures (when probed)
  GpuLinkProfile profile;           ///< built from raw (when probed)
};

/// Measures every CUDA device with `bytes` per copy and `reps` timed copies per figure; bytes == 0
/// skips GPUs (probed = false, even when hwloc sees some). Errors: hwloc sees GPUs but this build or
/// machine cannot probe them (the message says why and suggests --hw), probe or profile errors.
Result<GpuLinkProbe> probe_gpu_links(const Topology& topo, uint64_t bytes, int reps);

/// One paragraph for a profile's description: what was measured, every estimated GPU field, notes.
std::string describe_gpu_links(const GpuLinkProbe& g);

}  // namespace ds4::placement
