// engine/load_progress.h — bytes done by a model load that takes seconds, for progress lines.
// A load runs up to three phases, each counting its own bytes of its own total:
//  - Repack: an official checkpoint folder's one-time FP8/FP4/NVFP4 repack (engine/official_checkpoint.cpp),
//    every weight byte of the safetensors shards (companion scales included);
//  - Bind: binding the model's tensors to the weights (engine/model_weights.cpp): total = the bytes of
//    every tensor in the file's directory (sum of the tensor infos' nbytes), done = the bytes of the
//    tensors bound so far (checked against the directory, F16 ones decoded, tid2eid ids range-checked);
//  - Upload: the copy of the stable weights to a device with its own memory (engine/session.cpp).
#pragma once

#include <atomic>
#include <cstdint>

namespace ds4 {

/// The phase a LoadProgress counts (see the file comment).
enum class LoadPhase : int { None = 0, Repack = 1, Bind = 2, Upload = 3 };

/// Process-wide counters of the load in progress: `phase`, `total` bytes of that phase (0 = not
/// counted), `done` bytes of it so far. Written by the loader's threads, read by a progress ticker;
/// each phase resets them with start_phase().
struct LoadProgress {
  std::atomic<int> phase{0};
  std::atomic<uint64_t> done{0}, total{0};

  /// Starts counting `p` with `total_bytes` to do (done = 0).
  void start_phase(LoadPhase p, uint64_t total_bytes) {
    done = 0;
    total = total_bytes;
    phase = static_cast<int>(p);
  }
};

/// The process's LoadProgress.
inline LoadProgress& load_progress() {
  static LoadProgress p;
  return p;
}

}  // namespace ds4
