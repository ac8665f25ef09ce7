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
    C(cudaErrorInvalidDevice) C(cudaErrorInvalidResourceHandle) C(cudaErrorIllegalState) C(cudaErrorNotReady) C(cudaErrorIllegalAddress)
    C(cudaErrorLaunchOutOfResources) C(cudaErrorPeerAccessAlreadyEnabled) C(cudaErrorHostMemoryAlreadyRegistered)
    C(cudaErrorHostMemoryNotRegistered) C(cudaErrorLaunchFailure) C(cudaErrorNotPermitted)
    C(cudaErrorNotSupported) C(cudaErrorUnknown) C(cudaErrorStreamCaptureUnsupported)
    C(cudaErrorStreamCaptureInvalidated) C(cudaErrorStreamCaptureMerge) C(cudaErrorStreamCaptureUnmatched)
    C(cudaErrorStreamCaptureUnjoined) C(cudaErrorStreamCaptureIsolation) C(cudaErrorStreamCaptureImplicit)
    C(cudaErrorCapturedEvent) C(cudaErrorStreamCaptureWrongThread) C(cudaErrorGraphExecUpdateFailure)
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
    case cudaErrorIllegalState: return "the operation cannot be performed in the present state";
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
    case cudaErrorStreamCaptureUnsupported: return "operation not permitted when stream is capturing";
    case cudaErrorStreamCaptureInvalidated: return "operation failed due to a previous error during capture";
    case cudaErrorStreamCaptureMerge: return "operation would result in a merge of separate capture sequences";
    case cudaErrorStreamCaptureUnmatched: return "capture was not ended in the same stream as it began";
    case cudaErrorStreamCaptureUnjoined: return "capturing stream has unjoined work";
    case cudaErrorStreamCaptureIsolation: return "dependency created on uncaptured work in another stream";
    case cudaErrorStreamCaptureImplicit: return "operation would make the legacy stream depend on a capturing blocking stream";
    case cudaErrorCapturedEvent: return "operation not permitted on an event last recorded in a capturing stream";
    case cudaErrorStreamCaptureWrongThread: return "attempt to terminate a thread-local capture sequence from another thread";
    case cudaErrorGraphExecUpdateFailure: return "the graph update was not performed because it included changes which violated constraints specific to instantiated graph update";
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
