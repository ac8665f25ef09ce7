// tests/cuda_emu/cuda_emu_runtime.h — the CUDA runtime API subset of the emulator (names, values
// and semantics from the CUDA Runtime API reference; implemented by the files cuda_emu_state.h
// lists).
// Included by cuda_emu.h; not a standalone header.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <tuple>
#include <type_traits>
#include <utility>

// ---- types -------------------------------------------------------------------------------------
struct uint3 {
  unsigned x, y, z;
};
struct int3 {
  int x, y, z;
};
/// Launch / block geometry (CUDA's dim3: unspecified components are 1).
struct dim3 {
  unsigned x, y, z;
  constexpr dim3(unsigned vx = 1, unsigned vy = 1, unsigned vz = 1) : x(vx), y(vy), z(vz) {}
  constexpr dim3(uint3 v) : x(v.x), y(v.y), z(v.z) {}
  constexpr operator uint3() const { return uint3{x, y, z}; }
};

/// Error codes (values as in CUDA's driver_types.h).
enum cudaError {
  cudaSuccess = 0,
  cudaErrorInvalidValue = 1,
  cudaErrorMemoryAllocation = 2,
  cudaErrorInitializationError = 3,
  cudaErrorInvalidConfiguration = 9,
  cudaErrorInvalidSymbol = 13,
  cudaErrorInvalidDevicePointer = 17,
  cudaErrorInvalidMemcpyDirection = 21,
  cudaErrorInvalidDeviceFunction = 98,
  cudaErrorNoDevice = 100,
  cudaErrorInvalidDevice = 101,
  cudaErrorInvalidResourceHandle = 400,
  cudaErrorIllegalState = 401,
  cudaErrorNotReady = 600,
  cudaErrorIllegalAddress = 700,
  cudaErrorLaunchOutOfResources = 701,
  cudaErrorPeerAccessAlreadyEnabled = 704,
  cudaErrorHostMemoryAlreadyRegistered = 712,
  cudaErrorHostMemoryNotRegistered = 713,
  cudaErrorLaunchFailure = 719,
  cudaErrorNotPermitted = 800,
  cudaErrorNotSupported = 801,
  cudaErrorStreamCaptureUnsupported = 900,
  cudaErrorStreamCaptureInvalidated = 901,
  cudaErrorStreamCaptureMerge = 902,
  cudaErrorStreamCaptureUnmatched = 903,
  cudaErrorStreamCaptureUnjoined = 904,
  cudaErrorStreamCaptureIsolation = 905,
  cudaErrorStreamCaptureImplicit = 906,
  cudaErrorCapturedEvent = 907,
  cudaErrorStreamCaptureWrongThread = 908,
  cudaErrorGraphExecUpdateFailure = 910,
  cudaErrorUnknown = 999,
};
typedef enum cudaError cudaError_t;

enum cudaMemcpyKind {
  cudaMemcpyHostToHost = 0,
  cudaMemcpyHostToDevice = 1,
  cudaMemcpyDeviceToHost = 2,
  cudaMemcpyDeviceToDevice = 3,
  cudaMemcpyDefault = 4,
};

struct CUstream_st;
struct CUevent_st;
typedef CUstream_st* cudaStream_t;
typedef CUevent_st* cudaEvent_t;
// Graphs (cuda_emu_graphs.cpp): a captured graph, its executable form, a node (never handed out).
struct CUgraph_st;
struct CUgraphExec_st;
struct CUgraphNode_st;
typedef CUgraph_st* cudaGraph_t;
typedef CUgraphExec_st* cudaGraphExec_t;
typedef CUgraphNode_st* cudaGraphNode_t;

/// Stream capture modes (cudaStreamBeginCapture; CUDA's driver_types.h values).
enum cudaStreamCaptureMode {
  cudaStreamCaptureModeGlobal = 0,
  cudaStreamCaptureModeThreadLocal = 1,
  cudaStreamCaptureModeRelaxed = 2,
};
/// cudaStreamIsCapturing's answer.
enum cudaStreamCaptureStatus {
  cudaStreamCaptureStatusNone = 0,
  cudaStreamCaptureStatusActive = 1,
  cudaStreamCaptureStatusInvalidated = 2,
};
/// Why cudaGraphExecUpdate refused an update.
enum cudaGraphExecUpdateResult {
  cudaGraphExecUpdateSuccess = 0x0,
  cudaGraphExecUpdateError = 0x1,
  cudaGraphExecUpdateErrorTopologyChanged = 0x2,
  cudaGraphExecUpdateErrorNodeTypeChanged = 0x3,
  cudaGraphExecUpdateErrorFunctionChanged = 0x4,
  cudaGraphExecUpdateErrorParametersChanged = 0x5,
  cudaGraphExecUpdateErrorNotSupported = 0x6,
};
/// cudaGraphExecUpdate's detail (CUDA 12 form).
struct cudaGraphExecUpdateResultInfo {
  cudaGraphExecUpdateResult result;
  cudaGraphNode_t errorNode;
  cudaGraphNode_t errorFromNode;
};
/// The runtime version the emulator's API follows (the CUDA 12 signatures of the graph calls).
#define CUDART_VERSION 12040
typedef void (*cudaHostFn_t)(void* user_data);

#define cudaStreamLegacy ((cudaStream_t)0x1)
#define cudaStreamPerThread ((cudaStream_t)0x2)
#define cudaStreamDefault 0x00
#define cudaStreamNonBlocking 0x01
#define cudaEventDefault 0x00
#define cudaEventBlockingSync 0x01
#define cudaEventDisableTiming 0x02
#define cudaHostAllocDefault 0x00
#define cudaHostAllocPortable 0x01
#define cudaHostAllocMapped 0x02
#define cudaHostAllocWriteCombined 0x04
#define cudaHostRegisterDefault 0x00
#define cudaHostRegisterPortable 0x01
#define cudaHostRegisterMapped 0x02
#define cudaHostRegisterIoMemory 0x04
#define cudaHostRegisterReadOnly 0x08

enum cudaFuncAttribute {
  cudaFuncAttributeMaxDynamicSharedMemorySize = 8,
  cudaFuncAttributePreferredSharedMemoryCarveout = 9,
};

enum cudaDeviceAttr {
  cudaDevAttrMaxThreadsPerBlock = 1,
  cudaDevAttrMaxSharedMemoryPerBlock = 8,
  cudaDevAttrWarpSize = 10,
  cudaDevAttrMultiProcessorCount = 16,
  cudaDevAttrComputeCapabilityMajor = 75,
  cudaDevAttrComputeCapabilityMinor = 76,
  cudaDevAttrMaxSharedMemoryPerBlockOptin = 97,
};

enum cudaMemoryType {
  cudaMemoryTypeUnregistered = 0,
  cudaMemoryTypeHost = 1,
  cudaMemoryTypeDevice = 2,
  cudaMemoryTypeManaged = 3,
};
struct cudaPointerAttributes {
  cudaMemoryType type;
  int device;
  void* devicePointer;
  void* hostPointer;
};

/// The fields of cudaDeviceProp that this project reads (emulated values: an RTX 2080 Ti, sm_75).
struct cudaDeviceProp {
  char name[256];
  size_t totalGlobalMem;
  size_t sharedMemPerBlock;
  int regsPerBlock;
  int warpSize;
  size_t memPitch;
  int maxThreadsPerBlock;
  int maxThreadsDim[3];
  int maxGridSize[3];
  int clockRate;
  size_t totalConstMem;
  int major;
  int minor;
  size_t textureAlignment;
  int deviceOverlap;
  int multiProcessorCount;
  int kernelExecTimeoutEnabled;
  int integrated;
  int canMapHostMemory;
  int computeMode;
  int concurrentKernels;
  int ECCEnabled;
  int pciBusID;
  int pciDeviceID;
  int pciDomainID;
  int asyncEngineCount;
  int unifiedAddressing;
  int memoryClockRate;
  int memoryBusWidth;
  int l2CacheSize;
  int maxThreadsPerMultiProcessor;
  size_t sharedMemPerMultiprocessor;
  int regsPerMultiprocessor;
  int managedMemory;
  size_t sharedMemPerBlockOptin;
};

// ---- runtime API (cuda_emu_memory.cpp, cuda_emu_streams.cpp, cuda_emu_devices.cpp) ---------------
const char* cudaGetErrorString(cudaError_t e);
const char* cudaGetErrorName(cudaError_t e);
cudaError_t cudaGetLastError();
cudaError_t cudaPeekAtLastError();

cudaError_t cudaGetDeviceCount(int* n);
cudaError_t cudaSetDevice(int d);
cudaError_t cudaGetDevice(int* d);
cudaError_t cudaGetDeviceProperties(cudaDeviceProp* p, int d);
cudaError_t cudaDeviceGetAttribute(int* v, cudaDeviceAttr a, int d);
cudaError_t cudaDeviceSynchronize();
cudaError_t cudaDeviceReset();
cudaError_t cudaMemGetInfo(size_t* free_bytes, size_t* total_bytes);
cudaError_t cudaDriverGetVersion(int* v);
cudaError_t cudaRuntimeGetVersion(int* v);
cudaError_t cudaDeviceCanAccessPeer(int* can, int d, int peer);
cudaError_t cudaDeviceEnablePeerAccess(int peer, unsigned flags);

cudaError_t cudaMalloc(void** p, size_t n);
cudaError_t cudaFree(void* p);
cudaError_t cudaMallocHost(void** p, size_t n);
cudaError_t cudaHostAlloc(void** p, size_t n, unsigned flags);
cudaError_t cudaFreeHost(void* p);
/// The typed overloads of cuda_runtime.h's C++ API.
template <class T>
cudaError_t cudaMalloc(T** p, size_t n) {
  return cudaMalloc(reinterpret_cast<void**>(p), n);
}
template <class T>
cudaError_t cudaMallocHost(T** p, size_t n) {
  return cudaMallocHost(reinterpret_cast<void**>(p), n);
}
template <class T>
cudaError_t cudaHostAlloc(T** p, size_t n, unsigned flags) {
  return cudaHostAlloc(reinterpret_cast<void**>(p), n, flags);
}
cudaError_t cudaHostRegister(void* p, size_t n, unsigned flags);
cudaError_t cudaHostUnregister(void* p);
cudaError_t cudaHostGetDevicePointer(void** dev, void* host, unsigned flags);
cudaError_t cudaPointerGetAttributes(cudaPointerAttributes* a, const void* p);

cudaError_t cudaMemcpy(void* dst, const void* src, size_t n, cudaMemcpyKind kind);
cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t n, cudaMemcpyKind kind, cudaStream_t s = nullptr);
cudaError_t cudaMemcpy2D(void* dst, size_t dpitch, const void* src, size_t spitch, size_t width, size_t height,
                         cudaMemcpyKind kind);
cudaError_t cudaMemcpy2DAsync(void* dst, size_t dpitch, const void* src, size_t spitch, size_t width,
                              size_t height, cudaMemcpyKind kind, cudaStream_t s = nullptr);
cudaError_t cudaMemcpyPeer(void* dst, int dst_dev, const void* src, int src_dev, size_t n);
cudaError_t cudaMemcpyPeerAsync(void* dst, int dst_dev, const void* src, int src_dev, size_t n,
                                cudaStream_t s = nullptr);
cudaError_t cudaMemset(void* p, int value, size_t n);
cudaError_t cudaMemsetAsync(void* p, int value, size_t n, cudaStream_t s = nullptr);

cudaError_t cudaStreamCreate(cudaStream_t* s);
cudaError_t cudaStreamCreateWithFlags(cudaStream_t* s, unsigned flags);
cudaError_t cudaStreamDestroy(cudaStream_t s);
cudaError_t cudaStreamSynchronize(cudaStream_t s);
cudaError_t cudaStreamQuery(cudaStream_t s);
cudaError_t cudaStreamWaitEvent(cudaStream_t s, cudaEvent_t e, unsigned flags = 0);
cudaError_t cudaLaunchHostFunc(cudaStream_t s, cudaHostFn_t fn, void* user_data);

// Stream capture and graphs (cuda_emu_graphs.cpp; semantics in tests/cuda_emu/README.md).
cudaError_t cudaStreamBeginCapture(cudaStream_t s, cudaStreamCaptureMode mode);
cudaError_t cudaStreamEndCapture(cudaStream_t s, cudaGraph_t* graph);
cudaError_t cudaStreamIsCapturing(cudaStream_t s, cudaStreamCaptureStatus* status);
cudaError_t cudaGraphInstantiate(cudaGraphExec_t* exec, cudaGraph_t graph, unsigned long long flags = 0);
cudaError_t cudaGraphLaunch(cudaGraphExec_t exec, cudaStream_t s);
cudaError_t cudaGraphExecUpdate(cudaGraphExec_t exec, cudaGraph_t graph, cudaGraphExecUpdateResultInfo* info);
cudaError_t cudaGraphExecDestroy(cudaGraphExec_t exec);
cudaError_t cudaGraphDestroy(cudaGraph_t graph);
cudaError_t cudaGraphGetNodes(cudaGraph_t graph, cudaGraphNode_t* nodes, size_t* count);

cudaError_t cudaEventCreate(cudaEvent_t* e);
cudaError_t cudaEventCreateWithFlags(cudaEvent_t* e, unsigned flags);
cudaError_t cudaEventDestroy(cudaEvent_t e);
cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s = nullptr);
cudaError_t cudaEventSynchronize(cudaEvent_t e);
cudaError_t cudaEventQuery(cudaEvent_t e);
cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t start, cudaEvent_t end);

cudaError_t cudaFuncSetAttribute(const void* func, cudaFuncAttribute attr, int value);
template <class F>
cudaError_t cudaFuncSetAttribute(F* func, cudaFuncAttribute attr, int value) {
  return cudaFuncSetAttribute(reinterpret_cast<const void*>(func), attr, value);
}

/// cudaMemcpyToSymbol / FromSymbol for __constant__ / __device__ globals (plain host objects here).
template <class T>
cudaError_t cudaMemcpyToSymbol(T& symbol, const void* src, size_t n, size_t offset = 0,
                               cudaMemcpyKind kind = cudaMemcpyHostToDevice) {
  if (offset + n > sizeof(T)) return cudaErrorInvalidValue;
  cudaError_t e = cudaDeviceSynchronize();
  if (e == cudaSuccess) __builtin_memcpy(reinterpret_cast<char*>(&symbol) + offset, src, n);
  return e;
}
template <class T>
cudaError_t cudaMemcpyFromSymbol(void* dst, const T& symbol, size_t n, size_t offset = 0,
                                 cudaMemcpyKind kind = cudaMemcpyDeviceToHost) {
  if (offset + n > sizeof(T)) return cudaErrorInvalidValue;
  cudaError_t e = cudaDeviceSynchronize();
  if (e == cudaSuccess) __builtin_memcpy(dst, reinterpret_cast<const char*>(&symbol) + offset, n);
  return e;
}

// ---- emulator control and the launch path (namespace ds4::emu) ------------------------------------
namespace ds4::emu {

/// Emulated device count (default 1 or env DS4_CUDA_EMU_DEVICES). Call before any other API use
/// (or after reset()); devices already created keep their state.
void set_device_count(int n);
/// VRAM of device d in bytes (default 11 GiB, env DS4_CUDA_EMU_VRAM_MB): the cudaMalloc budget
/// and cudaMemGetInfo's total. Only before the device's first allocation.
void set_vram_bytes(int d, size_t bytes);
/// Reseeds the stream interleaving / block order generator (env DS4_CUDA_EMU_SEED, default 1).
void set_seed(uint64_t seed);
/// Frees every allocation, stream and event of every device and forgets the configuration
/// (tests only; nothing may be in flight).
void reset();
/// Counters of the work the emulator executed (for tests and benchmarks).
struct Stats {
  uint64_t kernels = 0, blocks = 0, threads = 0, copies = 0, copy_bytes = 0, memsets = 0, host_fns = 0;
  uint64_t captured_nodes = 0;  ///< work items recorded into graphs by stream capture (not run then)
  uint64_t graph_launches = 0;  ///< cudaGraphLaunch calls that queued a graph's nodes
};
Stats stats();

/// One kernel launch as the scheduler sees it: its grid, block, dynamic shared memory and the
/// type-erased call of the kernel body with its converted arguments.
struct KernelLaunch {
  const char* name = "";
  const void* func = nullptr;
  dim3 grid, block;
  size_t smem = 0;
  cudaStream_t stream = nullptr;
  std::shared_ptr<void> args;       // the kernel's parameters (a std::tuple)
  void (*invoke)(void* args) = nullptr;  // calls the kernel body with *args
};
/// Validates `k` against sm_75's limits (sets the last error, as a failed launch does) and
/// enqueues it on its stream.
void enqueue_kernel(KernelLaunch&& k);

template <class Tuple, class F>
struct KernelInvoker {
  static void call(void* p) {
    auto* t = static_cast<std::pair<F, Tuple>*>(p);
    std::apply(t->first, t->second);
  }
};

/// DS4_LAUNCH's emulated form: converts the arguments to the kernel's parameter types (CUDA
/// copies them at the launch) and enqueues the grid.
template <class... P, class... A>
void launch(void (*kernel)(P...), const char* name, dim3 grid, dim3 block, size_t smem, cudaStream_t stream,
            A&&... args) {
  static_assert(sizeof...(P) == sizeof...(A), "DS4_LAUNCH: wrong number of kernel arguments");
  using Tuple = std::tuple<std::remove_cvref_t<P>...>;
  using F = void (*)(P...);
  auto holder = std::make_shared<std::pair<F, Tuple>>(kernel, Tuple(static_cast<std::remove_cvref_t<P>>(args)...));
  KernelLaunch k;
  k.name = name;
  k.func = reinterpret_cast<const void*>(kernel);
  k.grid = grid;
  k.block = block;
  k.smem = smem;
  k.stream = stream;
  k.invoke = &KernelInvoker<Tuple, F>::call;
  k.args = std::move(holder);
  enqueue_kernel(std::move(k));
}

/// This block's dynamic shared memory (DS4_DYN_SHARED); aborts outside a kernel.
void* dynamic_shared();

/// Runs block `block_idx` of a `grid` x `block` launch of body() right now on this OS thread,
/// outside any stream and without launch checks (device memory is accessible meanwhile): for
/// host tests that call a kernel body block by block. smem: dynamic shared memory bytes.
void run_block_now(dim3 grid, uint3 block_idx, dim3 block, size_t smem, void (*invoke)(void*), void* body);
template <class F>
void run_block_now(dim3 grid, uint3 block_idx, dim3 block, size_t smem, F&& body) {
  using B = std::remove_reference_t<F>;
  run_block_now(grid, block_idx, block, smem, [](void* p) { (*static_cast<B*>(p))(); },
                const_cast<void*>(static_cast<const void*>(&body)));
}

}  // namespace ds4::emu
