// tests/cuda_emu/cuda_emu_streams.cpp — the emulated CUDA runtime's streams (ordered queues run
// by the scheduler), events (markers; a wait is on the record current at the call) and host
// functions (run in stream order with device memory protected); their interplay with stream
// capture (cuda_emu_graphs.cpp): conflicting waits fail and invalidate the capture.
#include <algorithm>
#include <chrono>

#include "tests/cuda_emu/cuda_emu_state.h"

using namespace ds4::emu;
using namespace ds4::emu::rt;

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
  if (q->capture) return invalidate_capture(q, cudaErrorStreamCaptureUnsupported);
  if (cudaError_t e = unsafe_call(s); e != cudaSuccess) return set_error(e);
  drive(lk, [&] { return stream_idle(q); });
  return cudaSuccess;
}

cudaError_t cudaStreamQuery(cudaStream_t h) {
  DS4_EMU_ENTER();
  Stream* q = resolve_stream(h);
  if (!q) return set_error(cudaErrorInvalidResourceHandle);
  if (q->capture) return invalidate_capture(q, cudaErrorStreamCaptureUnsupported);
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
  const std::shared_ptr<Capture> cap = e->captured.lock();
  if (q->capture) {  // inside a capture: only an event recorded earlier in the same capture
    if (cap == q->capture) return cudaSuccess;  // in-stream order (the graph is linear)
    return invalidate_capture(q, cap ? cudaErrorStreamCaptureMerge : cudaErrorStreamCaptureIsolation);
  }
  if (cap) return set_error(cudaErrorNotSupported);  // joining a stream into a capture: not emulated
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
  if (q->capture) {  // an event record node: each launch of the graph records e again
    GraphNode n;
    n.kind = Item::kMarker;
    n.enqueue = [e](Stream* t) {
      auto it = make_item(Item::kMarker);
      enqueue(t, it);
      if (st().live_events.count(e)) e->rec = it;
    };
    capture_node(q, std::move(n));
    e->captured = q->capture;
    return cudaSuccess;
  }
  auto it = make_item(Item::kMarker);
  enqueue(q, it);
  e->rec = it;
  e->captured.reset();
  return cudaSuccess;
}

cudaError_t cudaEventSynchronize(cudaEvent_t e) {
  DS4_EMU_ENTER();
  if (!s.live_events.count(e)) return set_error(cudaErrorInvalidResourceHandle);
  if (!e->captured.expired()) return set_error(cudaErrorCapturedEvent);
  if (cudaError_t u = unsafe_call(s); u != cudaSuccess) return set_error(u);
  const std::shared_ptr<Item> r = e->rec;
  if (r) drive(lk, [&] { return r->done; });
  return cudaSuccess;
}

cudaError_t cudaEventQuery(cudaEvent_t e) {
  DS4_EMU_ENTER();
  if (!s.live_events.count(e)) return set_error(cudaErrorInvalidResourceHandle);
  if (!e->captured.expired()) return set_error(cudaErrorCapturedEvent);
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
