// tests/cuda_emu/cuda_emu_internal.h — the emulator's scheduler interface shared by the runtime
// (cuda_emu_scheduler.cpp, files listed in cuda_emu_state.h) and the in-process NCCL (nccl_emu.cpp).
// Internal to the emulator.
#pragma once

#include <chrono>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "tests/cuda_emu/cuda_emu.h"

namespace ds4::emu {

struct Stream;

/// One unit of stream work. It runs when it is the head of its stream, every dependency is done
/// and ready_fn (if any) says so; run_fn (if any) does the work of a custom item.
struct Item {
  enum Kind { kKernel, kCopy, kCopy2D, kMemset, kMarker, kHostFn, kCustom } kind = kMarker;
  Stream* stream = nullptr;
  std::vector<std::shared_ptr<Item>> deps;
  bool done = false;
  // Legacy default stream only: the item may not start before the scheduler has executed this
  // many steps in total (a random delay drawn at enqueue, see enqueue()), unless nothing else can
  // run. Models the legacy stream as an independent queue that can lag behind non-blocking streams.
  uint64_t not_before = 0;
  // kKernel
  KernelLaunch k;
  uint64_t total_blocks = 0, next_block = 0, perm_a = 1, perm_c = 0;
  // kCopy / kCopy2D / kMemset
  void* dst = nullptr;
  const void* src = nullptr;
  size_t n = 0, width = 0, height = 0, dpitch = 0, spitch = 0;
  std::vector<unsigned char> snapshot;  // pageable source copied at enqueue
  int value = 0;
  // kHostFn
  cudaHostFn_t fn = nullptr;
  void* user = nullptr;
  // kMarker (event record)
  std::chrono::steady_clock::time_point when{};
  // kCustom
  std::function<bool()> ready_fn;
  std::function<void()> run_fn;
};

/// One node of a captured graph (cuda_emu_graphs.cpp): how to queue its work again, as a fresh
/// item, on the stream a cudaGraphLaunch names. `tag` and `kind` are what cudaGraphExecUpdate
/// compares (the kernel function, or the collective's kind).
struct GraphNode {
  int kind = 0;                // Item::Kind
  const void* tag = nullptr;   // kernel: its function; custom: a tag of the caller
  std::function<void(Stream* target)> enqueue;  // caller holds lock()
};

/// An ongoing stream capture (cudaStreamBeginCapture .. cudaStreamEndCapture) of one stream: the
/// work enqueued on it meanwhile is recorded as nodes instead of being queued.
struct Capture {
  Stream* origin = nullptr;
  int mode = 0;  // cudaStreamCaptureMode
  std::thread::id thread;  // the thread that began it
  bool invalidated = false;  // a call conflicted with the capture: EndCapture fails
  std::vector<GraphNode> nodes;
};

/// An emulated stream: an ordered queue of items on one device.
struct Stream {
  int device = 0;
  bool blocking = true;   // synchronises with the legacy default stream
  bool legacy = false;
  bool destroyed = false;
  std::deque<std::shared_ptr<Item>> q;
  std::shared_ptr<Item> tail;  // the last item enqueued (possibly done)
  std::shared_ptr<Capture> capture;  // non-null while the stream is capturing
};

/// The one emulator lock: held by every API call and by the thread that executes stream work.
std::mutex& lock();
/// Resolves a stream handle (null / legacy / per-thread = the current device's legacy stream);
/// null when the handle is not a live stream. Caller holds lock().
Stream* resolve_stream(cudaStream_t s);
/// Appends `it` to `s` with the legacy-stream implicit dependencies; an item of a legacy stream
/// also gets its random start delay (Item::not_before). Caller holds lock().
void enqueue(Stream* s, std::shared_ptr<Item> it);
/// When `q` is capturing: records `node` in its capture (dropped if the capture was invalidated)
/// and returns true; false when `q` is not capturing. Caller holds lock().
bool capture_node(Stream* q, GraphNode node);
/// True when `it` is its stream's head and all its dependencies are done. Caller holds lock().
bool head_and_deps_done(const Item& it);
/// Runs stream work until pred() holds (waits for other host threads' work if none is runnable;
/// aborts naming the stuck streams after DS4_CUDA_EMU_DEADLOCK_S seconds, default 60).
void drive(std::unique_lock<std::mutex>& lk, const std::function<bool()>& pred);
/// Wakes the host threads waiting in drive() (work became runnable or done outside a step, e.g. a
/// collective ended by ncclCommAbort). Caller holds lock().
void notify();
/// The calling host thread's current device.
int current_device();
/// Number of emulated devices.
int device_count();
/// Device whose memory holds [p, p+n) inside one live allocation, or -1.
int device_of_range(const void* p, size_t n);
/// Sets the calling thread's last error (unless e is cudaSuccess) and returns e.
cudaError_t set_error(cudaError_t e);

}  // namespace ds4::emu
