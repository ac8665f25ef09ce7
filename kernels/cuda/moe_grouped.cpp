// kernels/cuda/moe_grouped.cpp — the grouped routed-expert path of moe_experts (moe_grouped.h).
#include "kernels/cuda/moe_grouped.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>

#include "kernels/cuda/ops/ops_cuda_matmul.h"
#include "kernels/cuda/quant_matmul.h"
#include "kernels/device.h"

namespace ds4::cuda::detail {
namespace {

void check(cudaError_t e, const char* step) {
  if (e != cudaSuccess) {
    std::fprintf(stderr, "ds4: CUDA backend: moe_experts (grouped) %s failed: %s (%s)\n", step, cudaGetErrorName(e),
                 cudaGetErrorString(e));
    std::abort();
  }
}

/// True when `m` is a packed [cols, rows] matrix of `type` with a Q8_1 dot, whole blocks per row
/// (mmq's shape rule: cols a multiple of the type's block) and an aligned start.
bool matrix_ok(const GroupedMatrix& m, GgmlType type, int64_t cols, int64_t rows) {
  const GgmlTypeGeometry* g = ggml_type_geometry(static_cast<uint32_t>(type));
  return m.data && m.type == type && m.cols == cols && m.rows == rows && dev::uses_q8_1(type) &&
         can_dot_q8_1(type) && g && cols % g->block_elems == 0 && m.nb1 == dev::row_bytes_of(type, cols) &&
         reinterpret_cast<uintptr_t>(m.data) % 16 == 0;
}

}  // namespace

const char* grouped_moe_refusal(std::span<const GroupedExpert> experts, int64_t dim, int64_t n_pairs, bool q8_act) {
  if (!q8_act) return "activations are not Q8_1";
  if (experts.empty()) return "no experts";
  const GroupedExpert& e0 = experts[0];
  const int64_t ff = e0.gate.rows;
  if (dim <= 0 || ff <= 0 || dim % 32 != 0 || ff % 32 != 0) return "dim or ff not a multiple of 32";
  for (const GroupedExpert& e : experts)
    if (!matrix_ok(e.gate, e0.gate.type, dim, ff) || !matrix_ok(e.up, e0.up.type, dim, ff) ||
        !matrix_ok(e.down, e0.down.type, ff, dim))
      return "expert matrices differ in type or shape, lack a Q8_1 dot, or have strided rows";
  if (moe_max_tiles(n_pairs, static_cast<int>(experts.size())) > 65535) return "more MMQ tiles than grid.y holds";
  return nullptr;
}

int64_t grouped_moe_remap(std::span<const int32_t> ids, std::span<const GroupedExpert> experts,
                          std::vector<int32_t>& local, std::vector<int64_t>& pairs_of) {
  local.assign(ids.size(), -1);
  pairs_of.assign(experts.size(), 0);
  int64_t mapped = 0;
  for (size_t p = 0; p < ids.size(); ++p) {
    const auto it = std::lower_bound(experts.begin(), experts.end(), ids[p],
                                     [](const GroupedExpert& e, int32_t id) { return e.id < id; });
    if (it == experts.end() || it->id != ids[p]) continue;
    const size_t i = static_cast<size_t>(it - experts.begin());
    local[p] = static_cast<int32_t>(i);
    ++pairs_of[i];
    ++mapped;
  }
  return mapped;
}

void queue_grouped_moe(CudaStream& cs, const GroupedMoeCall& c) {
  cudaStream_t st = cs.s_;
  const int64_t P = c.n * c.K, dim = c.dim, ff = c.experts[0].gate.rows;
  const int E = static_cast<int>(c.experts.size());
  DS4_CHECK(static_cast<int64_t>(c.local.size()) == P && P > 0);
  // Uploads (pageable sources: the runtime copies them before cudaMemcpyAsync returns).
  auto* ids = reinterpret_cast<int32_t*>(cs.moe_pairs.get(static_cast<uint64_t>(P) * 4, st));
  check(cudaMemcpyAsync(ids, c.local.data(), static_cast<uint64_t>(P) * 4, cudaMemcpyHostToDevice, st), "ids upload");
  std::vector<const void*> wp(static_cast<size_t>(3 * E));
  for (int i = 0; i < E; ++i) {
    wp[size_t(i)] = c.experts[size_t(i)].gate.data;
    wp[size_t(E + i)] = c.experts[size_t(i)].up.data;
    wp[size_t(2 * E + i)] = c.experts[size_t(i)].down.data;
  }
  auto* wdev = reinterpret_cast<const void**>(cs.moe_wptr.get(wp.size() * sizeof(void*), st));
  check(cudaMemcpyAsync(wdev, wp.data(), wp.size() * sizeof(void*), cudaMemcpyHostToDevice, st), "weight pointers");
  // The counting sort by expert (pairs of experts not in the call have id -1: left out).
  const int64_t tiles = moe_max_tiles(P, E);
  auto* sb = reinterpret_cast<int32_t*>(cs.moe_sort.get(static_cast<uint64_t>(E + 1 + P + 3 * tiles + 2) * 4, st));
  const MoeSorted sorted{sb, sb + E + 1, sb + E + 1 + P, sb + E + 1 + P + 3 * tiles};
  check(moe_sort(ids, P, E, sorted, st), "moe_sort");
  // The batch's Q8_1 activations, once (quantize_q8_1 reads packed rows).
  const uint64_t xrow = static_cast<uint64_t>(dim) * 4;
  const float* xs = c.x;
  if (c.x_nb1 != xrow) {
    auto* xp = reinterpret_cast<float*>(cs.xpack.get(xrow * static_cast<uint64_t>(c.n), st));
    check(launch_copy_rows_bytes(st, xp, xrow, c.x, c.x_nb1, xrow, c.n), "pack x");
    xs = xp;
  }
  uint8_t* xq = cs.actq.get(static_cast<uint64_t>(c.n) * static_cast<uint64_t>(dim / 32) * 36, st);
  check(quantize_q8_1(xs, c.n, dim, xq, st), "quantize_q8_1 x");
  // gate, up: rows p of g, u [P, ff] for the mapped pairs (the others hold scratch garbage).
  auto* g = reinterpret_cast<float*>(cs.moe_g.get(static_cast<uint64_t>(P * ff) * 4, st));
  auto* u = reinterpret_cast<float*>(cs.moe_u.get(static_cast<uint64_t>(P * ff) * 4, st));
  check(mmq_moe(c.experts[0].gate.type, wdev, E, ff, dim, xq, c.K, sorted, P, g, MmqPath::Auto, st), "mmq_moe gate");
  check(mmq_moe(c.experts[0].up.type, wdev + E, E, ff, dim, xq, c.K, sorted, P, u, MmqPath::Auto, st), "mmq_moe up");
  // h = swiglu(g, u) * weights[p] over all P rows (rows of unmapped pairs are never read).
  check(launch_moe_swiglu(st, g, u, P, ff, c.limit, c.weights), "swiglu");
  uint8_t* hq = cs.moe_hq.get(static_cast<uint64_t>(P) * static_cast<uint64_t>(ff / 32) * 36, st);
  check(quantize_q8_1(g, P, ff, hq, st), "quantize_q8_1 h");
  // down: one column per pair (k = 1: source row p of hq), output row p = the pair's slot.
  check(mmq_moe(c.experts[0].down.type, wdev + 2 * E, E, dim, ff, hq, 1, sorted, P, c.slots, MmqPath::Auto, st),
        "mmq_moe down");
}

}  // namespace ds4::cuda::detail
