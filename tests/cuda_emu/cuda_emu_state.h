// tests/cuda_emu/cuda_emu_state.h — the emulated CUDA runtime's state (device memory, pinned
// ranges, streams, events) and the helpers its files share. Internal to the emulator. The runtime:
//   cuda_emu_scheduler.cpp  state, the lazy seeded scheduler, the internal interface, control;
//   cuda_emu_memory.cpp     allocation, pinned memory, copies, memsets;
//   cuda_emu_streams.cpp    streams, events, host functions;
//   cuda_emu_devices.cpp    errors, devices and their properties, kernel launches (sm_75 limits);
//   cuda_emu_graphs.cpp     stream capture and graphs.
//
// Semantics followed (CUDA Runtime API, "API synchronization behavior", "Stream synchronization
// behavior"):
// - Device memory of device d is one mmap'd region, PROT_NONE except while the emulator executes
//   stream work, so a host dereference of a device pointer faults. cudaMalloc does not zero: new
//   allocations are filled with 0xFFA5A5A5 words (a NaN as float).
// - Stream work runs lazily: only when the host waits (synchronize, blocking copies, queries)
//   does the emulator execute it, choosing among the runnable stream heads at random (seeded,
//   DS4_CUDA_EMU_SEED) and running kernels a random number of blocks at a time, in a random
//   block order. Only stream order, events, stream waits, the legacy default stream's implicit
//   synchronisation and host waits order work, as on a GPU.
// - The legacy default stream is its own queue, ordered with blocking streams only. Each of its
//   items gets a random start delay at enqueue (half of them none, the others 1 to
//   DS4_CUDA_EMU_LEGACY_DELAY = 4096 scheduler steps, log-uniform; 0 turns delays off): it runs
//   only after that many steps of other work, or when nothing else can run. So a plain
//   cudaMemset / cudaMemcpy whose result a cudaStreamNonBlocking stream reads without an event
//   wait lands after the reader under some seeds, however much work is queued before the reader
//   (a GPU gives no ordering there either).
// - Async copies: from pageable host memory the source is copied at the call (staged), to
//   pageable host memory the call returns after the copy is done; with pinned memory (cudaMallocHost,
//   cudaHostRegister) both directions are fully asynchronous. cudaMemcpy: device-to-device is
//   asynchronous; from pageable memory it waits for the legacy stream's earlier work and returns
//   with the source staged; otherwise it returns when the copy is done. cudaMemset is
//   asynchronous (legacy stream) unless the target is pinned host memory.
// - cudaFree / cudaFreeHost / cudaHostUnregister synchronise the device first.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <set>
#include <vector>

#include "tests/cuda_emu/cuda_emu_internal.h"

/// A stream handle: the emulated stream is its first member (handle_of casts back).
struct CUstream_st {
  ds4::emu::Stream s;
};
struct CUevent_st {
  bool timing = true;
  int device = 0;
  std::shared_ptr<ds4::emu::Item> rec;  // the latest record (null: never recorded)
  std::weak_ptr<ds4::emu::Capture> captured;  // live while its last record is inside an ongoing capture
};

namespace ds4::emu::rt {

inline constexpr size_t kAlign = 512;              // cudaMalloc alignment (at least 256 on real GPUs)
inline constexpr size_t kSmemDefault = 48 * 1024;  // sm_75 default per-block shared memory
inline constexpr size_t kSmemOptin = 64 * 1024;    // sm_75 cudaFuncAttributeMaxDynamicSharedMemorySize max
inline constexpr uint32_t kGarbage = 0xFFA5A5A5u;  // uninitialised device memory (NaN as float)

/// The environment variable `name` as an unsigned integer, `dflt` when unset or empty.
size_t env_size(const char* name, size_t dflt);

/// One emulated device's memory and streams.
struct DeviceMem {
  size_t vram = 0;
  char* base = nullptr;   // reserved PROT_NONE region of `vram` bytes (mapped on first use)
  size_t hwm = 0;         // bytes from base ever allocated (page rounded): what gets unprotected
  std::map<size_t, size_t> free_ranges;  // offset -> bytes
  std::map<size_t, size_t> allocs;       // offset -> bytes (rounded)
  std::map<size_t, size_t> requested;    // offset -> bytes asked for (range checks)
  size_t used = 0;
  Stream* legacy = nullptr;
  std::vector<Stream*> streams;  // every live stream incl. legacy and destroyed-but-busy ones
};

/// The whole emulator state; one instance (st()), guarded by State::m.
struct State {
  std::mutex m;
  std::condition_variable cv;
  int ndev = 0;
  std::vector<DeviceMem> dev;
  std::map<uintptr_t, std::pair<size_t, bool>> pinned;  // start -> (bytes, from cudaMallocHost)
  std::set<const CUstream_st*> live_streams;
  std::set<const CUevent_st*> live_events;
  std::map<const void*, int> max_dyn_smem;
  std::set<ds4::emu::Capture*> captures;  // ongoing stream captures (cuda_emu_graphs.cpp)
  std::mt19937_64 rng{1};
  uint64_t steps = 0;              // scheduler steps executed (Item::not_before counts these)
  uint64_t legacy_delay_max = 4096;  // DS4_CUDA_EMU_LEGACY_DELAY; 0: legacy items are never delayed
  bool unprotected = false;
  size_t fill_cap = 256u << 20;
  bool no_protect = false;  // DS4_CUDA_EMU_NO_PROTECT=1: device memory stays host-accessible (speed)
  Stats stats;
};

/// The emulator state (made on first use from the DS4_CUDA_EMU_* environment; never destroyed).
State& st();

extern thread_local int t_device;               // the calling host thread's current device
extern thread_local cudaError_t t_last_error;   // its last error (cudaGetLastError)
extern thread_local bool t_in_host_fn;          // true while it runs a cudaLaunchHostFunc callback

/// The host page size in bytes.
size_t page();
/// A new stream of device d (registered in State::live_streams). Caller holds the lock.
Stream* new_stream(State& s, int d, bool blocking, bool legacy);
/// Device d's memory, its region reserved and its legacy stream made on first use. Caller holds the lock.
DeviceMem& dev_mem(State& s, int d);
/// Device memory readable and writable (while the emulator runs work) or not (host code).
void set_access(State& s, bool rw);
/// The handle of stream s (s is CUstream_st's first member).
inline CUstream_st* handle_of(Stream* s) { return reinterpret_cast<CUstream_st*>(s); }
/// True when every dependency of `it` is done.
bool deps_done(const Item& it);

/// Kind of host / device memory at p.
enum class Mem { kPageable, kPinned, kDevice, kBadDevice };
/// Kind of [p, p+n): device memory inside one allocation's requested bytes, bad device memory
/// (outside one), pinned host memory, or pageable. Caller holds the lock.
Mem classify(State& s, const void* p, size_t n);

/// Pops finished heads; runs one step of a random runnable head (a legacy-stream head still in its
/// start delay only when no other head is runnable). False when nothing is runnable.
bool step(State& s);
/// True when every item of stream q is done.
bool stream_idle(const Stream* q);
/// True when every stream of device d is idle.
bool device_idle(State& s, int d);
/// A new item of kind k.
std::shared_ptr<Item> make_item(Item::Kind k);

// ---- stream capture (cuda_emu_graphs.cpp) ------------------------------------------------------
/// Records `it` (about to be enqueued on capturing stream q) as a graph node. Caller holds the lock.
void capture_item(Stream* q, std::shared_ptr<Item> it);
/// The check of a "potentially unsafe" call (allocation, free, synchronous copy or memset, pinning,
/// a wait for a stream that is not capturing) during stream capture (CUDA Runtime API,
/// cudaThreadExchangeStreamCaptureMode): cudaErrorStreamCaptureUnsupported when the calling
/// thread has a capture not begun in cudaStreamCaptureModeRelaxed (that capture is invalidated)
/// or another thread has one begun in cudaStreamCaptureModeGlobal; else cudaSuccess.
cudaError_t unsafe_call(State& s);
/// Ends q's capture as failed (a call conflicted with it): EndCapture returns
/// cudaErrorStreamCaptureInvalidated. Returns `e` (the error of the conflicting call).
cudaError_t invalidate_capture(Stream* q, cudaError_t e);

}  // namespace ds4::emu::rt

/// Opens a CUDA API call: refuses calls from inside a host function, then takes the emulator lock
/// (`s` = the state, `lk` = the lock).
#define DS4_EMU_ENTER()                                     \
  if (t_in_host_fn) return set_error(cudaErrorNotPermitted); \
  State& s = st();                                          \
  std::unique_lock<std::mutex> lk(s.m)
