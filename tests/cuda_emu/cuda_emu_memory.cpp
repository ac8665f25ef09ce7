// tests/cuda_emu/cuda_emu_memory.cpp — the emulated CUDA runtime's memory calls: device
// allocation (one PROT_NONE region per device, garbage-filled, never zeroed), pinned host memory,
// synchronous and asynchronous copies (1D, 2D, peer) and memsets, with the staging and blocking
// rules of cuda_emu_state.h.
#include <sys/mman.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "tests/cuda_emu/cuda_emu_state.h"

namespace ds4::emu::rt {

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

namespace {

void fill_garbage(void* p, size_t n) {
  auto* c = static_cast<unsigned char*>(p);
  size_t i = 0;
  for (; i + 4 <= n; i += 4) std::memcpy(c + i, &kGarbage, 4);
  for (; i < n; ++i) c[i] = 0xA5;
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
  // A capturing stream records the copy; host memory in a graph must be pinned (the emulator is
  // stricter than CUDA here: a pageable source would be read at replay, a pageable destination
  // would need a host wait).
  if (q->capture && (sk == Mem::kPageable || dk == Mem::kPageable))
    return invalidate_capture(q, cudaErrorStreamCaptureUnsupported);
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
}  // namespace ds4::emu::rt

namespace ds4::emu {
using namespace rt;

int device_of_range(const void* p, size_t n) {
  State& s = st();
  if (classify(s, p, n) != Mem::kDevice) return -1;
  const auto a = reinterpret_cast<uintptr_t>(p);
  for (size_t d = 0; d < s.dev.size(); ++d)
    if (s.dev[d].base && a >= uintptr_t(s.dev[d].base) && a < uintptr_t(s.dev[d].base) + s.dev[d].vram) return int(d);
  return -1;
}

}  // namespace ds4::emu

using namespace ds4::emu;
using namespace ds4::emu::rt;

// ---- memory ---------------------------------------------------------------------------------------------
cudaError_t cudaMalloc(void** p, size_t n) {
  DS4_EMU_ENTER();
  if (cudaError_t u = unsafe_call(s); u != cudaSuccess) return set_error(u);
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
  if (cudaError_t u = unsafe_call(s); u != cudaSuccess) return set_error(u);
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
  if (cudaError_t u = unsafe_call(s); u != cudaSuccess) return set_error(u);
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
  if (cudaError_t u = unsafe_call(s); u != cudaSuccess) return set_error(u);
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
  if (cudaError_t u = unsafe_call(s); u != cudaSuccess) return set_error(u);
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
  if (cudaError_t u = unsafe_call(s); u != cudaSuccess) return set_error(u);
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
  if (cudaError_t u = unsafe_call(s); u != cudaSuccess) return set_error(u);
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
  if (sync)
    if (cudaError_t u = unsafe_call(s); u != cudaSuccess) return set_error(u);
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
  if (sync)
    if (cudaError_t u = unsafe_call(s); u != cudaSuccess) return set_error(u);
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
