// tests/cuda_emu/cuda_emu_scheduler.cpp — the emulated CUDA runtime's state, its lazy, seeded
// scheduler (stream work runs only when the host waits, a random runnable stream head at a time),
// the interface shared with nccl_emu.cpp (cuda_emu_internal.h) and the emulator's control calls
// (ds4::emu::reset, set_seed, ...). Semantics: cuda_emu_state.h.
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "tests/cuda_emu/cuda_emu_fiber.h"
#include "tests/cuda_emu/cuda_emu_state.h"

namespace ds4::emu::rt {

size_t env_size(const char* name, size_t dflt) {
  const char* e = std::getenv(name);
  return e && *e ? size_t(std::strtoull(e, nullptr, 10)) : dflt;
}

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

bool deps_done(const Item& it) {
  for (const auto& d : it.deps)
    if (!d->done) return false;
  return true;
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

std::shared_ptr<Item> make_item(Item::Kind k) {
  auto it = std::make_shared<Item>();
  it->kind = k;
  return it;
}

namespace {

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

}  // namespace

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

namespace {

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

}  // namespace
}  // namespace ds4::emu::rt

namespace ds4::emu {
using namespace rt;

// ---- internal interface ------------------------------------------------------------------------------
std::mutex& lock() { return st().m; }
void notify() { st().cv.notify_all(); }
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
  if (q->capture) {  // recorded into the capture's graph, not queued (cuda_emu_graphs.cpp)
    capture_item(q, std::move(it));
    return;
  }
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
  uint64_t seen = s.steps;  // work run by any host thread counts as progress (README: "no runnable work")
  while (!pred()) {
    if (step(s)) {
      idle_since = std::chrono::steady_clock::now();
      seen = s.steps;
      continue;
    }
    set_access(s, false);
    if (pred()) break;
    s.cv.wait_for(lk, std::chrono::milliseconds(20));
    // Another host thread may have held the lock and run stream work for a long time (its own
    // wait); that is progress, not a deadlock, even when this thread stepped nothing meanwhile.
    if (s.steps != seen) {
      seen = s.steps;
      idle_since = std::chrono::steady_clock::now();
      continue;
    }
    if (std::chrono::steady_clock::now() - idle_since > limit) report_deadlock(s);
  }
  set_access(s, false);
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
  s.captures.clear();  // their streams are gone
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

}  // namespace ds4::emu
