// tests/cuda_emu/cuda_emu_device.h — the device side of the CUDA emulation: per-CUDA-thread
// built-ins, barriers, warp collectives, atomics and intrinsics, from their documented semantics
// (CUDA C++ Programming Guide "Built-in Variables", "Synchronization Functions", "Warp Shuffle
// Functions", "Warp Vote Functions", "Atomic Functions"; CUDA Math API "Integer / SIMD / Single
// Precision Intrinsics"). Every CUDA thread of a block is a fiber (cuda_emu_fiber.cpp); a barrier
// or warp collective parks the fiber until every participant arrived. Included by cuda_emu.h.
#pragma once

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <type_traits>

namespace ds4::emu {

/// One warp of the running block: which lanes still run, the collective in progress, and the
/// double-buffered exchange slots (collective k uses slots[k % 2]).
struct WarpState {
  unsigned live_mask = 0;
  unsigned arrived_mask = 0;
  unsigned expected_mask = 0;
  uint64_t gen = 0;
  uint64_t slots[2][32] = {};
  unsigned participants[2] = {0, 0};  // lanes that took part in the collective using slots[k % 2]
};
/// The running block: geometry, the __syncthreads barrier, the warps, dynamic shared memory.
struct BlockState {
  uint3 block_idx{0, 0, 0};
  dim3 block_dim, grid_dim;
  const char* kernel = "";
  unsigned nthreads = 0, live = 0, arrived = 0;
  uint64_t gen = 0;
  uint64_t serial = 0;  // unique per executed block
  WarpState* warps = nullptr;
  void* dyn_shared = nullptr;
};
/// One CUDA thread (fiber) of the running block.
struct ThreadState {
  uint3 tid{0, 0, 0};
  unsigned linear = 0, lane = 0, warp = 0;
  BlockState* block = nullptr;
  int wait = 0;  // 0 runnable, 1 block barrier, 2 warp collective
  uint64_t wait_gen = 0;
  bool done = false;
};

/// The CUDA thread now running on this OS thread (null outside a kernel).
extern thread_local ThreadState* t_thread;
[[noreturn]] void outside_kernel(const char* what);
inline ThreadState& cur() {
  ThreadState* t = t_thread;
  if (!t) outside_kernel("a device built-in");
  return *t;
}
/// __syncthreads: parks until every live thread of the block arrived.
void block_barrier();
/// Warp collective over `mask` (must contain the caller; all named live lanes must call it with the
/// same mask): publishes v, parks until they arrived, returns the 32 published slots (lanes
/// outside the mask hold a poison value).
const uint64_t* warp_exchange(unsigned mask, uint64_t v, unsigned* participants = nullptr);

template <class T>
inline uint64_t to_bits(T v) {
  static_assert(sizeof(T) <= 8 && std::is_trivially_copyable_v<T>, "warp shuffle of a type over 8 bytes");
  uint64_t b = 0;
  std::memcpy(&b, &v, sizeof(T));
  return b;
}
template <class T>
inline T from_bits(uint64_t b) {
  T v;
  std::memcpy(&v, &b, sizeof(T));
  return v;
}
}  // namespace ds4::emu

// ---- built-in variables (per fiber) ---------------------------------------------------------------
#define threadIdx (static_cast<const uint3&>(::ds4::emu::cur().tid))
#define blockIdx (static_cast<const uint3&>(::ds4::emu::cur().block->block_idx))
#define blockDim (static_cast<const dim3&>(::ds4::emu::cur().block->block_dim))
#define gridDim (static_cast<const dim3&>(::ds4::emu::cur().block->grid_dim))
static constexpr int warpSize = 32;

// ---- synchronization ----------------------------------------------------------------------------
inline void __syncthreads() { ds4::emu::block_barrier(); }
inline int __syncthreads_count(int pred) {
  // The fibers of a block run one at a time, so a counter filled between two barriers is exact.
  static thread_local int count;
  static thread_local uint64_t gen_seen = ~uint64_t(0), serial_seen = ~uint64_t(0);
  ds4::emu::BlockState* b = ds4::emu::cur().block;
  if (gen_seen != b->gen || serial_seen != b->serial) count = 0, gen_seen = b->gen, serial_seen = b->serial;
  count += pred != 0;
  ds4::emu::block_barrier();
  const int r = count;
  ds4::emu::block_barrier();
  return r;
}
inline int __syncthreads_or(int pred) { return __syncthreads_count(pred) != 0; }
inline int __syncthreads_and(int pred) {
  return __syncthreads_count(pred) == int(ds4::emu::cur().block->live);
}
inline void __syncwarp(unsigned mask = 0xFFFFFFFFu) { ds4::emu::warp_exchange(mask, 0); }
inline void __threadfence() {}
inline void __threadfence_block() {}
inline void __threadfence_system() {}
/// Lanes of the caller's warp that have not exited (the fibers never diverge inside a warp).
inline unsigned __activemask() { return ds4::emu::cur().block->warps[ds4::emu::cur().warp].live_mask; }

// ---- warp shuffles and votes --------------------------------------------------------------------
template <class T>
inline T __shfl_sync(unsigned mask, T v, int src_lane, int width = 32) {
  const unsigned lane = ds4::emu::cur().lane, w = unsigned(width), base = lane & ~(w - 1);
  const uint64_t* s = ds4::emu::warp_exchange(mask, ds4::emu::to_bits(v));
  return ds4::emu::from_bits<T>(s[base + (unsigned(src_lane) & (w - 1))]);
}
template <class T>
inline T __shfl_xor_sync(unsigned mask, T v, int lane_mask, int width = 32) {
  const unsigned lane = ds4::emu::cur().lane, w = unsigned(width), base = lane & ~(w - 1);
  const uint64_t* s = ds4::emu::warp_exchange(mask, ds4::emu::to_bits(v));
  const unsigned src = lane ^ (unsigned(lane_mask) & 31u);
  return src >= base + w ? v : ds4::emu::from_bits<T>(s[src]);
}
template <class T>
inline T __shfl_down_sync(unsigned mask, T v, unsigned delta, int width = 32) {
  const unsigned lane = ds4::emu::cur().lane, w = unsigned(width), base = lane & ~(w - 1);
  const uint64_t* s = ds4::emu::warp_exchange(mask, ds4::emu::to_bits(v));
  const unsigned src = lane + delta;
  return src >= base + w ? v : ds4::emu::from_bits<T>(s[src]);
}
template <class T>
inline T __shfl_up_sync(unsigned mask, T v, unsigned delta, int width = 32) {
  const unsigned lane = ds4::emu::cur().lane, w = unsigned(width), base = lane & ~(w - 1);
  const uint64_t* s = ds4::emu::warp_exchange(mask, ds4::emu::to_bits(v));
  return lane - base < delta ? v : ds4::emu::from_bits<T>(s[lane - delta]);
}
namespace ds4::emu {
/// The ballot of the participating lanes and (in *who) which lanes participated.
inline unsigned ballot(unsigned mask, int pred, unsigned* who) {
  const uint64_t* s = warp_exchange(mask, pred != 0 ? 1u : 0u, who);
  unsigned r = 0;
  for (unsigned l = 0; l < 32; ++l)
    if ((*who >> l & 1u) && s[l] == 1u) r |= 1u << l;
  return r;
}
}  // namespace ds4::emu
inline unsigned __ballot_sync(unsigned mask, int pred) {
  unsigned who;
  return ds4::emu::ballot(mask, pred, &who);
}
inline int __any_sync(unsigned mask, int pred) { return __ballot_sync(mask, pred) != 0; }
inline int __all_sync(unsigned mask, int pred) {
  unsigned who;
  return ds4::emu::ballot(mask, pred, &who) == who;
}

// ---- integer atomics (no float atomics: the numerics contract forbids them) ------------------------
#define DS4_EMU_ATOMICS(T)                                                                              \
  inline T atomicAdd(T* p, T v) { return __atomic_fetch_add(p, v, __ATOMIC_RELAXED); }                  \
  inline T atomicSub(T* p, T v) { return __atomic_fetch_sub(p, v, __ATOMIC_RELAXED); }                  \
  inline T atomicExch(T* p, T v) { return __atomic_exchange_n(p, v, __ATOMIC_RELAXED); }                \
  inline T atomicAnd(T* p, T v) { return __atomic_fetch_and(p, v, __ATOMIC_RELAXED); }                  \
  inline T atomicOr(T* p, T v) { return __atomic_fetch_or(p, v, __ATOMIC_RELAXED); }                    \
  inline T atomicXor(T* p, T v) { return __atomic_fetch_xor(p, v, __ATOMIC_RELAXED); }                  \
  inline T atomicMax(T* p, T v) {                                                                       \
    T old = __atomic_load_n(p, __ATOMIC_RELAXED);                                                       \
    while (old < v && !__atomic_compare_exchange_n(p, &old, v, true, __ATOMIC_RELAXED, __ATOMIC_RELAXED)) \
      ;                                                                                                 \
    return old;                                                                                         \
  }                                                                                                     \
  inline T atomicMin(T* p, T v) {                                                                       \
    T old = __atomic_load_n(p, __ATOMIC_RELAXED);                                                       \
    while (old > v && !__atomic_compare_exchange_n(p, &old, v, true, __ATOMIC_RELAXED, __ATOMIC_RELAXED)) \
      ;                                                                                                 \
    return old;                                                                                         \
  }                                                                                                     \
  inline T atomicCAS(T* p, T cmp, T v) {                                                                \
    __atomic_compare_exchange_n(p, &cmp, v, false, __ATOMIC_RELAXED, __ATOMIC_RELAXED);                 \
    return cmp;                                                                                         \
  }
DS4_EMU_ATOMICS(int)
DS4_EMU_ATOMICS(unsigned)
DS4_EMU_ATOMICS(unsigned long long)
DS4_EMU_ATOMICS(long long)
#undef DS4_EMU_ATOMICS
/// ((old >= v) ? 0 : old + 1), as CUDA's atomicInc.
inline unsigned atomicInc(unsigned* p, unsigned v) {
  unsigned old = __atomic_load_n(p, __ATOMIC_RELAXED);
  while (!__atomic_compare_exchange_n(p, &old, old >= v ? 0u : old + 1u, true, __ATOMIC_RELAXED, __ATOMIC_RELAXED))
    ;
  return old;
}
/// (((old == 0) || (old > v)) ? v : old - 1), as CUDA's atomicDec.
inline unsigned atomicDec(unsigned* p, unsigned v) {
  unsigned old = __atomic_load_n(p, __ATOMIC_RELAXED);
  while (!__atomic_compare_exchange_n(p, &old, (old == 0 || old > v) ? v : old - 1u, true, __ATOMIC_RELAXED,
                                      __ATOMIC_RELAXED))
    ;
  return old;
}

// ---- integer, SIMD and conversion intrinsics --------------------------------------------------------
namespace ds4::emu {
inline uint32_t bytewise(uint32_t a, uint32_t b, int op) {
  uint32_t r = 0;
  for (int i = 0; i < 4; ++i) {
    const uint32_t x = (a >> (8 * i)) & 0xFF, y = (b >> (8 * i)) & 0xFF;
    const uint32_t v = op == 0 ? (x != y ? 0xFFu : 0u) : op == 1 ? ((x - y) & 0xFF) : ((x + y) & 0xFF);
    r |= v << (8 * i);
  }
  return r;
}
}  // namespace ds4::emu
/// Per-byte a != b -> 0xFF, else 0.
inline uint32_t __vcmpne4(uint32_t a, uint32_t b) { return ds4::emu::bytewise(a, b, 0); }
/// Per-byte a - b modulo 256.
inline uint32_t __vsub4(uint32_t a, uint32_t b) { return ds4::emu::bytewise(a, b, 1); }
/// Per-byte a + b modulo 256.
inline uint32_t __vadd4(uint32_t a, uint32_t b) { return ds4::emu::bytewise(a, b, 2); }
/// Byte i of the result = byte (s >> 4i) & 7 of the 8-byte value y:x (x = bytes 0..3).
inline uint32_t __byte_perm(uint32_t x, uint32_t y, uint32_t s) {
  const uint64_t v = uint64_t(x) | (uint64_t(y) << 32);
  uint32_t r = 0;
  for (int i = 0; i < 4; ++i) r |= uint32_t((v >> (8 * ((s >> (4 * i)) & 7))) & 0xFF) << (8 * i);
  return r;
}
/// c + sum of the four signed byte products of a and b.
inline int __dp4a(int a, int b, int c) {
  for (int i = 0; i < 4; ++i) c += int(int8_t(uint32_t(a) >> (8 * i))) * int(int8_t(uint32_t(b) >> (8 * i)));
  return c;
}
inline int __dp4a(unsigned a, unsigned b, int c) { return __dp4a(int(a), int(b), c); }
inline int __popc(uint32_t x) { return __builtin_popcount(x); }
inline int __popcll(unsigned long long x) { return __builtin_popcountll(x); }
inline int __clz(int x) { return x == 0 ? 32 : __builtin_clz(uint32_t(x)); }
inline int __clzll(long long x) { return x == 0 ? 64 : __builtin_clzll(uint64_t(x)); }
inline int __ffs(int x) { return __builtin_ffs(x); }
inline int __ffsll(long long x) { return __builtin_ffsll(x); }
inline unsigned __brev(unsigned x) {
  unsigned r = 0;
  for (int i = 0; i < 32; ++i) r |= ((x >> i) & 1u) << (31 - i);
  return r;
}
inline unsigned __umulhi(unsigned a, unsigned b) { return unsigned((uint64_t(a) * b) >> 32); }
inline int __mulhi(int a, int b) { return int((int64_t(a) * b) >> 32); }
// The *_rn intrinsics: round to nearest even, never contracted (host TUs use -ffp-contract=off).
inline float __fmul_rn(float a, float b) { return a * b; }
inline float __fadd_rn(float a, float b) { return a + b; }
inline float __fsub_rn(float a, float b) { return a - b; }
inline float __fdiv_rn(float a, float b) { return a / b; }
inline float __fmaf_rn(float a, float b, float c) { return std::fmaf(a, b, c); }
inline float __fsqrt_rn(float a) { return std::sqrt(a); }
inline float __frcp_rn(float a) { return 1.0f / a; }
inline double __dmul_rn(double a, double b) { return a * b; }
inline double __dadd_rn(double a, double b) { return a + b; }
inline double __fma_rn(double a, double b, double c) { return std::fma(a, b, c); }
inline float __int2float_rn(int i) { return float(i); }
inline float __uint2float_rn(unsigned i) { return float(i); }
inline int __float2int_rn(float f) { return int(std::nearbyint(f)); }
inline int __float2int_rz(float f) { return int(f); }
inline int __float2int_rd(float f) { return int(std::floor(f)); }
inline int __float2int_ru(float f) { return int(std::ceil(f)); }
inline unsigned __float2uint_rn(float f) { return unsigned(std::nearbyint(f)); }
inline float __saturatef(float x) { return x > 1.0f ? 1.0f : (x >= 0.0f ? x : 0.0f); }  // NaN -> 0
inline int __float_as_int(float f) { return std::bit_cast<int>(f); }
inline unsigned __float_as_uint(float f) { return std::bit_cast<unsigned>(f); }
inline float __int_as_float(int i) { return std::bit_cast<float>(i); }
inline float __uint_as_float(unsigned i) { return std::bit_cast<float>(i); }
inline long long __double_as_longlong(double d) { return std::bit_cast<long long>(d); }
inline double __longlong_as_double(long long i) { return std::bit_cast<double>(i); }
/// Read-only cache load: a plain load here.
template <class T>
inline T __ldg(const T* p) {
  return *p;
}
