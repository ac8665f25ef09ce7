// tests/cuda_emu/cuda_emu_graphs.cpp — stream capture and CUDA graphs in the emulated runtime
// (CUDA Runtime API "Stream Capture", "Graph Management"; CUDA Programming Guide "CUDA Graphs").
//
// - cudaStreamBeginCapture(s, mode): until cudaStreamEndCapture, every item enqueued on s (kernel
//   launches with their by-value arguments as converted at the launch, async copies and memsets,
//   host functions, event records, in-process NCCL collectives) is recorded as a node of a linear
//   graph instead of being queued; nothing of it runs. Work queued on s before the capture began
//   still runs as usual.
// - cudaGraphLaunch(exec, s) queues a fresh item per node on s, in capture order: a replay runs
//   the recorded work with the recorded arguments (kernels: a new random block order).
// - cudaGraphExecUpdate(exec, g) takes g's nodes into exec when the topology matches (same node
//   count, kinds and kernel functions / collective kinds), else cudaErrorGraphExecUpdateFailure
//   with the reason in the result info; exec keeps its nodes then.
// - Calls that conflict with a capture fail and invalidate it (cudaStreamEndCapture then returns
//   cudaErrorStreamCaptureInvalidated and no graph): a synchronize or query of a capturing stream,
//   cudaDeviceSynchronize while a stream of the device captures, an async copy from or to pageable
//   host memory on a capturing stream (stricter than CUDA, which captures some of them: the
//   emulator keeps host memory out of graphs), a cudaStreamWaitEvent of a capturing stream on an
//   event recorded outside its capture (cudaErrorStreamCaptureIsolation). Query / synchronize of
//   an event last recorded inside an ongoing capture: cudaErrorCapturedEvent.
// - "Potentially unsafe" calls (cudaMalloc, cudaFree, host allocation and registration, the
//   synchronous copies and memsets, synchronizing another stream or an event) follow the capture
//   mode (unsafe_call): refused for the capturing thread in Global and ThreadLocal mode, allowed
//   in Relaxed mode; every other thread (whose own mode is CUDA's default, Global) is refused
//   while a Global capture runs.
// Not emulated: cross-stream capture (fork / join through events: a wait of a non-capturing stream
// on an event recorded in a capture returns cudaErrorNotSupported), graphs built node by node,
// child graphs (a launch into a capturing stream returns cudaErrorNotSupported), graph memory
// nodes, cudaThreadExchangeStreamCaptureMode.
#include <algorithm>
#include <numeric>

#include "tests/cuda_emu/cuda_emu_state.h"

/// A captured graph: its nodes in capture order (linear: each depends on the one before).
struct CUgraph_st {
  std::vector<ds4::emu::GraphNode> nodes;
};
/// An instantiated graph: the nodes a launch queues (replaced by cudaGraphExecUpdate).
struct CUgraphExec_st {
  std::vector<ds4::emu::GraphNode> nodes;
};

namespace ds4::emu {
using namespace rt;

namespace {

std::set<const CUgraph_st*>& live_graphs() {
  static auto* s = new std::set<const CUgraph_st*>();
  return *s;
}
std::set<const CUgraphExec_st*>& live_execs() {
  static auto* s = new std::set<const CUgraphExec_st*>();
  return *s;
}

/// A fresh, unqueued copy of template item `t` (the same work and arguments).
std::shared_ptr<Item> clone(const Item& t) {
  auto c = std::make_shared<Item>(t);
  c->stream = nullptr;
  c->deps.clear();  // implicit (legacy) dependencies are added again by enqueue()
  c->done = false;
  c->not_before = 0;
  c->next_block = 0;
  if (c->kind == Item::kKernel) {  // a new block order per replay
    State& s = st();
    c->perm_c = s.rng() % c->total_blocks;
    do c->perm_a = 1 + s.rng() % c->total_blocks;
    while (std::gcd(c->perm_a, c->total_blocks) != 1);
  }
  return c;
}

}  // namespace

bool capture_node(Stream* q, GraphNode node) {
  if (!q->capture) return false;
  if (!q->capture->invalidated) {
    q->capture->nodes.push_back(std::move(node));
    ++st().stats.captured_nodes;
  }
  return true;
}

namespace rt {

void capture_item(Stream* q, std::shared_ptr<Item> it) {
  GraphNode n;
  n.kind = it->kind;
  n.tag = it->kind == Item::kKernel ? it->k.func : nullptr;
  std::shared_ptr<const Item> tmpl = std::move(it);
  n.enqueue = [tmpl](Stream* target) { enqueue(target, clone(*tmpl)); };
  capture_node(q, std::move(n));
}

cudaError_t unsafe_call(State& s) {
  const std::thread::id me = std::this_thread::get_id();
  for (Capture* c : s.captures) {
    if (c->mode == cudaStreamCaptureModeRelaxed) continue;
    if (c->thread == me) {
      c->invalidated = true;
      return cudaErrorStreamCaptureUnsupported;
    }
    if (c->mode == cudaStreamCaptureModeGlobal) return cudaErrorStreamCaptureUnsupported;
  }
  return cudaSuccess;
}

cudaError_t invalidate_capture(Stream* q, cudaError_t e) {
  if (q && q->capture) q->capture->invalidated = true;
  return set_error(e);
}

}  // namespace rt
}  // namespace ds4::emu

using namespace ds4::emu;
using namespace ds4::emu::rt;

cudaError_t cudaStreamBeginCapture(cudaStream_t h, cudaStreamCaptureMode mode) {
  DS4_EMU_ENTER();
  if (h == nullptr || h == cudaStreamLegacy || h == cudaStreamPerThread)
    return set_error(cudaErrorStreamCaptureUnsupported);  // the legacy stream cannot capture
  Stream* q = resolve_stream(h);
  if (!q) return set_error(cudaErrorInvalidResourceHandle);
  if (mode != cudaStreamCaptureModeGlobal && mode != cudaStreamCaptureModeThreadLocal &&
      mode != cudaStreamCaptureModeRelaxed)
    return set_error(cudaErrorInvalidValue);
  if (q->capture) return set_error(cudaErrorIllegalState);
  auto c = std::make_shared<Capture>();
  c->origin = q;
  c->mode = mode;
  c->thread = std::this_thread::get_id();
  q->capture = c;
  s.captures.insert(c.get());
  return cudaSuccess;
}

cudaError_t cudaStreamEndCapture(cudaStream_t h, cudaGraph_t* graph) {
  DS4_EMU_ENTER();
  if (!graph) return set_error(cudaErrorInvalidValue);
  *graph = nullptr;
  Stream* q = resolve_stream(h);
  if (!q) return set_error(cudaErrorInvalidResourceHandle);
  if (!q->capture) return set_error(cudaErrorIllegalState);
  std::shared_ptr<Capture> c = q->capture;
  if (c->mode != cudaStreamCaptureModeRelaxed && c->thread != std::this_thread::get_id())
    return set_error(cudaErrorStreamCaptureWrongThread);
  q->capture.reset();
  s.captures.erase(c.get());
  if (c->invalidated) return set_error(cudaErrorStreamCaptureInvalidated);
  auto* g = new CUgraph_st();
  g->nodes = std::move(c->nodes);
  live_graphs().insert(g);
  *graph = g;
  return cudaSuccess;
}

cudaError_t cudaStreamIsCapturing(cudaStream_t h, cudaStreamCaptureStatus* status) {
  DS4_EMU_ENTER();
  if (!status) return set_error(cudaErrorInvalidValue);
  Stream* q = resolve_stream(h);
  if (!q) return set_error(cudaErrorInvalidResourceHandle);
  *status = !q->capture                ? cudaStreamCaptureStatusNone
            : q->capture->invalidated ? cudaStreamCaptureStatusInvalidated
                                      : cudaStreamCaptureStatusActive;
  return cudaSuccess;
}

cudaError_t cudaGraphInstantiate(cudaGraphExec_t* exec, cudaGraph_t graph, unsigned long long) {
  DS4_EMU_ENTER();
  if (!exec || !live_graphs().count(graph)) return set_error(cudaErrorInvalidValue);
  auto* e = new CUgraphExec_st();
  e->nodes = graph->nodes;
  live_execs().insert(e);
  *exec = e;
  return cudaSuccess;
}

cudaError_t cudaGraphLaunch(cudaGraphExec_t exec, cudaStream_t h) {
  DS4_EMU_ENTER();
  if (!live_execs().count(exec)) return set_error(cudaErrorInvalidValue);
  Stream* q = resolve_stream(h);
  if (!q) return set_error(cudaErrorInvalidResourceHandle);
  if (q->capture) return set_error(cudaErrorNotSupported);  // child graphs are not emulated
  for (const GraphNode& n : exec->nodes) n.enqueue(q);
  ++s.stats.graph_launches;
  return cudaSuccess;
}

cudaError_t cudaGraphExecUpdate(cudaGraphExec_t exec, cudaGraph_t graph, cudaGraphExecUpdateResultInfo* info) {
  DS4_EMU_ENTER();
  if (!live_execs().count(exec) || !live_graphs().count(graph)) return set_error(cudaErrorInvalidValue);
  cudaGraphExecUpdateResult r = cudaGraphExecUpdateSuccess;
  if (exec->nodes.size() != graph->nodes.size()) {
    r = cudaGraphExecUpdateErrorTopologyChanged;
  } else {
    for (size_t i = 0; i < exec->nodes.size() && r == cudaGraphExecUpdateSuccess; ++i)
      if (exec->nodes[i].kind != graph->nodes[i].kind)
        r = cudaGraphExecUpdateErrorNodeTypeChanged;
      else if (exec->nodes[i].tag != graph->nodes[i].tag)
        r = cudaGraphExecUpdateErrorFunctionChanged;
  }
  if (info) *info = cudaGraphExecUpdateResultInfo{r, nullptr, nullptr};
  if (r != cudaGraphExecUpdateSuccess) return set_error(cudaErrorGraphExecUpdateFailure);
  exec->nodes = graph->nodes;  // later launches queue the new nodes; launches made keep theirs
  return cudaSuccess;
}

cudaError_t cudaGraphExecDestroy(cudaGraphExec_t exec) {
  DS4_EMU_ENTER();
  if (!live_execs().erase(exec)) return set_error(cudaErrorInvalidValue);
  delete exec;  // queued launches own their items
  return cudaSuccess;
}

cudaError_t cudaGraphDestroy(cudaGraph_t graph) {
  DS4_EMU_ENTER();
  if (!live_graphs().erase(graph)) return set_error(cudaErrorInvalidValue);
  delete graph;
  return cudaSuccess;
}

cudaError_t cudaGraphGetNodes(cudaGraph_t graph, cudaGraphNode_t* nodes, size_t* count) {
  DS4_EMU_ENTER();
  if (!count || !live_graphs().count(graph)) return set_error(cudaErrorInvalidValue);
  if (nodes) return set_error(cudaErrorNotSupported);  // node handles are not emulated: count only
  *count = graph->nodes.size();
  return cudaSuccess;
}
