// tests/cuda_emu/nccl_emu.cpp — in-process NCCL over the emulated devices (include/nccl.h).
// A clique is the set of communicators of one unique id. Each rank's collective call enqueues a
// custom item on its stream; the n-th collective of every rank of a clique forms one operation,
// which runs (all ranks at once, reading every send buffer before writing any receive buffer)
// when every rank's item is at the head of its stream with its dependencies done. So a rank
// that never makes the call leaves the others waiting, as on real hardware (the emulator's
// deadlock report names it). Same call sequence on every rank is required (checked: the kind,
// count, type, op and root of the n-th call must match, else the operation aborts). A call on a
// capturing stream is recorded into the graph (cuda_emu_graphs.cpp) and posted at each launch.
// ncclCommAbort(comm) ends comm's rank's part of every pending operation of its clique: its stream
// item completes without running (recv buffers untouched) and the operation can no longer run, so
// the other ranks' parts complete when their own communicators are aborted (as on real NCCL, where
// a peer's kernel waits until its communicator is aborted too). The handle stays valid memory
// (kept, not freed): a later collective on it returns ncclInvalidUsage and queues nothing, and a
// second abort or a destroy of it is reported (on real NCCL these are use-after-free).
#include <nccl.h>

#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "tests/cuda_emu/cuda_emu_internal.h"

namespace {

using ds4::emu::Item;

enum class Kind { kAllReduce, kReduce, kBroadcast, kAllGather, kReduceScatter };

struct Part {
  const void* send = nullptr;
  void* recv = nullptr;
  std::shared_ptr<Item> item;
};
struct Op {
  Kind kind;
  size_t count;  // per-rank element count (AllGather: send count; ReduceScatter: recv count)
  ncclDataType_t type;
  ncclRedOp_t red;
  int root;
  std::vector<Part> parts;
  int posted = 0;
  bool aborted = false;  // a member's communicator was aborted while the op was pending: never runs
};
struct Clique {
  int nranks = 0;
  int joined = 0;
  std::vector<ncclComm*> members;
  std::map<uint64_t, std::shared_ptr<Op>> ops;  // by sequence number
};

}  // namespace

struct ncclComm {
  std::shared_ptr<Clique> clique;
  int rank = 0, device = 0;
  uint64_t seq = 0;
  bool aborted = false;  // ncclCommAbort: the handle is dead (kept in aborted_comms())
};

namespace {

std::map<std::string, std::shared_ptr<Clique>>& cliques() {
  static auto* m = new std::map<std::string, std::shared_ptr<Clique>>();
  return *m;
}
std::condition_variable& join_cv() {
  static auto* cv = new std::condition_variable();
  return *cv;
}
uint64_t g_next_id = 1;
thread_local int t_group_depth = 0;
thread_local std::vector<std::shared_ptr<Clique>> t_pending_joins;

size_t type_bytes(ncclDataType_t t) {
  switch (t) {
    case ncclInt8: case ncclUint8: return 1;
    case ncclFloat16: case ncclBfloat16: return 2;
    case ncclInt32: case ncclUint32: case ncclFloat32: return 4;
    case ncclInt64: case ncclUint64: case ncclFloat64: return 8;
  }
  return 0;
}

template <class T>
void reduce_typed(const std::vector<std::vector<unsigned char>>& in, size_t off, size_t count, ncclRedOp_t op,
                  void* out) {
  const size_t R = in.size();
  for (size_t i = 0; i < count; ++i) {
    T acc;
    std::memcpy(&acc, in[0].data() + (off + i) * sizeof(T), sizeof(T));
    for (size_t r = 1; r < R; ++r) {  // rank order
      T v;
      std::memcpy(&v, in[r].data() + (off + i) * sizeof(T), sizeof(T));
      switch (op) {
        case ncclSum: case ncclAvg: acc = T(acc + v); break;
        case ncclProd: acc = T(acc * v); break;
        case ncclMax: acc = v > acc ? v : acc; break;
        case ncclMin: acc = v < acc ? v : acc; break;
      }
    }
    if (op == ncclAvg) acc = T(acc / T(R));
    std::memcpy(static_cast<unsigned char*>(out) + i * sizeof(T), &acc, sizeof(T));
  }
}

void reduce(ncclDataType_t t, const std::vector<std::vector<unsigned char>>& in, size_t off, size_t count,
            ncclRedOp_t op, void* out) {
  switch (t) {
    case ncclInt8: reduce_typed<int8_t>(in, off, count, op, out); break;
    case ncclUint8: reduce_typed<uint8_t>(in, off, count, op, out); break;
    case ncclInt32: reduce_typed<int32_t>(in, off, count, op, out); break;
    case ncclUint32: reduce_typed<uint32_t>(in, off, count, op, out); break;
    case ncclInt64: reduce_typed<int64_t>(in, off, count, op, out); break;
    case ncclUint64: reduce_typed<uint64_t>(in, off, count, op, out); break;
    case ncclFloat32: reduce_typed<float>(in, off, count, op, out); break;
    case ncclFloat64: reduce_typed<double>(in, off, count, op, out); break;
    default:
      std::fprintf(stderr, "nccl_emu: reductions of 16-bit types are not emulated\n");
      std::abort();
  }
}

/// Runs the whole operation for every rank (called by the scheduler with device memory accessible).
void run_op(Op& op) {
  const size_t R = op.parts.size(), es = type_bytes(op.type);
  const size_t send_elems = op.kind == Kind::kReduceScatter ? op.count * R : op.count;
  std::vector<std::vector<unsigned char>> in(R);
  for (size_t r = 0; r < R; ++r)
    if (op.kind != Kind::kBroadcast || int(r) == op.root) {
      in[r].resize(send_elems * es);
      std::memcpy(in[r].data(), op.parts[r].send, send_elems * es);
    }
  for (size_t r = 0; r < R; ++r) {
    void* out = op.parts[r].recv;
    switch (op.kind) {
      case Kind::kAllReduce: reduce(op.type, in, 0, op.count, op.red, out); break;
      case Kind::kReduce:
        if (int(r) == op.root) reduce(op.type, in, 0, op.count, op.red, out);
        break;
      case Kind::kBroadcast: std::memcpy(out, in[size_t(op.root)].data(), op.count * es); break;
      case Kind::kAllGather:
        for (size_t k = 0; k < R; ++k) std::memcpy(static_cast<unsigned char*>(out) + k * op.count * es, in[k].data(), op.count * es);
        break;
      case Kind::kReduceScatter: reduce(op.type, in, r * op.count, op.count, op.red, out); break;
    }
  }
}

/// Marks every rank's item done and breaks the op <-> item reference cycle.
void finish(Op& op, const Item* running) {
  for (auto& p : op.parts) {
    std::shared_ptr<Item> it = std::move(p.item);
    it->done = true;
    it->ready_fn = nullptr;
    if (it.get() != running) it->run_fn = nullptr;
  }
}

/// A distinct tag per collective kind (the graph node's "function" for cudaGraphExecUpdate).
const char kKindTags[5] = {};

/// post() with ds4::emu::lock() held. On a capturing stream the call is recorded as a graph node
/// that posts it again (taking the next sequence number then) at each launch of the graph.
ncclResult_t post_locked(Kind kind, const void* send, void* recv, size_t count, ncclDataType_t type, ncclRedOp_t red,
                         int root, ncclComm_t comm, cudaStream_t stream) {
  if (!comm || !comm->clique) return ncclInvalidArgument;
  if (comm->aborted) {
    std::fprintf(stderr, "nccl_emu: a collective on rank %d's aborted communicator: ignored (use after free on real NCCL)\n",
                 comm->rank);
    return ncclInvalidUsage;
  }
  if (type_bytes(type) == 0 || int(red) < 0 || int(red) > 4) return ncclInvalidArgument;
  Clique& c = *comm->clique;
  if (c.joined < c.nranks) return ncclInvalidUsage;  // ncclGroupEnd not reached yet
  if ((kind == Kind::kBroadcast || kind == Kind::kReduce) && (root < 0 || root >= c.nranks)) return ncclInvalidArgument;
  ds4::emu::Stream* q = ds4::emu::resolve_stream(stream);
  if (!q || q->device != comm->device) return ncclInvalidArgument;
  const size_t es = type_bytes(type), R = size_t(c.nranks);
  const size_t send_bytes = (kind == Kind::kReduceScatter ? count * R : count) * es;
  const size_t recv_bytes = (kind == Kind::kAllGather ? count * R : count) * es;
  const bool needs_send = kind != Kind::kBroadcast || root == comm->rank;
  const bool needs_recv = kind != Kind::kReduce || root == comm->rank;
  if (count > 0) {
    if (needs_send && ds4::emu::device_of_range(send, send_bytes) != comm->device) return ncclInvalidArgument;
    if (needs_recv && ds4::emu::device_of_range(recv, recv_bytes) != comm->device) return ncclInvalidArgument;
  }
  if (q->capture) {
    ds4::emu::GraphNode n;
    n.kind = Item::kCustom;
    n.tag = &kKindTags[int(kind)];
    n.enqueue = [=](ds4::emu::Stream* t) {
      (void)post_locked(kind, send, recv, count, type, red, root, comm, reinterpret_cast<cudaStream_t>(t));
    };
    ds4::emu::capture_node(q, std::move(n));
    return ncclSuccess;
  }
  auto& slot = c.ops[comm->seq++];
  if (!slot) {
    slot = std::make_shared<Op>(Op{kind, count, type, red, root, std::vector<Part>(R), 0});
  } else if (slot->kind != kind || slot->count != count || slot->type != type || slot->red != red ||
             slot->root != root) {
    std::fprintf(stderr, "nccl_emu: rank %d's collective #%llu differs from another rank's (kind, count, type, op or root)\n",
                 comm->rank, static_cast<unsigned long long>(comm->seq - 1));
    std::abort();
  }
  std::shared_ptr<Op> op = slot;
  const uint64_t seq = comm->seq - 1;
  auto it = std::make_shared<Item>();
  it->kind = Item::kCustom;
  Part& p = op->parts[size_t(comm->rank)];
  p.send = send;
  p.recv = recv;
  p.item = it;
  ++op->posted;
  std::weak_ptr<Clique> wc = comm->clique;
  it->ready_fn = [op] {
    if (op->aborted || op->posted < int(op->parts.size())) return false;
    for (const auto& q2 : op->parts)
      if (!ds4::emu::head_and_deps_done(*q2.item)) return false;
    return true;
  };
  Item* raw = it.get();
  it->run_fn = [op, wc, seq, raw] {
    if (op->count > 0) run_op(*op);
    finish(*op, raw);
    if (auto cl = wc.lock()) cl->ops.erase(seq);
  };
  ds4::emu::enqueue(q, it);
  return ncclSuccess;
}

/// Posts rank comm's part of a collective on `stream` (see the file comment).
ncclResult_t post(Kind kind, const void* send, void* recv, size_t count, ncclDataType_t type, ncclRedOp_t red,
                  int root, ncclComm_t comm, cudaStream_t stream) {
  std::unique_lock<std::mutex> lk(ds4::emu::lock());
  return post_locked(kind, send, recv, count, type, red, root, comm, stream);
}

}  // namespace


// ---- API ----------------------------------------------------------------------------------------------
const char* ncclGetErrorString(ncclResult_t r) {
  switch (r) {
    case ncclSuccess: return "no error";
    case ncclUnhandledCudaError: return "unhandled cuda error";
    case ncclSystemError: return "unhandled system error";
    case ncclInternalError: return "internal error";
    case ncclInvalidArgument: return "invalid argument";
    case ncclInvalidUsage: return "invalid usage";
    case ncclRemoteError: return "remote process exited or there was a network error";
    case ncclInProgress: return "NCCL operation in progress";
  }
  return "unknown result code";
}

ncclResult_t ncclGetVersion(int* v) {
  if (!v) return ncclInvalidArgument;
  *v = NCCL_VERSION_CODE;
  return ncclSuccess;
}

ncclResult_t ncclGetUniqueId(ncclUniqueId* id) {
  if (!id) return ncclInvalidArgument;
  std::lock_guard<std::mutex> g(ds4::emu::lock());
  std::memset(id->internal, 0, sizeof id->internal);
  std::snprintf(id->internal, sizeof id->internal, "ds4-nccl-emu-%llu", static_cast<unsigned long long>(g_next_id++));
  return ncclSuccess;
}

namespace {
/// Waits (lock held) until clique c has all its ranks; aborts after DS4_CUDA_EMU_DEADLOCK_S.
ncclResult_t wait_joined(std::unique_lock<std::mutex>& lk, Clique& c) {
  const char* e = std::getenv("DS4_CUDA_EMU_DEADLOCK_S");
  const auto limit = std::chrono::seconds(e && *e ? std::atoi(e) : 60);
  if (!join_cv().wait_for(lk, limit, [&] { return c.joined == c.nranks; })) {
    std::fprintf(stderr, "nccl_emu: ncclCommInitRank: only %d of %d ranks joined\n", c.joined, c.nranks);
    std::abort();
  }
  return ncclSuccess;
}
}  // namespace

ncclResult_t ncclCommInitRank(ncclComm_t* comm, int nranks, ncclUniqueId id, int rank) {
  if (!comm || nranks < 1 || rank < 0 || rank >= nranks) return ncclInvalidArgument;
  int dev = 0;
  cudaGetDevice(&dev);
  std::unique_lock<std::mutex> lk(ds4::emu::lock());
  const std::string key(id.internal, strnlen(id.internal, sizeof id.internal));
  auto& c = cliques()[key];
  if (!c) {
    c = std::make_shared<Clique>();
    c->nranks = nranks;
    c->members.assign(size_t(nranks), nullptr);
  }
  if (c->nranks != nranks || c->members[size_t(rank)]) return ncclInvalidUsage;
  auto* m = new ncclComm();
  m->clique = c;
  m->rank = rank;
  m->device = dev;
  c->members[size_t(rank)] = m;
  ++c->joined;
  join_cv().notify_all();
  *comm = m;
  if (c->joined == c->nranks) cliques().erase(key);  // complete: the id may not be reused
  if (t_group_depth > 0) {
    t_pending_joins.push_back(c);
    return ncclSuccess;
  }
  return wait_joined(lk, *c);
}

ncclResult_t ncclCommInitAll(ncclComm_t* comms, int ndev, const int* devlist) {
  if (!comms || ndev < 1) return ncclInvalidArgument;
  int n = 0;
  cudaGetDeviceCount(&n);
  for (int r = 0; r < ndev; ++r) {
    const int d = devlist ? devlist[r] : r;
    if (d < 0 || d >= n) return ncclInvalidArgument;
  }
  std::lock_guard<std::mutex> g(ds4::emu::lock());
  auto c = std::make_shared<Clique>();
  c->nranks = c->joined = ndev;
  for (int r = 0; r < ndev; ++r) {
    auto* m = new ncclComm();
    m->clique = c;
    m->rank = r;
    m->device = devlist ? devlist[r] : r;
    c->members.push_back(m);
    comms[r] = m;
  }
  return ncclSuccess;
}

namespace {
/// Aborted communicators: kept (reachable) so that a later use of the handle is reported.
std::vector<ncclComm*>& aborted_comms() {
  static auto* v = new std::vector<ncclComm*>();
  return *v;
}
}  // namespace

ncclResult_t ncclCommDestroy(ncclComm_t comm) {
  if (!comm) return ncclInvalidArgument;
  std::lock_guard<std::mutex> g(ds4::emu::lock());
  if (comm->aborted) {
    std::fprintf(stderr, "nccl_emu: ncclCommDestroy of rank %d's aborted communicator (freed by ncclCommAbort)\n", comm->rank);
    return ncclInvalidUsage;
  }
  delete comm;  // queued operations keep the clique alive
  return ncclSuccess;
}

ncclResult_t ncclCommAbort(ncclComm_t comm) {
  if (!comm) return ncclInvalidArgument;
  std::lock_guard<std::mutex> g(ds4::emu::lock());
  if (comm->aborted) {
    std::fprintf(stderr, "nccl_emu: ncclCommAbort of rank %d's communicator twice\n", comm->rank);
    return ncclInvalidUsage;
  }
  comm->aborted = true;
  aborted_comms().push_back(comm);
  Clique& c = *comm->clique;
  bool all_aborted = true;
  for (const ncclComm* m : c.members) all_aborted = all_aborted && m && m->aborted;
  for (auto& [seq, op] : c.ops) {
    op->aborted = true;  // this rank never takes part again: the op cannot run
    Part& p = op->parts[size_t(comm->rank)];
    if (std::shared_ptr<Item> it = std::move(p.item)) {
      it->done = true;  // leaves its stream untouched-recv; popped when it reaches the head
      it->ready_fn = nullptr;
      it->run_fn = nullptr;
    }
  }
  if (all_aborted) c.ops.clear();  // every part has ended
  ds4::emu::notify();  // host waits on the streams of the ended parts may go on
  return ncclSuccess;
}

ncclResult_t ncclCommCount(const ncclComm_t comm, int* count) {
  if (!comm || !count) return ncclInvalidArgument;
  *count = comm->clique->nranks;
  return ncclSuccess;
}
ncclResult_t ncclCommCuDevice(const ncclComm_t comm, int* device) {
  if (!comm || !device) return ncclInvalidArgument;
  *device = comm->device;
  return ncclSuccess;
}
ncclResult_t ncclCommUserRank(const ncclComm_t comm, int* rank) {
  if (!comm || !rank) return ncclInvalidArgument;
  *rank = comm->rank;
  return ncclSuccess;
}

ncclResult_t ncclGroupStart() {
  ++t_group_depth;
  return ncclSuccess;
}
ncclResult_t ncclGroupEnd() {
  if (t_group_depth <= 0) return ncclInvalidUsage;
  if (--t_group_depth > 0) return ncclSuccess;
  std::unique_lock<std::mutex> lk(ds4::emu::lock());
  std::vector<std::shared_ptr<Clique>> pending;
  pending.swap(t_pending_joins);
  for (auto& c : pending) wait_joined(lk, *c);
  return ncclSuccess;
}

ncclResult_t ncclAllReduce(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype,
                           ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream) {
  return post(Kind::kAllReduce, sendbuff, recvbuff, count, datatype, op, 0, comm, stream);
}
ncclResult_t ncclReduce(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype,
                        ncclRedOp_t op, int root, ncclComm_t comm, cudaStream_t stream) {
  return post(Kind::kReduce, sendbuff, recvbuff, count, datatype, op, root, comm, stream);
}
ncclResult_t ncclBroadcast(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, int root,
                           ncclComm_t comm, cudaStream_t stream) {
  return post(Kind::kBroadcast, sendbuff, recvbuff, count, datatype, ncclSum, root, comm, stream);
}
ncclResult_t ncclAllGather(const void* sendbuff, void* recvbuff, size_t sendcount, ncclDataType_t datatype,
                           ncclComm_t comm, cudaStream_t stream) {
  return post(Kind::kAllGather, sendbuff, recvbuff, sendcount, datatype, ncclSum, 0, comm, stream);
}
ncclResult_t ncclReduceScatter(const void* sendbuff, void* recvbuff, size_t recvcount, ncclDataType_t datatype,
                               ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream) {
  return post(Kind::kReduceScatter, sendbuff, recvbuff, recvcount, datatype, op, 0, comm, stream);
}
