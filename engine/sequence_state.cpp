// engine/sequence_state.cpp — see sequence_state.h.
#include "engine/sequence_state.h"

namespace ds4 {

SequenceState::SequenceState(const ModelConfig& c) { reset(c); }

void SequenceState::reset(const ModelConfig& c) {
  pos = 0;
  layers.assign(c.n_layer, LayerState{});
  for (int l = 0; l < c.n_layer; ++l) {
    LayerState& s = layers[l];
    s.window.assign(static_cast<size_t>(c.window * c.head_dim), 0.0f);
    if (c.ratio(l) > 0) s.cmp = CompressorState(c.ratio(l), c.head_dim);
    if (c.ratio(l) == 4) s.icmp = CompressorState(4, c.idx_head_dim);
  }
}

uint64_t SequenceState::bytes() const {
  uint64_t b = 0;
  for (const auto& s : layers)
    b += (s.window.size() + s.ckv.size() + s.ikv.size()) * sizeof(float) + s.cmp.bytes() + s.icmp.bytes();
  return b;
}

}  // namespace ds4
