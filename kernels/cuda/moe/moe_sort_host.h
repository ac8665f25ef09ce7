// kernels/cuda/moe/moe_sort_host.h — host mirror of the CUDA MoE dispatch sort (moe_sort) and of
// its MMQ tile list; header-only and CUDA-free so unit tests and CPU code can use it.
//
// Input: ids[p] = expert of pair p = t * k + slot (token t, routing slot), p < n_pairs.
// Output: expert_bounds[e] .. expert_bounds[e+1] delimit expert e's pairs in `sorted`, which holds
// the pair ids in ascending p inside each expert (a stable counting sort, cf. ggml mm_ids_helper,
// quant-formats.md §4.6 / §5.3); tiles = (expert, begin, end) with end - begin <= tile_cols, in
// ascending expert then begin; pairs with an id outside [0, n_experts) are counted in n_invalid
// and left out.
#pragma once

#include <cstdint>
#include <vector>

namespace ds4::cuda {

/// Result of moe_sort_host.
struct MoeSortHost {
  std::vector<int32_t> expert_bounds;  ///< [n_experts + 1]
  std::vector<int32_t> sorted;         ///< [n_pairs - n_invalid]
  std::vector<int32_t> tiles;          ///< [n_tiles * 3]
  int32_t n_invalid = 0;
};

/// The counting sort described above (same algorithm, step for step, as the device kernel).
inline MoeSortHost moe_sort_host(const int32_t* ids, int64_t n_pairs, int n_experts, int tile_cols) {
  MoeSortHost r;
  r.expert_bounds.assign(size_t(n_experts) + 1, 0);
  for (int64_t p = 0; p < n_pairs; ++p) {
    if (ids[p] >= 0 && ids[p] < n_experts) ++r.expert_bounds[size_t(ids[p]) + 1];
    else ++r.n_invalid;
  }
  for (int e = 0; e < n_experts; ++e) r.expert_bounds[size_t(e) + 1] += r.expert_bounds[size_t(e)];
  r.sorted.assign(size_t(r.expert_bounds[size_t(n_experts)]), 0);
  std::vector<int32_t> fill(r.expert_bounds.begin(), r.expert_bounds.end() - 1);
  for (int64_t p = 0; p < n_pairs; ++p)
    if (ids[p] >= 0 && ids[p] < n_experts) r.sorted[size_t(fill[size_t(ids[p])]++)] = int32_t(p);
  for (int e = 0; e < n_experts; ++e)
    for (int32_t c = r.expert_bounds[size_t(e)]; c < r.expert_bounds[size_t(e) + 1]; c += tile_cols) {
      const int32_t end = c + tile_cols < r.expert_bounds[size_t(e) + 1] ? c + tile_cols : r.expert_bounds[size_t(e) + 1];
      r.tiles.insert(r.tiles.end(), {e, c, end});
    }
  return r;
}

}  // namespace ds4::cuda
