// kernels/cuda/device_tensor_ptr.h — the CUDA backend's (device_cuda.cpp) small helpers: a
// dev::Tensor as the raw device pointer its launcher takes (checked: the buffer is this backend's,
// the type and row stride fit), a dev::Stream as its cudaStream_t with the stream's device made
// current, and the abort paths of calls that have no error return (staging calls, launchers).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <type_traits>
#include <utility>

#include "ds4/result.h"
#include "kernels/cuda/cuda_stream.h"
#include "kernels/device.h"

namespace ds4::cuda::detail {

/// The CUDA buffer behind `t` (aborts unless it is this backend's).
inline CudaBuffer* cbuf(const dev::Tensor& t) {
  DS4_CHECK(t.buf != nullptr && t.buf->backend() == &kCudaBackendTag);
  return static_cast<CudaBuffer*>(t.buf);
}
/// The device address of `t`'s first byte.
inline uint8_t* ptr(const dev::Tensor& t) {
  CudaBuffer* b = cbuf(t);
  DS4_CHECK(t.offset <= b->bytes());
  return b->base() + t.offset;
}
/// `t` as F32 elements (aborts unless F32 with a row stride of whole floats).
inline float* fp(const dev::Tensor& t) {
  DS4_CHECK(t.type == GgmlType::F32 && t.nb1 % 4 == 0);
  return reinterpret_cast<float*>(ptr(t));
}
/// fp(t), or null for an empty tensor (an optional operand).
inline float* fp_or_null(const dev::Tensor& t) { return t.empty() ? nullptr : fp(t); }
/// `t` as I32 elements (aborts unless I32 with a row stride of whole ints).
inline int32_t* ip(const dev::Tensor& t) {
  DS4_CHECK(t.type == GgmlType::I32 && t.nb1 % 4 == 0);
  return reinterpret_cast<int32_t*>(ptr(t));
}
/// The CUDA stream of `s`, with its device made current on the calling thread (every op passes here
/// before it allocates scratch or launches).
inline CudaStream& cst(dev::Stream& s) {
  auto& c = static_cast<CudaStream&>(s);
  use_device(c.dev_);
  return c;
}
/// The cudaStream_t of `s` (its device made current, as cst).
inline cudaStream_t cs(dev::Stream& s) { return cst(s).s_; }

/// The value of a staging call, or abort naming what failed (bind() has no error path; a failed
/// copy-engine call means the device is unusable).
template <class T>
inline T must(Result<T> r, const char* what) {
  if (!r.ok()) {
    std::fprintf(stderr, "ds4: CUDA backend: %s: %s\n", what, r.error().message.c_str());
    std::abort();
  }
  if constexpr (!std::is_void_v<T>) return std::move(r).value();
}

/// True when `p` is page-locked host memory the CUDA runtime knows (cudaMallocHost,
/// cudaHostAlloc, cudaHostRegister): the copy engine copies from it directly.
inline bool is_pinned(const void* p) {
  cudaPointerAttributes a{};
  if (cudaPointerGetAttributes(&a, p) != cudaSuccess) {
    (void)cudaGetLastError();
    return false;
  }
  return a.type == cudaMemoryTypeHost;
}

/// Aborts naming the op when a launcher fails.
inline void check_launch(cudaError_t e, const char* op) {
  if (e != cudaSuccess) {
    std::fprintf(stderr, "ds4: CUDA backend: %s failed: %s (%s)\n", op, cudaGetErrorName(e), cudaGetErrorString(e));
    std::abort();
  }
}

/// DS4_CUDA_CHECK_NAN=1 (debugging aid): after every op, waits for its stream, downloads the
/// op's F32 output and reports the first op of the run whose output holds a NaN.
inline bool nan_check_enabled() {
  static const bool on = [] {
    const char* e = std::getenv("DS4_CUDA_CHECK_NAN");
    return e && *e && *e != '0';
  }();
  return on;
}

}  // namespace ds4::cuda::detail
