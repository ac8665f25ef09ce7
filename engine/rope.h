// engine/rope.h — rotary position embedding of DeepSeek-V4: interleaved pairs (2i, 2i+1) taken as
// one complex number, on the LAST `rope_dim` dims of a vector, with an optional DeepSeek-YaRN
// frequency ramp. Source: REF inference/model.py precompute_freqs_cis / apply_rotary_emb
// (../shared/reference/dsv4-architecture.md §2 "RoPE tables per layer").
#pragma once

#include <cstdint>
#include <vector>

namespace ds4 {

/// YaRN parameters (`original_len` = 0 disables YaRN).
struct YarnParams {
  double factor = 1;       // rope.scaling.factor
  int64_t original_len = 0;  // rope.scaling.original_context_length
  double beta_fast = 32;   // rope.scaling.yarn_beta_fast
  double beta_slow = 1;    // rope.scaling.yarn_beta_slow
};

/// The YaRN correction range [lo, hi] over the rope_dim/2 frequency indices:
/// lo = floor(d(beta_fast)), hi = ceil(d(beta_slow)), d(r) = dim*ln(L/(2*pi*r)) / (2 ln theta),
/// clamped to [0, dim-1] (REF find_correction_range). For theta 160000, dim 64, L 65536 this is
/// lo = 15, hi = 25.
void yarn_correction_range(int rope_dim, double theta, const YarnParams& y, int* lo, int* hi);

/// Frequencies of one layer's RoPE: rope_dim/2 values, freq_i = theta^(-2i/rope_dim), then with
/// YaRN freq_i = freq_i/factor*(1-smooth_i) + freq_i*smooth_i, smooth_i = 1 - clamp((i-lo)/(hi-lo),0,1).
class RopeTable {
 public:
  RopeTable() = default;
  RopeTable(int rope_dim, double theta, const YarnParams& yarn);
  int rope_dim() const { return rope_dim_; }
  /// The rope_dim/2 frequencies (the table the rope op reads, Device::rope; the rotation itself
  /// is the rope op's CPU reference).
  const std::vector<float>& freqs() const { return freqs_; }

 private:
  int rope_dim_ = 0;
  std::vector<float> freqs_;
};

}  // namespace ds4
