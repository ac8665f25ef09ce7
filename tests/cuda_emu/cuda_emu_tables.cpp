// tests/cuda_emu/cuda_emu_tables.cpp — the emulated CUDA runtime's fixed tables: the error names
// and strings of cudaError_t (CUDA Runtime API "Error Handling") and cudaDeviceGetAttribute over
// the emulated device's properties (cudaGetDeviceProperties in cuda_emu_devices.cpp).
#include <cstring>

#include "tests/cuda_emu/cuda_emu_internal.h"

using namespace ds4::emu;

const char* cudaGetErrorName(cudaError_t e) {
  switch (e) {
#define C(x) \
  case x: return #x;
    C(cudaSuccess) C(cudaErrorInvalidValue) C(cudaErrorMemoryAllocation) C(cudaErrorInitializationError)
    C(cudaErrorInvalidConfiguration) C(cudaErrorInvalidSymbol) C(cudaErrorInvalidDevicePointer)
    C(cudaErrorInvalidMemcpyDirection) C(cudaErrorInvalidDeviceFunction) C(cudaErrorNoDevice)
    C(cudaErrorInvalidDevice) C(cudaErrorInvalidResourceHandle) C(cudaErrorNotReady) C(cudaErrorIllegalAddress)
    C(cudaErrorLaunchOutOfResources) C(cudaErrorPeerAccessAlreadyEnabled) C(cudaErrorHostMemoryAlreadyRegistered)
    C(cudaErrorHostMemoryNotRegistered) C(cudaErrorLaunchFailure) C(cudaErrorNotPermitted)
    C(cudaErrorNotSupported) C(cudaErrorUnknown)
#undef C
  }
  return "cudaErrorUnknown";
}

const char* cudaGetErrorString(cudaError_t e) {
  switch (e) {
    case cudaSuccess: return "no error";
    case cudaErrorInvalidValue: return "invalid argument";
    case cudaErrorMemoryAllocation: return "out of memory";
    case cudaErrorInitializationError: return "initialization error";
    case cudaErrorInvalidConfiguration: return "invalid configuration argument";
    case cudaErrorInvalidSymbol: return "invalid device symbol";
    case cudaErrorInvalidDevicePointer: return "invalid device pointer";
    case cudaErrorInvalidMemcpyDirection: return "invalid copy direction for memcpy";
    case cudaErrorInvalidDeviceFunction: return "invalid device function";
    case cudaErrorNoDevice: return "no CUDA-capable device is detected";
    case cudaErrorInvalidDevice: return "invalid device ordinal";
    case cudaErrorInvalidResourceHandle: return "invalid resource handle";
    case cudaErrorNotReady: return "device not ready";
    case cudaErrorIllegalAddress: return "an illegal memory access was encountered";
    case cudaErrorLaunchOutOfResources: return "too many resources requested for launch";
    case cudaErrorPeerAccessAlreadyEnabled: return "peer access is already enabled";
    case cudaErrorHostMemoryAlreadyRegistered: return "part or all of the requested memory range is already mapped";
    case cudaErrorHostMemoryNotRegistered: return "pointer does not correspond to a registered memory region";
    case cudaErrorLaunchFailure: return "unspecified launch failure";
    case cudaErrorNotPermitted: return "operation not permitted";
    case cudaErrorNotSupported: return "operation not supported";
    case cudaErrorUnknown: return "unknown error";
  }
  return "unrecognized error code";
}

cudaError_t cudaDeviceGetAttribute(int* v, cudaDeviceAttr a, int d) {
  cudaDeviceProp p;
  if (!v) return set_error(cudaErrorInvalidValue);
  if (cudaError_t e = cudaGetDeviceProperties(&p, d); e != cudaSuccess) return e;
  switch (a) {
    case cudaDevAttrMaxThreadsPerBlock: *v = p.maxThreadsPerBlock; break;
    case cudaDevAttrMaxSharedMemoryPerBlock: *v = int(p.sharedMemPerBlock); break;
    case cudaDevAttrWarpSize: *v = 32; break;
    case cudaDevAttrMultiProcessorCount: *v = p.multiProcessorCount; break;
    case cudaDevAttrComputeCapabilityMajor: *v = p.major; break;
    case cudaDevAttrComputeCapabilityMinor: *v = p.minor; break;
    case cudaDevAttrMaxSharedMemoryPerBlockOptin: *v = int(p.sharedMemPerBlockOptin); break;
    default: return set_error(cudaErrorInvalidValue);
  }
  return cudaSuccess;
}
