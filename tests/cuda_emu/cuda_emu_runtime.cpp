// tests/cuda_emu/cuda_emu_runtime.cpp — the emulated CUDA runtime: device memory, pinned host
// memory, streams, events, host functions, launch checks and the lazy, seeded scheduler.
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
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <numeric>
#include <random>
#include <set>

#include "tests/cuda_emu/cuda_emu_fiber.h"
#include "tests/cuda_emu/cuda_emu_internal.h"

struct CUstream_st {
  ds4::emu::Stream s;
};
struct CUevent_st {
  bool timing = true;
  int device = 0;
  std::shared_ptr<ds4::emu::Item> rec;  // the latest record (null: never recorded)
};

namespace ds4::emu {
namespace {

constexpr size_t kAlign = 512;                       // cudaMalloc alignment (at least 256 on real GPUs)
constexpr size_t kSmemDefault = 48 * 1024;           // sm_75 default per-block shared memory
constexpr size_t kSmemOptin = 64 * 1024;             // sm_75 cudaFuncAttributeMaxDynamicSharedMemorySize max
constexpr uint32_t kGarbage = 0xFFA5A5A5u;           // uninitialised device memory (NaN as float)

size_t env_size(const char* name, size_t dflt) {
  const char* e = std::getenv(name);
  return e && *e ? size_t(std::strtoull(e, nullptr, 10)) : dflt;
}

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

struct State {
  std::mutex m;
  std::condition_variable cv;
  int ndev = 0;
  std::vector<DeviceMem> dev;
  std::map<uintptr_t, std::pair<size_t, bool>> pinned;  // start -> (bytes, from cudaMallocHost)
  std::set<const CUstream_st*> live_streams;
  std::set<const CUevent_st*> live_events;
  std::map<const void*, int> max_dyn_smem;
  std::mt19937_64 rng{1};
  uint64_t steps = 0;              // scheduler steps executed (Item::not_before counts these)
  uint64_t legacy_delay_max = 4096;  // DS4_CUDA_EMU_LEGACY_DELAY; 0: legacy items are never delayed
  bool unprotected = false;
  size_t fill_cap = 256u << 20;
  bool no_protect = false;  // DS4_CUDA_EMU_NO_PROTECT=1: device memory stays host-accessible (speed)
  Stats stats;
};

State& st() {
  static State* s = [] {
    auto* p = new State();  // never destroyed: work may be queued from static destructors
    p->ndev = int(std::max<size_t>(1, env_size("DS4_CUDA_EMU_DEVICES", 1)));
    p->dev.resize(size_t(p->ndev));
    for (auto& d : p->dev) d.vram = env_size("DS4_CUDA_EMU_VRAM_MB", 11264) << 20;
    p->rng.seed(env_size("DS4_CUDA_EMU_SEED", 1));
    p->fill_cap = env_size("DS4_CUDA_EMU_FILL_MB", 256) << 20;
    p->no_protect = env_size("DS4_CUDA_EMU_NO_PROTECT", 0) != 0;
    p->legacy_delay_max = env_size("DS4_CUDA_EMU_LEGACY_DELAY", 4096);
    return p;
  }();
  return *s;
}

thread_local int t_device = 0;
thread_local cudaError_t t_last_error = cudaSuccess;
thread_local bool t_in_host_fn = false;

size_t page() {
  static const size_t p = size_t(sysconf(_SC_PAGESIZE));
  return p;
}

Stream* new_stream(State& s, int d, bool blocking, bool legacy);

DeviceMem& dev_mem(State& s, int d) {
  DeviceMem& m = s.dev[size_t(d)];
  if (!m.base) {
    void* p = mmap(nullptr, m.vram, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) {
      std::perror("cuda_emu: reserving device memory");
      std::abort();
    }
    m.base = static_cast<char*>(p);
    m.free_ranges = {{0, m.vram}};
  }
  if (!m.legacy) m.legacy = new_stream(s, d, true, true);
  return m;
}

/// Device memory readable and writable (while the emulator runs work) or not (host code).
void set_access(State& s, bool rw) {
  if (s.unprotected == rw || (!rw && s.no_protect)) return;
  for (auto& d : s.dev)
    if (d.base && d.hwm) mprotect(d.base, d.hwm, rw ? PROT_READ | PROT_WRITE : PROT_NONE);
  s.unprotected = rw;
}

Stream* new_stream(State& s, int d, bool blocking, bool legacy) {
  auto* h = new CUstream_st();
  h->s.device = d;
  h->s.blocking = blocking;
  h->s.legacy = legacy;
  s.dev[size_t(d)].streams.push_back(&h->s);
  s.live_streams.insert(h);
  return &h->s;
}
CUstream_st* handle_of(Stream* s) { return reinterpret_cast<CUstream_st*>(s); }  // s is CUstream_st's first member

bool deps_done(const Item& it) {
  for (const auto& d : it.deps)
    if (!d->done) return false;
  return true;
}

/// Kind of host / device memory at p.
enum class Mem { kPageable, kPinned, kDevice, kBadDevice };
Mem classify(State& s, const void* p, size_t n) {
  const auto a = reinterpret_cast<uintptr_t>(p);
  for (auto& d : s.dev)
    if (d.base && a >= uintptr_t(d.base) && a < uintptr_t(d.base) + d.vram) {
      const size_t off = a - uintptr_t(d.base);
      auto it = d.allocs.upper_bound(off);
      if (it == d.allocs.begin()) return Mem::kBadDevice;
      --it;
      return off + n <= it->first + d.requested[it->first] ? Mem::kDevice : Mem::kBadDevice;
    }
  auto it = s.pinned.upper_bound(a);
  if (it != s.pinned.begin()) {
    --it;
    if (a + n <= it->first + it->second.first) return Mem::kPinned;
  }
  return Mem::kPageable;
}

void fill_garbage(void* p, size_t n) {
  auto* c = static_cast<unsigned char*>(p);
  size_t i = 0;
  for (; i + 4 <= n; i += 4) std::memcpy(c + i, &kGarbage, 4);
  for (; i < n; ++i) c[i] = 0xA5;
}

/// Executes (part of) a runnable head item. Caller holds the lock.
void execute(State& s, Item& it) {
  switch (it.kind) {
    case Item::kKernel: {
      set_access(s, true);
      const uint64_t left = it.total_blocks - it.next_block;
      const uint64_t k = 1 + s.rng() % left;
      const dim3 g = it.k.grid;
      for (uint64_t j = it.next_block; j < it.next_block + k; ++j) {
        const uint64_t lin = uint64_t((unsigned __int128)(it.perm_a) * j % it.total_blocks + it.perm_c) % it.total_blocks;
        const uint3 bi{unsigned(lin % g.x), unsigned(lin / g.x % g.y), unsigned(lin / (uint64_t(g.x) * g.y))};
        run_block(it.k.name, bi, g, it.k.block, block_dynamic_shared(it.k.smem), it.k.invoke, it.k.args.get(),
                  s.rng() | 1);
      }
      it.next_block += k;
      s.stats.blocks += k;
      s.stats.threads += k * it.k.block.x * it.k.block.y * it.k.block.z;
      if (it.next_block == it.total_blocks) {
        it.done = true;
        ++s.stats.kernels;
      }
      return;
    }
    case Item::kCopy:
      set_access(s, true);
      std::memmove(it.dst, it.snapshot.empty() ? it.src : it.snapshot.data(), it.n);
      ++s.stats.copies;
      s.stats.copy_bytes += it.n;
      break;
    case Item::kCopy2D: {
      set_access(s, true);
      const auto* src = it.snapshot.empty() ? static_cast<const unsigned char*>(it.src) : it.snapshot.data();
      const size_t sp = it.snapshot.empty() ? it.spitch : it.width;
      for (size_t r = 0; r < it.height; ++r)
        std::memmove(static_cast<unsigned char*>(it.dst) + r * it.dpitch, src + r * sp, it.width);
      ++s.stats.copies;
      s.stats.copy_bytes += it.width * it.height;
      break;
    }
    case Item::kMemset:
      set_access(s, true);
      std::memset(it.dst, it.value, it.n);
      ++s.stats.memsets;
      break;
    case Item::kMarker:
      it.when = std::chrono::steady_clock::now();
      break;
    case Item::kHostFn:
      set_access(s, false);  // host code: device memory faults again
      t_in_host_fn = true;
      it.fn(it.user);
      t_in_host_fn = false;
      ++s.stats.host_fns;
      break;
    case Item::kCustom:
      set_access(s, true);
      it.run_fn();  // may mark other streams' items done too (collectives)
      break;
  }
  it.done = true;
}

/// Pops finished heads; runs one step of a random runnable head (a legacy-stream head still in its
/// start delay only when no other head is runnable). False when nothing is runnable.
bool step(State& s) {
  std::vector<Stream*> ready, delayed;
  bool popped = false;
  for (auto& d : s.dev)
    for (Stream* q : d.streams) {
      while (!q->q.empty() && q->q.front()->done) {
        q->q.pop_front();
        popped = true;
      }
      if (q->q.empty()) continue;
      Item& h = *q->q.front();
      if (deps_done(h) && (!h.ready_fn || h.ready_fn())) (h.not_before > s.steps ? delayed : ready).push_back(q);
    }
  if (ready.empty()) ready.swap(delayed);  // nothing else can run: the delayed legacy work runs now
  // Streams destroyed by the host are freed once they are empty.
  for (auto& d : s.dev)
    std::erase_if(d.streams, [&](Stream* q) {
      if (!q->destroyed || !q->q.empty()) return false;
      s.live_streams.erase(handle_of(q));
      delete handle_of(q);
      return true;
    });
  if (ready.empty()) {
    if (popped) s.cv.notify_all();
    return popped;
  }
  Stream* q = ready[size_t(s.rng() % ready.size())];
  std::shared_ptr<Item> h = q->q.front();
  execute(s, *h);
  ++s.steps;
  if (h->done && !q->q.empty() && q->q.front() == h) q->q.pop_front();
  s.cv.notify_all();
  return true;
}

[[noreturn]] void report_deadlock(State& s) {
  std::fprintf(stderr, "cuda_emu: no stream work can run and the host waits for it (deadlock):\n");
  for (size_t d = 0; d < s.dev.size(); ++d)
    for (Stream* q : s.dev[d].streams)
      if (!q->q.empty())
        std::fprintf(stderr, "  device %zu %s stream %p: %zu items, head kind %d waits on %zu deps%s\n", d,
                     q->legacy ? "legacy" : "", static_cast<void*>(q), q->q.size(), int(q->q.front()->kind),
                     q->q.front()->deps.size(), q->q.front()->ready_fn ? " (collective: other ranks missing?)" : "");
  std::abort();
}

bool stream_idle(const Stream* q) {
  for (const auto& it : q->q)
    if (!it->done) return false;
  return true;
}
bool device_idle(State& s, int d) {
  for (Stream* q : s.dev[size_t(d)].streams)
    if (!stream_idle(q)) return false;
  return true;
}

#define DS4_EMU_ENTER()                                     \
  if (t_in_host_fn) return set_error(cudaErrorNotPermitted); \
  State& s = st();                                          \
  std::unique_lock<std::mutex> lk(s.m)

cudaError_t check_device(State& s, int d) {
  return d >= 0 && d < s.ndev ? cudaSuccess : cudaErrorInvalidDevice;
}

std::shared_ptr<Item> make_item(Item::Kind k) {
  auto it = std::make_shared<Item>();
  it->kind = k;
  return it;
}

/// Validates a copy's memory kinds against `kind`; fills src/dst classes.
cudaError_t check_copy(State& s, void* dst, const void* src, size_t n, cudaMemcpyKind kind, Mem* dk, Mem* sk) {
  if (!dst || !src) return cudaErrorInvalidValue;
  *dk = classify(s, dst, n);
  *sk = classify(s, src, n);
  if (*dk == Mem::kBadDevice || *sk == Mem::kBadDevice) return cudaErrorInvalidValue;
  const bool dd = *dk == Mem::kDevice, sd = *sk == Mem::kDevice;
  switch (kind) {
    case cudaMemcpyHostToHost: return !dd && !sd ? cudaSuccess : cudaErrorInvalidValue;
    case cudaMemcpyHostToDevice: return dd && !sd ? cudaSuccess : cudaErrorInvalidValue;
    case cudaMemcpyDeviceToHost: return !dd && sd ? cudaSuccess : cudaErrorInvalidValue;
    case cudaMemcpyDeviceToDevice: return dd && sd ? cudaSuccess : cudaErrorInvalidValue;
    case cudaMemcpyDefault: return cudaSuccess;
  }
  return cudaErrorInvalidMemcpyDirection;
}

/// The shared body of the copy calls. sync = cudaMemcpy (legacy stream, blocking rules).
cudaError_t copy(State& s, std::unique_lock<std::mutex>& lk, std::shared_ptr<Item> it, size_t src_bytes,
                 Mem dk, Mem sk, Stream* q, bool sync) {
  if (sk == Mem::kPageable) {  // staged at the call
    it->snapshot.resize(src_bytes);
    if (it->kind == Item::kCopy2D) {
      for (size_t r = 0; r < it->height; ++r)
        std::memcpy(it->snapshot.data() + r * it->width, static_cast<const unsigned char*>(it->src) + r * it->spitch,
                    it->width);
    } else {
      std::memcpy(it->snapshot.data(), it->src, src_bytes);
    }
  }
  const std::shared_ptr<Item> before = q->tail;
  enqueue(q, it);
  const bool to_pageable = dk == Mem::kPageable;
  bool wait_done;
  if (sync)
    wait_done = !(dk == Mem::kDevice && sk == Mem::kDevice) && !(dk == Mem::kDevice && sk == Mem::kPageable);
  else
    wait_done = to_pageable;
  if (wait_done) {
    drive(lk, [&] { return it->done; });
  } else if (sync && sk == Mem::kPageable) {
    drive(lk, [&] { return !before || before->done; });
  }
  return cudaSuccess;
}

}  // namespace

// ---- internal interface ------------------------------------------------------------------------------
std::mutex& lock() { return st().m; }
int current_device() { return t_device; }
int device_count() { return st().ndev; }
cudaError_t set_error(cudaError_t e) {
  if (e != cudaSuccess && e != cudaErrorNotReady) t_last_error = e;
  return e;
}

Stream* resolve_stream(cudaStream_t h) {
  State& s = st();
  if (h == nullptr || h == cudaStreamLegacy || h == cudaStreamPerThread) return dev_mem(s, t_device).legacy;
  if (!s.live_streams.count(h) || h->s.destroyed) return nullptr;
  return &h->s;
}

void enqueue(Stream* q, std::shared_ptr<Item> it) {
  State& s = st();
  it->stream = q;
  if (q->legacy && s.legacy_delay_max) {
    // Half the items start at once; the others after 1..legacy_delay_max steps, log-uniform (short
    // and long lags equally likely), so both "legacy work runs late" and "early" occur.
    const uint64_t r = s.rng();
    if (r & 1) {
      const uint64_t span = uint64_t(1) << (1 + (r >> 1) % 12);  // 2 .. 4096
      it->not_before = s.steps + 1 + (r >> 8) % std::min<uint64_t>(span, s.legacy_delay_max);
    }
  }
  if (q->legacy) {
    for (Stream* o : s.dev[size_t(q->device)].streams)
      if (o != q && o->blocking && o->tail && !o->tail->done) it->deps.push_back(o->tail);
  } else if (q->blocking) {
    Stream* l = s.dev[size_t(q->device)].legacy;
    if (l && l->tail && !l->tail->done) it->deps.push_back(l->tail);
  }
  q->q.push_back(it);
  q->tail = it;
  s.cv.notify_all();
}

bool head_and_deps_done(const Item& it) {
  return it.stream && !it.stream->q.empty() && it.stream->q.front().get() == &it && deps_done(it);
}

void drive(std::unique_lock<std::mutex>& lk, const std::function<bool()>& pred) {
  State& s = st();
  const auto limit = std::chrono::seconds(env_size("DS4_CUDA_EMU_DEADLOCK_S", 60));
  auto idle_since = std::chrono::steady_clock::now();
  while (!pred()) {
    if (step(s)) {
      idle_since = std::chrono::steady_clock::now();
      continue;
    }
    set_access(s, false);
    if (pred()) break;
    s.cv.wait_for(lk, std::chrono::milliseconds(20));
    if (std::chrono::steady_clock::now() - idle_since > limit) report_deadlock(s);
  }
  set_access(s, false);
}

int device_of_range(const void* p, size_t n) {
  State& s = st();
  if (classify(s, p, n) != Mem::kDevice) return -1;
  const auto a = reinterpret_cast<uintptr_t>(p);
  for (size_t d = 0; d < s.dev.size(); ++d)
    if (s.dev[d].base && a >= uintptr_t(s.dev[d].base) && a < uintptr_t(s.dev[d].base) + s.dev[d].vram) return int(d);
  return -1;
}

// ---- control -------------------------------------------------------------------------------------------
void set_device_count(int n) {
  State& s = st();
  std::lock_guard<std::mutex> g(s.m);
  if (n < 1) n = 1;
  const size_t vram = s.dev.empty() ? (env_size("DS4_CUDA_EMU_VRAM_MB", 11264) << 20) : s.dev[0].vram;
  while (int(s.dev.size()) < n) {
    s.dev.emplace_back();
    s.dev.back().vram = vram;
  }
  s.ndev = n;
}

void set_vram_bytes(int d, size_t bytes) {
  State& s = st();
  std::lock_guard<std::mutex> g(s.m);
  if (d < 0 || d >= int(s.dev.size()) || s.dev[size_t(d)].base) {
    std::fprintf(stderr, "cuda_emu: set_vram_bytes(%d): no such device or memory already in use\n", d);
    std::abort();
  }
  s.dev[size_t(d)].vram = (bytes + page() - 1) / page() * page();
}

void set_seed(uint64_t seed) {
  State& s = st();
  std::lock_guard<std::mutex> g(s.m);
  s.rng.seed(seed);
}

void reset() {
  State& s = st();
  std::lock_guard<std::mutex> g(s.m);
  for (auto& d : s.dev) {
    for (Stream* q : d.streams) delete handle_of(q);
    if (d.base) munmap(d.base, d.vram);
  }
  for (auto& [a, info] : s.pinned)
    if (info.second) std::free(reinterpret_cast<void*>(a));
  s.pinned.clear();
  s.live_streams.clear();
  for (const CUevent_st* e : s.live_events) delete e;
  s.live_events.clear();
  s.max_dyn_smem.clear();
  s.dev.assign(1, DeviceMem{});
  s.dev[0].vram = env_size("DS4_CUDA_EMU_VRAM_MB", 11264) << 20;
  s.ndev = 1;
  s.unprotected = false;
  s.rng.seed(env_size("DS4_CUDA_EMU_SEED", 1));
  s.stats = Stats{};
  t_device = 0;
  t_last_error = cudaSuccess;
}

Stats stats() {
  State& s = st();
  std::lock_guard<std::mutex> g(s.m);
  return s.stats;
}

void run_block_now(dim3 grid, uint3 block_idx, dim3 block, size_t smem, void (*invoke)(void*), void* body) {
  State& s = st();
  std::unique_lock<std::mutex> lk(s.m);
  set_access(s, true);
  run_block("run_block_now", block_idx, grid, block, block_dynamic_shared(smem), invoke, body, s.rng() | 1);
  set_access(s, false);
  ++s.stats.blocks;
  s.stats.threads += uint64_t(block.x) * block.y * block.z;
}

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

// ---- memory ---------------------------------------------------------------------------------------------
cudaError_t cudaMalloc(void** p, size_t n) {
  DS4_EMU_ENTER();
  if (!p) return set_error(cudaErrorInvalidValue);
  *p = nullptr;
  if (n == 0) return cudaSuccess;
  DeviceMem& m = dev_mem(s, t_device);
  const size_t need = (n + kAlign - 1) / kAlign * kAlign;
  for (auto it = m.free_ranges.begin(); it != m.free_ranges.end(); ++it) {
    if (it->second < need) continue;
    const size_t off = it->first, rest = it->second - need;
    m.free_ranges.erase(it);
    if (rest) m.free_ranges[off + need] = rest;
    m.allocs[off] = need;
    m.requested[off] = n;
    m.used += need;
    const size_t end = (off + need + page() - 1) / page() * page();
    if (end > m.hwm) {  // newly used pages get the region's current protection
      mprotect(m.base + m.hwm, end - m.hwm, s.unprotected ? PROT_READ | PROT_WRITE : PROT_NONE);
      m.hwm = end;
    }
    const size_t fill = std::min(need, s.fill_cap);
    const size_t pb = off / page() * page(), pe = (off + fill + page() - 1) / page() * page();
    if (!s.unprotected) mprotect(m.base + pb, pe - pb, PROT_READ | PROT_WRITE);
    fill_garbage(m.base + off, fill);  // cudaMalloc does not zero
    if (!s.unprotected) mprotect(m.base + pb, pe - pb, PROT_NONE);
    *p = m.base + off;
    return cudaSuccess;
  }
  return set_error(cudaErrorMemoryAllocation);
}

cudaError_t cudaFree(void* p) {
  DS4_EMU_ENTER();
  if (!p) return cudaSuccess;
  const int d = device_of_range(p, 1);
  if (d < 0) return set_error(cudaErrorInvalidValue);
  DeviceMem& m = s.dev[size_t(d)];
  const size_t off = size_t(static_cast<char*>(p) - m.base);
  auto a = m.allocs.find(off);
  if (a == m.allocs.end()) return set_error(cudaErrorInvalidValue);
  drive(lk, [&] { return device_idle(s, d); });  // cudaFree synchronises
  const size_t n = a->second;
  m.allocs.erase(a);
  m.requested.erase(off);
  m.used -= n;
  // Give whole pages back to the OS (a use after free reads zeros or garbage, never old data).
  const size_t pb = (off + page() - 1) / page() * page(), pe = (off + n) / page() * page();
  if (pe > pb) madvise(m.base + pb, pe - pb, MADV_DONTNEED);
  auto [ins, ok] = m.free_ranges.emplace(off, n);
  auto next = std::next(ins);
  if (next != m.free_ranges.end() && ins->first + ins->second == next->first) {
    ins->second += next->second;
    m.free_ranges.erase(next);
  }
  if (ins != m.free_ranges.begin()) {
    auto prev = std::prev(ins);
    if (prev->first + prev->second == ins->first) {
      prev->second += ins->second;
      m.free_ranges.erase(ins);
    }
  }
  return cudaSuccess;
}

cudaError_t cudaHostAlloc(void** p, size_t n, unsigned) {
  DS4_EMU_ENTER();
  if (!p) return set_error(cudaErrorInvalidValue);
  const size_t bytes = (std::max<size_t>(n, 1) + page() - 1) / page() * page();
  void* m = std::aligned_alloc(page(), bytes);
  if (!m) return set_error(cudaErrorMemoryAllocation);
  fill_garbage(m, std::min(bytes, s.fill_cap));
  s.pinned[reinterpret_cast<uintptr_t>(m)] = {bytes, true};
  *p = m;
  return cudaSuccess;
}
cudaError_t cudaMallocHost(void** p, size_t n) { return cudaHostAlloc(p, n, 0); }

cudaError_t cudaFreeHost(void* p) {
  DS4_EMU_ENTER();
  if (!p) return cudaSuccess;
  auto it = s.pinned.find(reinterpret_cast<uintptr_t>(p));
  if (it == s.pinned.end() || !it->second.second) return set_error(cudaErrorInvalidValue);
  for (int d = 0; d < s.ndev; ++d) drive(lk, [&] { return device_idle(s, d); });
  s.pinned.erase(it);
  std::free(p);
  return cudaSuccess;
}

cudaError_t cudaHostRegister(void* p, size_t n, unsigned) {
  DS4_EMU_ENTER();
  if (!p || n == 0) return set_error(cudaErrorInvalidValue);
  const auto a = reinterpret_cast<uintptr_t>(p);
  if (classify(s, p, 1) != Mem::kPageable) return set_error(cudaErrorHostMemoryAlreadyRegistered);
  auto next = s.pinned.upper_bound(a);
  if (next != s.pinned.end() && next->first < a + n) return set_error(cudaErrorHostMemoryAlreadyRegistered);
  s.pinned[a] = {n, false};
  return cudaSuccess;
}

cudaError_t cudaHostUnregister(void* p) {
  DS4_EMU_ENTER();
  auto it = s.pinned.find(reinterpret_cast<uintptr_t>(p));
  if (it == s.pinned.end() || it->second.second) return set_error(cudaErrorHostMemoryNotRegistered);
  for (int d = 0; d < s.ndev; ++d) drive(lk, [&] { return device_idle(s, d); });
  s.pinned.erase(it);
  return cudaSuccess;
}

cudaError_t cudaHostGetDevicePointer(void** dev, void* host, unsigned) {
  DS4_EMU_ENTER();
  if (!dev || classify(s, host, 1) != Mem::kPinned) return set_error(cudaErrorInvalidValue);
  *dev = host;  // unified addressing: the same pointer
  return cudaSuccess;
}

cudaError_t cudaPointerGetAttributes(cudaPointerAttributes* a, const void* p) {
  DS4_EMU_ENTER();
  if (!a) return set_error(cudaErrorInvalidValue);
  std::memset(a, 0, sizeof *a);
  const Mem k = classify(s, p, 1);
  a->device = -2;
  if (k == Mem::kDevice || k == Mem::kBadDevice) {
    a->type = cudaMemoryTypeDevice;
    a->device = device_of_range(p, 1);
    a->devicePointer = const_cast<void*>(p);
  } else if (k == Mem::kPinned) {
    a->type = cudaMemoryTypeHost;
    a->devicePointer = a->hostPointer = const_cast<void*>(p);
  } else {
    a->type = cudaMemoryTypeUnregistered;
  }
  return cudaSuccess;
}

cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t n, cudaMemcpyKind kind, cudaStream_t h) {
  DS4_EMU_ENTER();
  if (n == 0) return cudaSuccess;
  Stream* q = resolve_stream(h);
  if (!q) return set_error(cudaErrorInvalidResourceHandle);
  Mem dk, sk;
  if (cudaError_t e = check_copy(s, dst, src, n, kind, &dk, &sk); e != cudaSuccess) return set_error(e);
  auto it = make_item(Item::kCopy);
  it->dst = dst;
  it->src = src;
  it->n = n;
  return copy(s, lk, it, n, dk, sk, q, false);
}

cudaError_t cudaMemcpy(void* dst, const void* src, size_t n, cudaMemcpyKind kind) {
  DS4_EMU_ENTER();
  if (n == 0) return cudaSuccess;
  Mem dk, sk;
  if (cudaError_t e = check_copy(s, dst, src, n, kind, &dk, &sk); e != cudaSuccess) return set_error(e);
  auto it = make_item(Item::kCopy);
  it->dst = dst;
  it->src = src;
  it->n = n;
  return copy(s, lk, it, n, dk, sk, dev_mem(s, t_device).legacy, true);
}

namespace {
cudaError_t copy2d(void* dst, size_t dpitch, const void* src, size_t spitch, size_t width, size_t height,
                   cudaMemcpyKind kind, cudaStream_t h, bool sync) {
  DS4_EMU_ENTER();
  if (width == 0 || height == 0) return cudaSuccess;
  if (width > dpitch || width > spitch) return set_error(cudaErrorInvalidValue);
  Stream* q = sync ? dev_mem(s, t_device).legacy : resolve_stream(h);
  if (!q) return set_error(cudaErrorInvalidResourceHandle);
  Mem dk, sk, dk2, sk2;
  // Both the first and the last row must lie in the same memory.
  if (cudaError_t e = check_copy(s, dst, src, width, kind, &dk, &sk); e != cudaSuccess) return set_error(e);
  if (cudaError_t e = check_copy(s, static_cast<char*>(dst) + (height - 1) * dpitch,
                                 static_cast<const char*>(src) + (height - 1) * spitch, width, kind, &dk2, &sk2);
      e != cudaSuccess || dk2 != dk || sk2 != sk)
    return set_error(cudaErrorInvalidValue);
  auto it = make_item(Item::kCopy2D);
  it->dst = dst;
  it->src = src;
  it->dpitch = dpitch;
  it->spitch = spitch;
  it->width = width;
  it->height = height;
  return copy(s, lk, it, width * height, dk, sk, q, sync);
}
}  // namespace

cudaError_t cudaMemcpy2D(void* dst, size_t dpitch, const void* src, size_t spitch, size_t width, size_t height,
                         cudaMemcpyKind kind) {
  return copy2d(dst, dpitch, src, spitch, width, height, kind, nullptr, true);
}
cudaError_t cudaMemcpy2DAsync(void* dst, size_t dpitch, const void* src, size_t spitch, size_t width,
                              size_t height, cudaMemcpyKind kind, cudaStream_t h) {
  return copy2d(dst, dpitch, src, spitch, width, height, kind, h, false);
}
cudaError_t cudaMemcpyPeerAsync(void* dst, int, const void* src, int, size_t n, cudaStream_t h) {
  return cudaMemcpyAsync(dst, src, n, cudaMemcpyDeviceToDevice, h);
}
cudaError_t cudaMemcpyPeer(void* dst, int, const void* src, int, size_t n) {
  return cudaMemcpy(dst, src, n, cudaMemcpyDeviceToDevice);
}

namespace {
cudaError_t memset_impl(void* p, int value, size_t n, cudaStream_t h, bool sync) {
  DS4_EMU_ENTER();
  if (n == 0) return cudaSuccess;
  if (!p) return set_error(cudaErrorInvalidValue);
  Stream* q = sync ? dev_mem(s, t_device).legacy : resolve_stream(h);
  if (!q) return set_error(cudaErrorInvalidResourceHandle);
  const Mem k = classify(s, p, n);
  if (k == Mem::kBadDevice || k == Mem::kPageable) return set_error(cudaErrorInvalidValue);
  auto it = make_item(Item::kMemset);
  it->dst = p;
  it->n = n;
  it->value = value;
  enqueue(q, it);
  if (sync && k == Mem::kPinned) drive(lk, [&] { return it->done; });
  return cudaSuccess;
}
}  // namespace

cudaError_t cudaMemset(void* p, int value, size_t n) { return memset_impl(p, value, n, nullptr, true); }
cudaError_t cudaMemsetAsync(void* p, int value, size_t n, cudaStream_t h) {
  return memset_impl(p, value, n, h, false);
}

// ---- streams, events, host functions ---------------------------------------------------------------------
cudaError_t cudaStreamCreateWithFlags(cudaStream_t* out, unsigned flags) {
  DS4_EMU_ENTER();
  if (!out) return set_error(cudaErrorInvalidValue);
  dev_mem(s, t_device);
  *out = handle_of(new_stream(s, t_device, (flags & cudaStreamNonBlocking) == 0, false));
  return cudaSuccess;
}
cudaError_t cudaStreamCreate(cudaStream_t* out) { return cudaStreamCreateWithFlags(out, cudaStreamDefault); }

cudaError_t cudaStreamDestroy(cudaStream_t h) {
  DS4_EMU_ENTER();
  if (!h || h == cudaStreamLegacy || h == cudaStreamPerThread) return set_error(cudaErrorInvalidResourceHandle);
  Stream* q = resolve_stream(h);
  if (!q) return set_error(cudaErrorInvalidResourceHandle);
  q->destroyed = true;  // its queued work still runs; freed when empty (step())
  if (q->q.empty()) {
    auto& v = s.dev[size_t(q->device)].streams;
    std::erase(v, q);
    s.live_streams.erase(h);
    delete h;
  }
  return cudaSuccess;
}

cudaError_t cudaStreamSynchronize(cudaStream_t h) {
  DS4_EMU_ENTER();
  Stream* q = resolve_stream(h);
  if (!q) return set_error(cudaErrorInvalidResourceHandle);
  drive(lk, [&] { return stream_idle(q); });
  return cudaSuccess;
}

cudaError_t cudaStreamQuery(cudaStream_t h) {
  DS4_EMU_ENTER();
  Stream* q = resolve_stream(h);
  if (!q) return set_error(cudaErrorInvalidResourceHandle);
  if (!stream_idle(q)) {  // let some work happen so a polling host makes progress
    step(s);
    set_access(s, false);
  }
  return stream_idle(q) ? cudaSuccess : cudaErrorNotReady;
}

cudaError_t cudaStreamWaitEvent(cudaStream_t h, cudaEvent_t e, unsigned) {
  DS4_EMU_ENTER();
  Stream* q = resolve_stream(h);
  if (!q || !s.live_events.count(e)) return set_error(cudaErrorInvalidResourceHandle);
  if (!e->rec || e->rec->done) return cudaSuccess;  // nothing to wait for (CUDA: an unrecorded event is complete)
  auto it = make_item(Item::kMarker);
  it->deps.push_back(e->rec);  // the record current at this call, as CUDA specifies
  enqueue(q, it);
  return cudaSuccess;
}

cudaError_t cudaLaunchHostFunc(cudaStream_t h, cudaHostFn_t fn, void* user) {
  DS4_EMU_ENTER();
  Stream* q = resolve_stream(h);
  if (!q) return set_error(cudaErrorInvalidResourceHandle);
  if (!fn) return set_error(cudaErrorInvalidValue);
  auto it = make_item(Item::kHostFn);
  it->fn = fn;
  it->user = user;
  enqueue(q, it);
  return cudaSuccess;
}

cudaError_t cudaEventCreateWithFlags(cudaEvent_t* out, unsigned flags) {
  DS4_EMU_ENTER();
  if (!out) return set_error(cudaErrorInvalidValue);
  auto* e = new CUevent_st();
  e->timing = (flags & cudaEventDisableTiming) == 0;
  e->device = t_device;
  s.live_events.insert(e);
  *out = e;
  return cudaSuccess;
}
cudaError_t cudaEventCreate(cudaEvent_t* out) { return cudaEventCreateWithFlags(out, cudaEventDefault); }

cudaError_t cudaEventDestroy(cudaEvent_t e) {
  DS4_EMU_ENTER();
  if (!s.live_events.erase(e)) return set_error(cudaErrorInvalidResourceHandle);
  delete e;  // a pending record keeps its item alive through the stream queue
  return cudaSuccess;
}

cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t h) {
  DS4_EMU_ENTER();
  Stream* q = resolve_stream(h);
  if (!q || !s.live_events.count(e)) return set_error(cudaErrorInvalidResourceHandle);
  auto it = make_item(Item::kMarker);
  enqueue(q, it);
  e->rec = it;
  return cudaSuccess;
}

cudaError_t cudaEventSynchronize(cudaEvent_t e) {
  DS4_EMU_ENTER();
  if (!s.live_events.count(e)) return set_error(cudaErrorInvalidResourceHandle);
  const std::shared_ptr<Item> r = e->rec;
  if (r) drive(lk, [&] { return r->done; });
  return cudaSuccess;
}

cudaError_t cudaEventQuery(cudaEvent_t e) {
  DS4_EMU_ENTER();
  if (!s.live_events.count(e)) return set_error(cudaErrorInvalidResourceHandle);
  if (!e->rec || e->rec->done) return cudaSuccess;
  step(s);
  set_access(s, false);
  return e->rec->done ? cudaSuccess : cudaErrorNotReady;
}

cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t a, cudaEvent_t b) {
  DS4_EMU_ENTER();
  if (!ms || !s.live_events.count(a) || !s.live_events.count(b)) return set_error(cudaErrorInvalidResourceHandle);
  if (!a->timing || !b->timing || !a->rec || !b->rec) return set_error(cudaErrorInvalidResourceHandle);
  if (!a->rec->done || !b->rec->done) return cudaErrorNotReady;
  *ms = std::chrono::duration<float, std::milli>(b->rec->when - a->rec->when).count();
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
