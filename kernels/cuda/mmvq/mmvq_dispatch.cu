// kernels/cuda/mmvq/mmvq_dispatch.cu — runtime type dispatch and argument checks of mmvq,
// mmvq_swiglu and chunk_partials (the kernels are instantiated in kernels/cuda/inst/mmvq_*.cu).
#include "kernels/cuda/common/type_list.cuh"
#include "kernels/cuda/mmvq/mmvq.cuh"
#include "kernels/cuda/quant_matmul.h"

namespace ds4::cuda {

#define DS4_EXTERN_MMVQ(T)                                                                              \
  extern template cudaError_t launch_mmvq<Traits##T>(const void*, const void*, int64_t, int64_t,        \
                                                     const void*, int64_t, float, float*, cudaStream_t); \
  extern template cudaError_t launch_chunk_partials<Traits##T>(const void*, int64_t, const void*, float*, cudaStream_t);
DS4_CUDA_WEIGHT_TYPES(DS4_EXTERN_MMVQ)
#undef DS4_EXTERN_MMVQ

namespace {

// The byte tables hard-coded in kvalues_mxfp4_x4 must equal the shared kvalues_mxfp4 table.
constexpr uint32_t pack4(const uint8_t* t) {
  return uint32_t(t[0]) | (uint32_t(t[1]) << 8) | (uint32_t(t[2]) << 16) | (uint32_t(t[3]) << 24);
}
static_assert(pack4(quant::host_tables::kvalues_mxfp4_u8 + 0) == 0x03020100u);
static_assert(pack4(quant::host_tables::kvalues_mxfp4_u8 + 4) == 0x0C080604u);
static_assert(pack4(quant::host_tables::kvalues_mxfp4_u8 + 8) == 0xFDFEFF00u);
static_assert(pack4(quant::host_tables::kvalues_mxfp4_u8 + 12) == 0xF4F8FAFCu);

/// True when `cols` is a positive whole number of Tr blocks and `p` is aligned for Tr::Block.
template <class Tr>
bool shape_ok(int64_t cols, const void* p) {
  return cols > 0 && cols % (32 * Tr::kChunks) == 0 &&
         reinterpret_cast<uintptr_t>(p) % alignof(typename Tr::Block) == 0;
}

bool act_ok(const void* act) { return act && reinterpret_cast<uintptr_t>(act) % 4 == 0; }

}  // namespace

bool can_dot_q8_1(GgmlType type) {
  switch (type) {
#define DS4_CASE(T) case GgmlType::T:
    DS4_CUDA_WEIGHT_TYPES(DS4_CASE)
#undef DS4_CASE
    return true;
    default:
      return false;
  }
}

cudaError_t mmvq(GgmlType type, const void* W, int64_t rows, int64_t cols, const void* act, int64_t n,
                 float* y, cudaStream_t stream) {
  if (rows < 0 || n < 0) return cudaErrorInvalidValue;
  if (rows == 0 || n == 0) return cudaSuccess;
  if (!W || !y || !act_ok(act)) return cudaErrorInvalidValue;
  switch (type) {
#define DS4_CASE(T)                                                                   \
  case GgmlType::T:                                                                   \
    if (!shape_ok<Traits##T>(cols, W)) return cudaErrorInvalidValue;                  \
    return launch_mmvq<Traits##T>(W, nullptr, rows, cols, act, n, 0.0f, y, stream);
    DS4_CUDA_WEIGHT_TYPES(DS4_CASE)
#undef DS4_CASE
    default:
      return cudaErrorInvalidValue;
  }
}

cudaError_t mmvq_swiglu(GgmlType type, const void* Wg, const void* Wu, int64_t rows, int64_t cols,
                        const void* act, int64_t n, float limit, float* h, cudaStream_t stream) {
  if (rows < 0 || n < 0) return cudaErrorInvalidValue;
  if (rows == 0 || n == 0) return cudaSuccess;
  if (!Wg || !Wu || !h || !act_ok(act)) return cudaErrorInvalidValue;
  switch (type) {
#define DS4_CASE(T)                                                                                   \
  case GgmlType::T:                                                                                   \
    if (!shape_ok<Traits##T>(cols, Wg) || !shape_ok<Traits##T>(cols, Wu)) return cudaErrorInvalidValue; \
    return launch_mmvq<Traits##T>(Wg, Wu, rows, cols, act, n, limit, h, stream);
    DS4_CUDA_WEIGHT_TYPES(DS4_CASE)
#undef DS4_CASE
    default:
      return cudaErrorInvalidValue;
  }
}

cudaError_t chunk_partials(GgmlType type, const void* w_row, int64_t cols, const void* act, float* P,
                           cudaStream_t stream) {
  if (!w_row || !P || !act_ok(act)) return cudaErrorInvalidValue;
  switch (type) {
#define DS4_CASE(T)                                                                  \
  case GgmlType::T:                                                                  \
    if (!shape_ok<Traits##T>(cols, w_row)) return cudaErrorInvalidValue;             \
    return launch_chunk_partials<Traits##T>(w_row, cols, act, P, stream);
    DS4_CUDA_WEIGHT_TYPES(DS4_CASE)
#undef DS4_CASE
    default:
      return cudaErrorInvalidValue;
  }
}

}  // namespace ds4::cuda
