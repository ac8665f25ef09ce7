// kernels/cuda/mmq/lane_tree.h — streaming evaluation of the dot contract's 32-lane butterfly
// (kernels/quant/dot_q8_1.h step 2) with a 5-entry stack; DS4_HD so the host unit test checks it.
//
// The butterfly (off = 16, 8, 4, 2, 1; lane[l] = lane[l] + lane[l+off]) is a complete binary tree
// whose leaves, left to right, are lanes bitrev5(0), bitrev5(1), ..., bitrev5(31) = 0, 16, 8, 24,
// 4, ... Feeding the finished lane values in that order, leaf t is added (as the right operand)
// to the stack entries of its trailing one bits, lowest first, and the result is pushed at the
// first zero bit: the same additions with the same operands as the butterfly.
#pragma once

#include <cstdint>

#include "kernels/quant/scalar_formats.h"

namespace ds4::cuda {

/// Lane of the contract whose value is the t-th leaf (t < 32): the 5-bit reversal of t.
DS4_HD inline int lane_of_leaf(int t) {
  return ((t & 1) << 4) | ((t & 2) << 2) | (t & 4) | ((t & 8) >> 2) | ((t & 16) >> 4);
}

/// Folds leaf t's finished lane value x into `stack` (5 floats); returns the combined value,
/// which is the row result when t == 31.
DS4_HD inline float lane_tree_fold(float* stack, float x, int t) {
  int tz = 0;
  while (tz < 5 && ((t >> tz) & 1)) ++tz;
#ifdef __CUDA_ARCH__
#pragma unroll
#endif
  for (int s = 0; s < 5; ++s)
    if (s < tz) x = stack[s] + x;
#ifdef __CUDA_ARCH__
#pragma unroll
#endif
  for (int s = 0; s < 5; ++s)
    if (s == tz) stack[s] = x;
  return x;
}


/// Position in the MMQ K walk: leaf t (0..31; 32 = finished) and the next chunk b of lane
/// lane_of_leaf(t). The walk visits, for t = 0..31, the chunks b = lane, lane+32, ... < nchunks
/// ("chunk" events), then a "leaf done" event (also for a lane without chunks).
struct LaneWalk {
  int t = 0;
  int64_t b = 0;
};

/// Kinds of walk events.
enum class WalkEvent { Chunk, LeafDone, End };

/// The event at the walk's current position.
DS4_HD inline WalkEvent lane_walk_event(const LaneWalk& w, int64_t nchunks) {
  if (w.t >= 32) return WalkEvent::End;
  return w.b < nchunks ? WalkEvent::Chunk : WalkEvent::LeafDone;
}

/// Moves past the current event.
DS4_HD inline void lane_walk_advance(LaneWalk& w, int64_t nchunks) {
  if (w.b < nchunks) {
    w.b += 32;
  } else {
    ++w.t;
    w.b = w.t < 32 ? lane_of_leaf(w.t) : 0;
  }
}

/// Writes the chunks of the next (up to) `ks` chunk events from `w` to gb; returns their count.
DS4_HD inline int lane_walk_peek(LaneWalk w, int64_t nchunks, int64_t* gb, int ks) {
  int n = 0;
  while (n < ks) {
    const WalkEvent e = lane_walk_event(w, nchunks);
    if (e == WalkEvent::End) break;
    if (e == WalkEvent::Chunk) gb[n++] = w.b;
    lane_walk_advance(w, nchunks);
  }
  return n;
}

}  // namespace ds4::cuda
