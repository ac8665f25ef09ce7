// staging/cuda/host_pin_cuda.cpp — CUDA pinning of host expert slabs (compiled only when the
// build has CUDA; staging/CMakeLists.txt adds it and defines DS4_HAVE_CUDA for ds4_staging).
// cudaHostRegister is called per chunk by pin_in_chunks (host_memory.h); after a failure the
// error is read back with cudaGetLastError so it does not stay sticky for later calls.
#include <cuda_runtime.h>

#include "staging/host_memory.h"

namespace ds4::staging {

bool have_cuda_pinning() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();
    return false;
  }
  return n > 0;
}

bool pin_error_pending() { return cudaPeekAtLastError() != cudaSuccess; }

PinOps default_pin_ops() {
  if (!have_cuda_pinning()) return mlock_pin_ops();
  PinOps o;
  o.name = "cudaHostRegister";
  o.kind = PinKind::Cuda;
  o.pin = [](void* p, uint64_t n) -> Result<void> {
    const cudaError_t e = cudaHostRegister(p, n, cudaHostRegisterPortable);
    if (e != cudaSuccess) {
      cudaGetLastError();
      return Error{std::string("cudaHostRegister of ") + format_bytes(n) + " failed: " + cudaGetErrorString(e)};
    }
    return ok();
  };
  o.unpin = [](void* p, uint64_t) {
    if (cudaHostUnregister(p) != cudaSuccess) cudaGetLastError();
  };
  o.clear_error = [] { cudaGetLastError(); };
  return o;
}

}  // namespace ds4::staging
