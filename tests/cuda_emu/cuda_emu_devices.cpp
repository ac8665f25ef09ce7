// tests/cuda_emu/cuda_emu_devices.cpp — the emulated CUDA runtime's errors (per host thread),
// devices (count, current device, RTX 2080 Ti-like sm_75 properties, memory info, peers) and
// kernel launches: DS4_LAUNCH's checks of sm_75's limits (block and grid dimensions, dynamic
// shared memory up to the cudaFuncSetAttribute opt-in) before the grid is queued.
#include <cstdio>
#include <cstring>
#include <numeric>

#include "tests/cuda_emu/cuda_emu_state.h"

namespace ds4::emu {
using namespace rt;

void enqueue_kernel(KernelLaunch&& k) {
  if (t_in_host_fn) {
    set_error(cudaErrorNotPermitted);
    return;
  }
  State& s = st();
  std::unique_lock<std::mutex> lk(s.m);
  Stream* q = resolve_stream(k.stream);
  if (!q || q->device != t_device) {
    set_error(cudaErrorInvalidResourceHandle);
    return;
  }
  const dim3 b = k.block, g = k.grid;
  // sm_75 limits (CUDA C++ Programming Guide, "Compute Capabilities" table).
  if (b.x == 0 || b.y == 0 || b.z == 0 || b.x > 1024 || b.y > 1024 || b.z > 64 ||
      uint64_t(b.x) * b.y * b.z > 1024 || g.x == 0 || g.y == 0 || g.z == 0 || g.x > 0x7FFFFFFFu ||
      g.y > 65535 || g.z > 65535) {
    set_error(cudaErrorInvalidConfiguration);
    return;
  }
  auto lim = s.max_dyn_smem.find(k.func);
  const size_t smem_limit = lim == s.max_dyn_smem.end() ? kSmemDefault : size_t(lim->second);
  if (k.smem > smem_limit) {
    set_error(cudaErrorInvalidValue);
    return;
  }
  auto it = make_item(Item::kKernel);
  it->total_blocks = uint64_t(g.x) * g.y * g.z;
  it->perm_c = s.rng() % it->total_blocks;
  do it->perm_a = 1 + s.rng() % it->total_blocks;
  while (std::gcd(it->perm_a, it->total_blocks) != 1);
  it->k = std::move(k);
  enqueue(q, std::move(it));
}

}  // namespace ds4::emu

using namespace ds4::emu;
using namespace ds4::emu::rt;

namespace {
cudaError_t check_device(State& s, int d) {
  return d >= 0 && d < s.ndev ? cudaSuccess : cudaErrorInvalidDevice;
}
}  // namespace

// ---- errors and devices ---------------------------------------------------------------------------------
cudaError_t cudaGetLastError() {
  const cudaError_t e = t_last_error;
  t_last_error = cudaSuccess;
  return e;
}
cudaError_t cudaPeekAtLastError() { return t_last_error; }

cudaError_t cudaGetDeviceCount(int* n) {
  if (!n) return set_error(cudaErrorInvalidValue);
  *n = st().ndev;
  return cudaSuccess;
}
cudaError_t cudaSetDevice(int d) {
  if (d < 0 || d >= st().ndev) return set_error(cudaErrorInvalidDevice);
  t_device = d;
  return cudaSuccess;
}
cudaError_t cudaGetDevice(int* d) {
  if (!d) return set_error(cudaErrorInvalidValue);
  *d = t_device;
  return cudaSuccess;
}

cudaError_t cudaGetDeviceProperties(cudaDeviceProp* p, int d) {
  if (!p) return set_error(cudaErrorInvalidValue);
  State& s = st();
  if (check_device(s, d) != cudaSuccess) return set_error(cudaErrorInvalidDevice);
  std::memset(p, 0, sizeof *p);
  std::snprintf(p->name, sizeof p->name, "ds4 emulated GPU %d (sm_75, RTX 2080 Ti-like)", d);
  p->totalGlobalMem = s.dev[size_t(d)].vram;
  p->sharedMemPerBlock = kSmemDefault;
  p->sharedMemPerBlockOptin = kSmemOptin;
  p->sharedMemPerMultiprocessor = 64 * 1024;
  p->regsPerBlock = 65536;
  p->regsPerMultiprocessor = 65536;
  p->warpSize = 32;
  p->memPitch = 2147483647;
  p->maxThreadsPerBlock = 1024;
  p->maxThreadsDim[0] = 1024;
  p->maxThreadsDim[1] = 1024;
  p->maxThreadsDim[2] = 64;
  p->maxGridSize[0] = 2147483647;
  p->maxGridSize[1] = 65535;
  p->maxGridSize[2] = 65535;
  p->clockRate = 1545000;
  p->totalConstMem = 65536;
  p->major = 7;
  p->minor = 5;
  p->textureAlignment = 512;
  p->deviceOverlap = 1;
  p->multiProcessorCount = 68;
  p->canMapHostMemory = 1;
  p->concurrentKernels = 1;
  p->pciBusID = d + 1;
  p->asyncEngineCount = 3;
  p->unifiedAddressing = 1;
  p->memoryClockRate = 7000000;
  p->memoryBusWidth = 352;
  p->l2CacheSize = 5767168;
  p->maxThreadsPerMultiProcessor = 1024;
  p->managedMemory = 1;
  return cudaSuccess;
}

cudaError_t cudaDeviceSynchronize() {
  DS4_EMU_ENTER();
  dev_mem(s, t_device);
  const int d = t_device;
  bool capturing = false;  // waiting for a capturing stream conflicts with its capture
  for (Stream* q : s.dev[size_t(d)].streams)
    if (q->capture) {
      invalidate_capture(q, cudaErrorStreamCaptureUnsupported);
      capturing = true;
    }
  if (capturing) return cudaErrorStreamCaptureUnsupported;
  if (cudaError_t e = unsafe_call(s); e != cudaSuccess) return set_error(e);
  drive(lk, [&] { return device_idle(s, d); });
  return cudaSuccess;
}
cudaError_t cudaDeviceReset() { return cudaDeviceSynchronize(); }

cudaError_t cudaMemGetInfo(size_t* free_bytes, size_t* total_bytes) {
  DS4_EMU_ENTER();
  if (!free_bytes || !total_bytes) return set_error(cudaErrorInvalidValue);
  DeviceMem& m = dev_mem(s, t_device);
  *total_bytes = m.vram;
  *free_bytes = m.vram - m.used;
  return cudaSuccess;
}
cudaError_t cudaDriverGetVersion(int* v) {
  if (!v) return set_error(cudaErrorInvalidValue);
  *v = 12040;
  return cudaSuccess;
}
cudaError_t cudaRuntimeGetVersion(int* v) { return cudaDriverGetVersion(v); }
cudaError_t cudaDeviceCanAccessPeer(int* can, int d, int peer) {
  if (!can || d < 0 || peer < 0 || d >= st().ndev || peer >= st().ndev) return set_error(cudaErrorInvalidDevice);
  *can = d != peer;
  return cudaSuccess;
}
cudaError_t cudaDeviceEnablePeerAccess(int peer, unsigned) {
  if (peer < 0 || peer >= st().ndev || peer == t_device) return set_error(cudaErrorInvalidDevice);
  return cudaSuccess;
}

cudaError_t cudaFuncSetAttribute(const void* func, cudaFuncAttribute attr, int value) {
  DS4_EMU_ENTER();
  if (!func) return set_error(cudaErrorInvalidDeviceFunction);
  if (attr == cudaFuncAttributeMaxDynamicSharedMemorySize) {
    if (value < 0 || size_t(value) > kSmemOptin) return set_error(cudaErrorInvalidValue);
    s.max_dyn_smem[func] = value;
    return cudaSuccess;
  }
  if (attr == cudaFuncAttributePreferredSharedMemoryCarveout) return cudaSuccess;
  return set_error(cudaErrorInvalidValue);
}
