// engine/sequence_state.h — everything one sequence carries between eval calls, per layer:
// the raw-KV window ring (`window` slots, slot = pos % window), the compressed KV entries, the
// indexer keys (ratio-4 layers) and the two compressors' running buffers. With this state,
// decoding token p after a prefill of p tokens computes what one prefill of p+1 tokens computes
// (../shared/reference/dsv4-architecture.md §2.2-2.4, §4).
#pragma once

#include <cstdint>
#include <vector>

#include "engine/compressor.h"
#include "engine/model_config.h"

namespace ds4 {

/// State of one layer.
struct LayerState {
  std::vector<float> window;   // [window, head_dim] ring of normalized, rotated raw KV
  std::vector<float> ckv;      // [n_blocks, head_dim] compressed KV (normed, rotated at block start)
  std::vector<float> ikv;      // [n_blocks, idx_head_dim] indexer keys (ratio 4)
  CompressorState cmp;         // main compressor (ratio > 0)
  CompressorState icmp;        // indexer compressor (ratio 4)
};

/// State of one sequence.
struct SequenceState {
  int64_t pos = 0;                 // tokens fed so far
  std::vector<LayerState> layers;

  /// Fresh state (position 0) for a model with config `c`.
  explicit SequenceState(const ModelConfig& c);
  SequenceState() = default;
  void reset(const ModelConfig& c);
  /// Bytes held (window rings, compressed caches, compressor buffers).
  uint64_t bytes() const;
};

}  // namespace ds4
