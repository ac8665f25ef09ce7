// kernels/cuda/mmq/mmq_dispatch.cu — runtime type dispatch, path choice and argument checks of
// mmq and mmq_moe (kernels instantiated in kernels/cuda/inst/mmq_*.cu).
#include "kernels/cuda/common/type_list.cuh"
#include "kernels/cuda/mmq/mmq.cuh"
#include "kernels/cuda/quant_matmul.h"

namespace ds4::cuda {

#define DS4_EXTERN_MMQ(T)                                                                              \
  extern template cudaError_t launch_mmq<Traits##T>(const void*, const void* const*, int64_t, int64_t, \
                                                    const void*, int64_t, MmqColumns, const int32_t*,  \
                                                    const int32_t*, int64_t, bool, float*, cudaStream_t);
DS4_CUDA_WEIGHT_TYPES(DS4_EXTERN_MMQ)
#undef DS4_EXTERN_MMQ

namespace {

/// Resolves `path` for the current device: true = MMA. Sets *err for an impossible request.
bool resolve_mma(MmqPath path, cudaError_t* err) {
  *err = cudaSuccess;
  if (path == MmqPath::Dp4a) return false;
  int dev = 0, major = 0, minor = 0;
  if ((*err = cudaGetDevice(&dev)) != cudaSuccess) return false;
  if ((*err = cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev)) != cudaSuccess) return false;
  if ((*err = cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev)) != cudaSuccess) return false;
  const bool turing_plus = major * 10 + minor >= 75;
  if (path == MmqPath::Mma && !turing_plus) *err = cudaErrorInvalidDevice;
  return turing_plus;
}

template <class Tr>
bool shape_ok(int64_t cols) {
  return cols > 0 && cols % (32 * Tr::kChunks) == 0;
}

template <class Tr>
bool aligned(const void* p) {
  return reinterpret_cast<uintptr_t>(p) % alignof(typename Tr::Block) == 0;
}

}  // namespace

cudaError_t mmq(GgmlType type, const void* W, int64_t rows, int64_t cols, const void* act, int64_t n,
                float* y, MmqPath path, cudaStream_t stream) {
  if (rows < 0 || n < 0) return cudaErrorInvalidValue;
  if (rows == 0 || n == 0) return cudaSuccess;
  if (!W || !y || !act || reinterpret_cast<uintptr_t>(act) % 4 != 0) return cudaErrorInvalidValue;
  if ((n + kMmqCols - 1) / kMmqCols > 65535) return cudaErrorInvalidValue;  // grid.y limit
  cudaError_t err;
  const bool use_mma = resolve_mma(path, &err);
  if (err != cudaSuccess) return err;
  const MmqColumns dense{nullptr, 1};
  switch (type) {
#define DS4_CASE(T)                                                                                       \
  case GgmlType::T:                                                                                       \
    if (!shape_ok<Traits##T>(cols) || !aligned<Traits##T>(W)) return cudaErrorInvalidValue;              \
    return launch_mmq<Traits##T>(W, nullptr, rows, cols, act, n, dense, nullptr, nullptr,               \
                                 (n + kMmqCols - 1) / kMmqCols, use_mma, y, stream);
    DS4_CUDA_WEIGHT_TYPES(DS4_CASE)
#undef DS4_CASE
    default:
      return cudaErrorInvalidValue;
  }
}

cudaError_t mmq_moe(GgmlType type, const void* const* w_experts, int n_experts, int64_t rows, int64_t cols,
                    const void* act, int k, const MoeSorted& sorted, int64_t n_pairs, float* y, MmqPath path,
                    cudaStream_t stream) {
  if (rows < 0 || n_pairs < 0 || k <= 0 || n_experts <= 0) return cudaErrorInvalidValue;
  if (rows == 0 || n_pairs == 0) return cudaSuccess;
  if (!w_experts || !y || !act || reinterpret_cast<uintptr_t>(act) % 4 != 0 || !sorted.sorted_pairs ||
      !sorted.tiles || !sorted.counters)
    return cudaErrorInvalidValue;
  const int64_t max_tiles = moe_max_tiles(n_pairs, n_experts);
  if (max_tiles > 65535) return cudaErrorInvalidValue;  // grid.y limit
  cudaError_t err;
  const bool use_mma = resolve_mma(path, &err);
  if (err != cudaSuccess) return err;
  const MmqColumns cols_map{sorted.sorted_pairs, k};
  // Expert matrices are device pointers read by the kernel; their alignment is the caller's duty
  // (cudaMalloc'ed or sub-allocated at a multiple of the block alignment).
  switch (type) {
#define DS4_CASE(T)                                                                                       \
  case GgmlType::T:                                                                                       \
    if (!shape_ok<Traits##T>(cols)) return cudaErrorInvalidValue;                                        \
    return launch_mmq<Traits##T>(nullptr, w_experts, rows, cols, act, n_pairs, cols_map, sorted.tiles,  \
                                 sorted.counters, max_tiles, use_mma, y, stream);
    DS4_CUDA_WEIGHT_TYPES(DS4_CASE)
#undef DS4_CASE
    default:
      return cudaErrorInvalidValue;
  }
}

}  // namespace ds4::cuda
