// kernels/cuda/cuda_check.h — CUDA error checks (DESIGN.md "Errors": CUDA errors are programmer /
// system errors that abort with device, file, line and statement).
//
// DS4_CUDA_CHECK(stmt): evaluates a cudaError_t expression; on failure prints
//   "ds4: CUDA error <name> (<message>) on device <d> at <file>:<line>: <stmt>" and aborts.
// DS4_CUDA_TRY(stmt): inside a function returning cudaError_t (the launchers), returns the error
//   to the caller instead (after the same message is recorded by cuda_describe_error()).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdio>
#include <cstdlib>

namespace ds4::cuda {

/// Current device ordinal, or -1 when it cannot be queried.
inline int current_device_or_minus_one() {
  int d = -1;
  return cudaGetDevice(&d) == cudaSuccess ? d : -1;
}

/// Prints one line naming the error, the device, file, line and statement (to stderr).
inline void cuda_report_error(cudaError_t err, const char* stmt, const char* file, int line) {
  std::fprintf(stderr, "ds4: CUDA error %s (%s) on device %d at %s:%d: %s\n", cudaGetErrorName(err),
               cudaGetErrorString(err), current_device_or_minus_one(), file, line, stmt);
}

}  // namespace ds4::cuda

/// Aborts with device, file, line and statement when `stmt` (a cudaError_t) is not cudaSuccess.
#define DS4_CUDA_CHECK(stmt)                                               \
  do {                                                                     \
    const cudaError_t ds4_cuda_err_ = (stmt);                              \
    if (ds4_cuda_err_ != cudaSuccess) {                                    \
      ::ds4::cuda::cuda_report_error(ds4_cuda_err_, #stmt, __FILE__, __LINE__); \
      std::abort();                                                        \
    }                                                                      \
  } while (0)

/// Returns the error from the enclosing cudaError_t function (after printing the same line).
#define DS4_CUDA_TRY(stmt)                                                 \
  do {                                                                     \
    const cudaError_t ds4_cuda_err_ = (stmt);                              \
    if (ds4_cuda_err_ != cudaSuccess) {                                    \
      ::ds4::cuda::cuda_report_error(ds4_cuda_err_, #stmt, __FILE__, __LINE__); \
      return ds4_cuda_err_;                                                \
    }                                                                      \
  } while (0)
