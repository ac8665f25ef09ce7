// engine/load_progress.h — bytes done by a model load that takes seconds, for progress lines.
// Only the official-checkpoint view counts today (its one-time FP8/FP4/NVFP4 repack reads every
// weight byte); a GGUF load maps the file and checks its directory without reading the weights.
#pragma once

#include <atomic>
#include <cstdint>

namespace ds4 {

/// Process-wide counters of the load in progress: `total` bytes of tensors to bind (0 = not
/// counted), `done` bytes bound so far (repacked or aliased). Written by the loader's threads,
/// read by a progress ticker; reset by each load.
struct LoadProgress {
  std::atomic<uint64_t> done{0}, total{0};
};

/// The process's LoadProgress.
inline LoadProgress& load_progress() {
  static LoadProgress p;
  return p;
}

}  // namespace ds4
