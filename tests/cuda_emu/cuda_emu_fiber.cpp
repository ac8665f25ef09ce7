// tests/cuda_emu/cuda_emu_fiber.cpp — the block executor: every CUDA thread of a block is a fiber
// with its own small stack (pooled, guard page below), switched by a hand-written x86-64 context
// switch (callee-saved registers, MXCSR and the x87 control word; System V ABI) or, elsewhere,
// by ucontext. A barrier marks the fiber waiting and switches back to the block scheduler, which
// resumes fibers round-robin (warps in a seeded order) until all have returned.
#include "tests/cuda_emu/cuda_emu_fiber.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <random>
#include <vector>

#if !defined(__x86_64__)
#include <ucontext.h>
#endif

namespace ds4::emu {

thread_local ThreadState* t_thread = nullptr;

void outside_kernel(const char* what) {
  std::fprintf(stderr, "cuda_emu: %s used outside a kernel\n", what);
  std::abort();
}

namespace {

#if defined(__x86_64__)
extern "C" void ds4_emu_ctx_switch(void** save_sp, void* new_sp);
extern "C" void ds4_emu_ctx_start();
asm(R"(
  .text
  .globl ds4_emu_ctx_switch
  .type ds4_emu_ctx_switch, @function
ds4_emu_ctx_switch:
  pushq %rbp
  pushq %rbx
  pushq %r12
  pushq %r13
  pushq %r14
  pushq %r15
  subq $8, %rsp
  stmxcsr (%rsp)
  fnstcw 4(%rsp)
  movq %rsp, (%rdi)
  movq %rsi, %rsp
  ldmxcsr (%rsp)
  fldcw 4(%rsp)
  addq $8, %rsp
  popq %r15
  popq %r14
  popq %r13
  popq %r12
  popq %rbx
  popq %rbp
  ret
  .size ds4_emu_ctx_switch, .-ds4_emu_ctx_switch
  .globl ds4_emu_ctx_start
  .type ds4_emu_ctx_start, @function
ds4_emu_ctx_start:
  movq %r12, %rdi
  callq *%r13
  ud2
  .size ds4_emu_ctx_start, .-ds4_emu_ctx_start
)");
#endif

size_t stack_bytes() {
  static const size_t n = [] {
    const char* e = std::getenv("DS4_CUDA_EMU_STACK_KB");
    const long kb = e ? std::atol(e) : 64;
    return size_t(kb < 16 ? 16 : kb) * 1024;
  }();
  return n;
}
size_t page_bytes() {
  static const size_t p = size_t(sysconf(_SC_PAGESIZE));
  return p;
}

struct Fiber {
  char* stack = nullptr;  // lowest usable byte (a guard page lies below)
#if defined(__x86_64__)
  void* sp = nullptr;
#else
  ucontext_t ctx;
#endif
  ThreadState ts;
};

/// Per OS thread: the fiber pool, the scheduler context and the block being run.
struct Executor {
  std::vector<Fiber*> fibers;
#if defined(__x86_64__)
  void* sched_sp = nullptr;
#else
  ucontext_t sched;
#endif
  void (*invoke)(void*) = nullptr;
  void* args = nullptr;
  BlockState block;
  std::vector<WarpState> warps;
  std::vector<unsigned> warp_order;
  char* dyn = nullptr;  // 64 KiB + guard page
  uint64_t serial = 0;
  ~Executor();
};
thread_local std::unique_ptr<Executor> t_exec;  // freed when the OS thread exits

Executor& exec() {
  if (!t_exec) t_exec = std::make_unique<Executor>();
  return *t_exec;
}

Fiber* new_fiber() {
  const size_t pg = page_bytes(), n = stack_bytes();
  void* m = mmap(nullptr, n + pg, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (m == MAP_FAILED) {
    std::perror("cuda_emu: fiber stack mmap");
    std::abort();
  }
  mprotect(m, pg, PROT_NONE);  // stack overflow faults instead of corrupting a neighbour
  auto* f = new Fiber();
  f->stack = static_cast<char*>(m) + pg;
  return f;
}

Executor::~Executor() {
  const size_t pg = page_bytes();
  for (Fiber* f : fibers) {
    munmap(f->stack - pg, stack_bytes() + pg);
    delete f;
  }
  if (dyn) munmap(dyn, 64 * 1024 + pg);
}

void release_waiters_after_exit(BlockState& b, WarpState& w);

void fiber_main(void*) {
  Executor& e = exec();
  ThreadState* t = t_thread;
  e.invoke(e.args);
  t->done = true;
  BlockState& b = *t->block;
  WarpState& w = b.warps[t->warp];
  --b.live;
  w.live_mask &= ~(1u << t->lane);
  release_waiters_after_exit(b, w);
  Fiber* f = e.fibers[t->linear];
#if defined(__x86_64__)
  ds4_emu_ctx_switch(&f->sp, e.sched_sp);
#else
  swapcontext(&f->ctx, &e.sched);
#endif
  std::abort();  // a finished fiber is never resumed
}

#if !defined(__x86_64__)
void fiber_main_uc() { fiber_main(nullptr); }
#endif

void prepare(Fiber* f) {
#if defined(__x86_64__)
  auto top = reinterpret_cast<uintptr_t>(f->stack + stack_bytes()) & ~uintptr_t(15);
  auto* sp = reinterpret_cast<uint64_t*>(top - 64 - 16);
  const uint32_t mxcsr = 0x1F80;
  const uint16_t fpucw = 0x037F;
  std::memcpy(&sp[0], &mxcsr, 4);
  std::memcpy(reinterpret_cast<char*>(&sp[0]) + 4, &fpucw, 2);
  sp[1] = 0;                                               // r15
  sp[2] = 0;                                               // r14
  sp[3] = reinterpret_cast<uint64_t>(&fiber_main);         // r13: entry
  sp[4] = 0;                                               // r12: its argument
  sp[5] = 0;                                               // rbx
  sp[6] = 0;                                               // rbp
  sp[7] = reinterpret_cast<uint64_t>(&ds4_emu_ctx_start);  // return address
  f->sp = sp;
#else
  getcontext(&f->ctx);
  f->ctx.uc_stack.ss_sp = f->stack;
  f->ctx.uc_stack.ss_size = stack_bytes();
  f->ctx.uc_link = nullptr;
  makecontext(&f->ctx, fiber_main_uc, 0);
#endif
}

void park() {
  Executor& e = exec();
  Fiber* f = e.fibers[t_thread->linear];
#if defined(__x86_64__)
  ds4_emu_ctx_switch(&f->sp, e.sched_sp);
#else
  swapcontext(&f->ctx, &e.sched);
#endif
}

void release_warp(WarpState& w) {
  const unsigned p = unsigned(w.gen & 1);
  w.participants[p] = w.arrived_mask;
  for (unsigned l = 0; l < 32; ++l)
    if (!(w.arrived_mask >> l & 1u)) w.slots[p][l] = 0xBAADF00DBAADF00Dull;  // reading a non-participant: UB
  w.arrived_mask = 0;
  ++w.gen;
}

void release_waiters_after_exit(BlockState& b, WarpState& w) {
  if (b.arrived > 0 && b.arrived == b.live) {
    b.arrived = 0;
    ++b.gen;
  }
  if (w.arrived_mask != 0 && w.arrived_mask == (w.expected_mask & w.live_mask)) release_warp(w);
}

[[noreturn]] void deadlock(const Executor& e) {
  std::fprintf(stderr,
               "cuda_emu: kernel %s block (%u,%u,%u): barrier deadlock (threads wait at different "
               "__syncthreads / warp collectives, or a warp collective names lanes that never call it)\n",
               e.block.kernel, e.block.block_idx.x, e.block.block_idx.y, e.block.block_idx.z);
  for (unsigned i = 0; i < e.block.nthreads && i < 4096; ++i) {
    const ThreadState& t = e.fibers[i]->ts;
    if (!t.done)
      std::fprintf(stderr, "  thread %u (warp %u lane %u) waits at a %s\n", i, t.warp, t.lane,
                   t.wait == 1 ? "__syncthreads" : "warp collective");
  }
  std::abort();
}

}  // namespace

void block_barrier() {
  ThreadState& t = cur();
  BlockState& b = *t.block;
  if (++b.arrived == b.live) {
    b.arrived = 0;
    ++b.gen;
    return;
  }
  t.wait = 1;
  t.wait_gen = b.gen;
  park();
}

const uint64_t* warp_exchange(unsigned mask, uint64_t v, unsigned* participants) {
  ThreadState& t = cur();
  WarpState& w = t.block->warps[t.warp];
  const unsigned bit = 1u << t.lane;
  if (!(mask & bit)) {
    std::fprintf(stderr, "cuda_emu: kernel %s: lane %u calls a warp collective with mask 0x%08x without itself\n",
                 t.block->kernel, t.lane, mask);
    std::abort();
  }
  if (w.arrived_mask == 0) {
    w.expected_mask = mask;
  } else if (mask != w.expected_mask) {
    std::fprintf(stderr,
                 "cuda_emu: kernel %s: warp %u: lane %u calls a warp collective with mask 0x%08x while "
                 "0x%08x is in progress (divergent collectives are not emulated)\n",
                 t.block->kernel, t.warp, t.lane, mask, w.expected_mask);
    std::abort();
  }
  const unsigned p = unsigned(w.gen & 1);
  w.slots[p][t.lane] = v;
  w.arrived_mask |= bit;
  if (w.arrived_mask == (w.expected_mask & w.live_mask)) {
    release_warp(w);
  } else {
    t.wait = 2;
    t.wait_gen = w.gen;
    park();
  }
  if (participants) *participants = w.participants[p];
  return w.slots[p];
}

void run_block(const char* kernel, uint3 block_idx, dim3 grid, dim3 block, void* dyn_shared,
               void (*invoke)(void*), void* args, uint64_t order_seed) {
  Executor& e = exec();
  if (t_thread) {
    std::fprintf(stderr, "cuda_emu: kernel %s launched from inside a kernel\n", kernel);
    std::abort();
  }
  const unsigned n = block.x * block.y * block.z, nwarps = (n + 31) / 32;
  while (e.fibers.size() < n) e.fibers.push_back(new_fiber());
  e.invoke = invoke;
  e.args = args;
  BlockState& b = e.block;
  b.block_idx = block_idx;
  b.block_dim = block;
  b.grid_dim = grid;
  b.kernel = kernel;
  b.nthreads = b.live = n;
  b.arrived = 0;
  b.gen = 0;
  b.serial = ++e.serial;
  b.dyn_shared = dyn_shared;
  e.warps.assign(nwarps, WarpState{});
  for (unsigned w = 0; w < nwarps; ++w)
    e.warps[w].live_mask = (w + 1) * 32 <= n ? 0xFFFFFFFFu : (1u << (n - w * 32)) - 1u;
  b.warps = e.warps.data();
  e.warp_order.resize(nwarps);
  for (unsigned w = 0; w < nwarps; ++w) e.warp_order[w] = w;
  if (order_seed != 0 && nwarps > 1) {
    std::mt19937_64 rng(order_seed);
    for (unsigned w = nwarps - 1; w > 0; --w) std::swap(e.warp_order[w], e.warp_order[size_t(rng() % (w + 1))]);
  }
  for (unsigned i = 0; i < n; ++i) {
    Fiber* f = e.fibers[i];
    ThreadState& t = f->ts;
    t.tid = uint3{i % block.x, (i / block.x) % block.y, i / (block.x * block.y)};
    t.linear = i;
    t.lane = i % 32;
    t.warp = i / 32;
    t.block = &b;
    t.wait = 0;
    t.wait_gen = 0;
    t.done = false;
    prepare(f);
  }
  unsigned done = 0;
  while (done < n) {
    bool ran = false;
    for (unsigned wi = 0; wi < nwarps; ++wi) {
      const unsigned w = e.warp_order[wi];
      const unsigned end = std::min(n, (w + 1) * 32);
      for (unsigned i = w * 32; i < end; ++i) {
        Fiber* f = e.fibers[i];
        ThreadState& t = f->ts;
        if (t.done) continue;
        if (t.wait == 1 && b.gen == t.wait_gen) continue;
        if (t.wait == 2 && e.warps[w].gen == t.wait_gen) continue;
        t.wait = 0;
        t_thread = &t;
#if defined(__x86_64__)
        ds4_emu_ctx_switch(&e.sched_sp, f->sp);
#else
        swapcontext(&e.sched, &f->ctx);
#endif
        t_thread = nullptr;
        ran = true;
        if (t.done) ++done;
      }
    }
    if (!ran && done < n) deadlock(e);
  }
}

void* block_dynamic_shared(size_t bytes) {
  Executor& e = exec();
  const size_t cap = 64 * 1024, pg = page_bytes();
  if (!e.dyn) {
    void* m = mmap(nullptr, cap + pg, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED) {
      std::perror("cuda_emu: shared memory mmap");
      std::abort();
    }
    e.dyn = static_cast<char*>(m);
    mprotect(e.dyn + cap, pg, PROT_NONE);
  }
  const size_t rounded = (bytes + 15) & ~size_t(15);
  char* p = e.dyn + cap - rounded;
  for (size_t i = 0; i < rounded; i += 4) std::memcpy(p + i, "\xA5\xA5\xA5\xFF", 4);  // NaN as float
  return p;
}

void* dynamic_shared() {
  ThreadState& t = cur();
  return t.block->dyn_shared;
}

}  // namespace ds4::emu
