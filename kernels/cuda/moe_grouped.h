// kernels/cuda/moe_grouped.h — the grouped routed-expert path of the CUDA backend's moe_experts
// (device_cuda.cpp; kernels/device.h Device::moe_experts; issue 20 item 3, second half): one
// moe_sort, one grouped gate MMQ and one grouped up MMQ over all the call's experts, one SwiGLU
// (times the routing weight) over all pairs, one grouped down MMQ that writes each pair's output
// straight into its (token, slot) row of `slots`. The per-expert path it replaces queues gather,
// quantize, gate, up, SwiGLU, quantize, down, scatter per expert (MMVQ up to 8 pairs, MMQ above).
//
// Bits: every output row is cpu::vec_dot_q8_1 per (row, pair) whichever kernel computes it (MMVQ,
// MMQ, grouped MMQ: quant_matmul.h's contract); quantize_q8_1 is per row, so quantizing the whole
// batch once gives each token's blocks as the per-expert gather + quantize does; the SwiGLU kernel
// is the same one (same IEEE operations per element, routing weight rw[p] = weights[t, k]). The
// expert outputs are added later by Device::moe_combine (ascending expert id, FP32 from +0,
// kernels/NUMERICS.md), unchanged. So the slots' bits equal the per-expert path's and the CPU's.
// Internal to the backend.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <span>
#include <vector>

#include "kernels/cuda/cuda_stream.h"
#include "kernels/quant/ggml_type.h"

namespace ds4::cuda::detail {

/// Fewest (token, expert) pairs of this call's experts for which moe_experts takes the grouped
/// path (and at least 2 tokens: decode keeps the per-expert path). 16 = one MMQ tile's column
/// count (kMmqTileCols): below it the whole call fits one tile per expert anyway, so the grouped
/// launches would save at most the per-expert launches of a handful of single-pair experts, where
/// MMVQ (one warp per row, no shared-memory staging) is the cheaper kernel. Above it the grouped
/// path queues 7 kernels (sort, quantize, gate, up, SwiGLU, quantize, down) and 2 copies instead
/// of 8 kernels per used expert, and reads each expert's weights once either way. Chosen from the launch
/// counts, not measured on a GPU (none was available).
inline constexpr int64_t kGroupedMoeMinPairs = 16;

/// One weight matrix of an expert as the grouped kernels read it: device pointer, ggml type,
/// cols (ne0) x rows (ne1), row stride in bytes.
struct GroupedMatrix {
  const void* data = nullptr;
  GgmlType type = GgmlType::F32;
  int64_t cols = 0, rows = 0;
  uint64_t nb1 = 0;
};

/// One routed expert of the call: its id and device matrices (gate/up [dim, ff], down [ff, dim]).
struct GroupedExpert {
  int32_t id = 0;
  GroupedMatrix gate, up, down;
};

/// Null when the grouped kernels can compute this call, else why not (a fixed string): Q8_1
/// activations, every matrix of one kind of the same Q8_1-dot type and shape (gate/up [dim, ff],
/// down [ff, dim]) with packed rows of whole blocks, dim and ff multiples of 32 (Q8_1 blocks),
/// the tile count within the grid limit. The caller falls back to the per-expert path.
const char* grouped_moe_refusal(std::span<const GroupedExpert> experts, int64_t dim, int64_t n_pairs, bool q8_act);

/// Remaps host routing ids [n_pairs] to the index of their expert in `experts` (ascending ids),
/// -1 for experts not in the call; returns the count of mapped pairs and fills `pairs_of[i]`
/// with expert i's pair count.
int64_t grouped_moe_remap(std::span<const int32_t> ids, std::span<const GroupedExpert> experts,
                          std::vector<int32_t>& local, std::vector<int64_t>& pairs_of);

/// Inputs of one grouped launch. x [n, dim] F32 (row stride x_nb1), weights [n, K] F32 packed,
/// local [n*K] from grouped_moe_remap, slots [n*K, dim] F32 packed (rows of pairs not mapped are
/// left as they are).
struct GroupedMoeCall {
  const float* x = nullptr;
  uint64_t x_nb1 = 0;
  int64_t n = 0, dim = 0;
  int K = 0;
  const float* weights = nullptr;
  std::span<const int32_t> local;
  std::span<const GroupedExpert> experts;
  float limit = 0.0f;
  float* slots = nullptr;
};

/// Queues the grouped launches of `c` on `cs` (uploads of the remapped ids and the expert weight
/// pointers, moe_sort, quantize_q8_1, mmq_moe gate and up, moe SwiGLU, quantize_q8_1, mmq_moe
/// down into the slots). Aborts naming the step when a launch fails. The caller has made the
/// stream wait for every staged weight's copy.
void queue_grouped_moe(CudaStream& cs, const GroupedMoeCall& c);

}  // namespace ds4::cuda::detail
