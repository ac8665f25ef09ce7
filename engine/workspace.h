// engine/workspace.h — per-Forward scratch device memory: a stack of device buffers from which an
// eval takes its temporary tensors (mark/release around each layer), so that steady-state evals
// allocate nothing (Device::alloc only when a larger shape than ever before arrives).
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "kernels/device.h"

namespace ds4 {

/// Stack allocator of device tensors. Not thread-safe (one per Forward).
class Workspace {
 public:
  explicit Workspace(dev::Device& d) : dev_(d) {}
  /// A position to release back to.
  struct Mark {
    size_t chunk = 0;
    uint64_t used = 0;
  };
  /// Starts an eval: everything is free; chunks of the last eval are merged into one of their
  /// total size (so the next eval of the same shape fits in one chunk).
  void reset();
  Mark mark() const { return {cur_, cur_ < chunks_.size() ? chunks_[cur_].used : 0}; }
  /// Frees every tensor taken after `m`.
  void release(const Mark& m);
  /// A packed F32 tensor [planes, rows, row_len] (contents undefined).
  dev::Tensor f32(int64_t row_len, int64_t rows, int64_t planes = 1) { return take(GgmlType::F32, row_len, rows, planes); }
  /// A packed I32 tensor [rows, row_len].
  dev::Tensor i32(int64_t row_len, int64_t rows) { return take(GgmlType::I32, row_len, rows, 1); }

 private:
  struct Chunk {
    std::unique_ptr<dev::Buffer> buf;
    uint64_t used = 0;
  };
  dev::Tensor take(GgmlType type, int64_t row_len, int64_t rows, int64_t planes);
  dev::Device& dev_;
  std::vector<Chunk> chunks_;
  size_t cur_ = 0;
};

}  // namespace ds4
