// engine/sequence_state.h — everything one sequence carries between eval calls, per layer, as
// device tensors of a fixed capacity chosen at creation: the raw-KV window ring (`window` rows,
// row = pos % window), the compressed KV rows (capacity / ratio), the indexer keys (ratio-4
// layers, capacity / 4) and the two compressors' running buffers. With this state, decoding token
// p after a prefill of p tokens computes what one prefill of p+1 tokens computes
// (../shared/reference/dsv4-architecture.md §2.2-2.4, §4). save()/restore() move it to and from a
// host blob (for prefix caching and rollback).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "ds4/result.h"
#include "engine/model_config.h"
#include "kernels/device.h"

namespace ds4 {

/// Device tensors of one layer's state (empty where the layer has none).
struct LayerState {
  dev::Tensor window;     // [window, head_dim] ring of normalized, rotated raw KV
  dev::Tensor ckv;        // [capacity/ratio, head_dim] compressed KV (normed, rotated at block start)
  dev::Tensor ikv;        // [capacity/4, idx_head_dim] indexer keys (ratio 4)
  dev::Tensor cmp_cur;    // main compressor: [2, ratio*c*head_dim] (a, g of the block in progress)
  dev::Tensor cmp_prev;   // [2, ratio*head_dim] previous block's channels [0, d) (ratio 4 only)
  dev::Tensor icmp_cur;   // indexer compressor (ratio 4): [2, 4*2*idx_head_dim]
  dev::Tensor icmp_prev;  // [2, 4*idx_head_dim]
};

/// State of one sequence on one device.
class SequenceState {
 public:
  /// Fresh state (position 0) for `c` on `d`, holding up to `capacity` positions (1..c.n_ctx).
  SequenceState(const ModelConfig& c, dev::Device& d, int64_t capacity);
  SequenceState(const SequenceState&) = delete;
  SequenceState& operator=(const SequenceState&) = delete;

  int64_t pos = 0;  // tokens fed so far
  std::vector<LayerState> layers;

  /// Positions this state can hold.
  int64_t capacity() const { return capacity_; }
  /// Back to position 0 (rows are always written before they are read, so nothing is cleared).
  void reset() { pos = 0; }
  /// Device bytes held (all capacity).
  uint64_t bytes() const;
  /// The state up to `pos` as a host blob: a header (magic, version, pos, capacity, layer count)
  /// then per layer the window ring, the compressed rows and keys written so far, and the
  /// compressor buffers. Downloads (a sync point).
  std::vector<uint8_t> save() const;
  /// Restores a blob of save() from a state of the same model (same layer shapes). Errors: a wrong
  /// magic/version, a different layer count or shape, a position beyond this state's capacity, or
  /// a truncated blob (each names what was expected and found).
  Result<void> restore(std::span<const uint8_t> blob);

 private:
  const ModelConfig* c_;
  dev::Device* dev_;
  int64_t capacity_;
  std::unique_ptr<dev::Buffer> buf_;
};

}  // namespace ds4
