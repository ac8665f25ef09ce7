// engine/compressor.h — the KV compressor of DeepSeek-V4's compressed attention layers: every
// `ratio` tokens it pools the per-token projections a_t = wkv x_t, g_t = wgate x_t + ape[t % ratio]
// into one vector by a per-channel softmax over the tokens' gate scores.
// ratio 4 ("overlap", c = 2): the 2*ratio candidates are the previous block's tokens on channels
// [0, d) and the current block's tokens on channels [d, 2d) (absent previous block = score -inf).
// ratio 128 (c = 1): the block's own tokens on channels [0, d).
// Block b covers positions b*ratio .. b*ratio+ratio-1 and is emitted when its last token arrives;
// a query at position p sees blocks j < (p+1)/ratio (complete ones only).
// Source: REF inference/model.py Compressor.forward (both prefill and decode branches compute the
// same pooled values) and ../shared/reference/dsv4-architecture.md §2.3. RMSNorm, RoPE at the
// block start position and QDQ are applied by the caller.
#pragma once

#include <cstdint>
#include <vector>

namespace ds4 {

/// Number of compressed blocks visible to a query at position `pos` (0-based).
inline int64_t compressed_visible(int64_t pos, int ratio) { return (pos + 1) / ratio; }

/// The running state of one compressor (part of a sequence's state).
class CompressorState {
 public:
  CompressorState() = default;
  /// `ratio` > 0; `d` = output dim; overlap iff ratio == 4 (as REF: `overlap = ratio == 4`).
  CompressorState(int ratio, int64_t d);
  int ratio() const { return ratio_; }
  int64_t dim() const { return d_; }
  /// Width of a_t and g_t: c*d, c = 2 with overlap else 1.
  int64_t width() const { return overlap_ ? 2 * d_ : d_; }
  bool overlap() const { return overlap_; }

  /// Feeds token `pos` (must equal the number of tokens fed so far) with projections a[width()]
  /// and raw gate g[width()]; `ape` is the [ratio, width()] position bias (row pos % ratio is
  /// added to g). Returns true and writes the pooled block into out[d] when `pos` completes a block.
  bool push(int64_t pos, const float* a, const float* g, const float* ape, float* out);
  /// Tokens fed so far.
  int64_t fed() const { return fed_; }
  /// Bytes of state.
  uint64_t bytes() const { return (cur_a_.size() + cur_g_.size() + prev_a_.size() + prev_g_.size()) * 4; }
  void reset();

 private:
  int ratio_ = 0;
  int64_t d_ = 0;
  bool overlap_ = false;
  bool has_prev_ = false;
  int64_t fed_ = 0;
  std::vector<float> cur_a_, cur_g_;    // [ratio, width] tokens of the block in progress
  std::vector<float> prev_a_, prev_g_;  // [ratio, d] channels [0, d) of the previous block (overlap)
};

}  // namespace ds4
