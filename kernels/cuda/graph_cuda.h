// kernels/cuda/graph_cuda.h — the graph regions of one CUDA device (dev::Device::begin_graph /
// end_graph; issue 20 item 3; kernels/cuda/README.md "Decode as CUDA graphs").
//
// A region is captured from the device's compute stream (cudaStreamBeginCapture in
// cudaStreamCaptureModeRelaxed, as llama.cpp captures: a scratch or workspace buffer that must grow
// inside the region may cudaMalloc) and launched as one graph when it ends. Every region is
// captured anew (kernel arguments passed by value, such as positions and sequence lengths, change
// per token), then the key's executable graph is updated from the new capture
// (cudaGraphExecUpdate: same topology, new parameters); when the update is refused (the topology
// changed) the executable graph is made again (cudaGraphInstantiate).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <map>
#include <mutex>

#include "kernels/device.h"

namespace ds4::cuda {

/// The executable graphs of one device's regions, by key, and their counters. One region open at
/// a time; begin/end come from the thread that drives the device (its rank thread).
class GraphRegions {
 public:
  GraphRegions() = default;
  GraphRegions(const GraphRegions&) = delete;
  GraphRegions& operator=(const GraphRegions&) = delete;
  /// Destroys the executable graphs (after their launches: the device synchronizes first).
  ~GraphRegions();
  /// Starts capturing stream `st` for region `key` (aborts when a region is already open).
  void begin(cudaStream_t st, uint64_t key);
  /// Ends the capture of `st` (the stream begin() named; aborts otherwise, and when the capture
  /// was invalidated by a call that conflicts with it), updates or instantiates the key's
  /// executable graph and launches it on `st`. With `launch` false the captured work is dropped
  /// instead (no update, no launch; counted in GraphStats::discarded): a region holding a
  /// collective of a rank group aborted meanwhile, whose communicator is gone.
  void end(cudaStream_t st, bool launch = true);
  /// True while a region is open.
  bool open() const { return open_; }
  /// The open region's key (meaningful while open()).
  uint64_t key() const { return key_; }
  /// The counters so far.
  dev::GraphStats stats() const;

 private:
  std::map<uint64_t, cudaGraphExec_t> execs_;
  bool open_ = false;
  uint64_t key_ = 0;
  cudaStream_t st_ = nullptr;
  mutable std::mutex mu_;  // stats_ (read by other threads)
  dev::GraphStats stats_;
};

}  // namespace ds4::cuda
