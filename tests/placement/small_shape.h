// tests/placement/small_shape.h — a small DeepSeek-V4-shaped ModelShape for planner tests: fixed
// attention sizes (dim 256, 4 heads of 64, ranks 64, window 16, indexer 2 x 32, mHC 4), no
// compression, one shared expert; callers override what they vary.
#pragma once

#include <string>

#include "placement/model_shape.h"

namespace ds4::placement {

/// `n_layers` layers of `n_experts` routed experts (top `top_k`, FFN width 256).
inline ModelShape small_test_shape(const std::string& name, int n_layers, int n_experts, int top_k) {
  ModelShape s;
  s.name = name;
  s.n_layers = n_layers;
  s.dim = 256;
  s.vocab = 256;
  s.n_heads = 4;
  s.head_dim = 64;
  s.q_lora_rank = 64;
  s.o_groups = 2;
  s.o_lora_rank = 64;
  s.window = 16;
  s.compress_ratios.assign(size_t(n_layers), 0);
  s.index_n_heads = 2;
  s.index_head_dim = 32;
  s.n_experts = n_experts;
  s.top_k = top_k;
  s.n_shared_experts = 1;
  s.moe_inter = 256;
  s.hc_mult = 4;
  return s;
}

}  // namespace ds4::placement
