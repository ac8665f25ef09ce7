// kernels/comm.h — collectives of a tensor-parallel rank group (issue 4; DESIGN.md "Numerics
// contract"). A group of R ranks lives in one process, one thread per rank; each rank calls the
// collectives of its own Comm, and every rank of the group must make the same sequence of calls
// with the same counts (as with MPI/NCCL).
//
// Determinism contract: all arithmetic is FP32, and every sum over ranks is taken in RANK ORDER,
// ((p0 + p1) + p2) + ... + p(R-1), the same on every rank, so every rank holds identical bits and
// the result does not depend on timing or on the transport. The NCCL implementation honours this
// by an all-gather followed by an ordered local sum (never ncclAllReduce, whose algorithm choice
// changes the summation order).
//
// Buffers: pointers into the memory of the rank's own device (host memory for the CPU group,
// device memory of the rank's GPU for NCCL). Counts are element counts of float.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "ds4/result.h"

namespace ds4::comm {

/// One rank's endpoint in a group.
class Comm {
 public:
  virtual ~Comm() = default;
  /// This rank's index in [0, size()).
  virtual int rank() const = 0;
  /// Number of ranks R.
  virtual int size() const = 0;
  /// Transport name ("cpu", "nccl").
  virtual const char* name() const = 0;
  /// In place: buf[i] <- ((p0[i] + p1[i]) + ...) + p(R-1)[i], where pr is rank r's buf.
  virtual Result<void> all_reduce_sum_f32(float* buf, int64_t count) = 0;
  /// recv[r*count + i] <- rank r's send[i] for every r (recv holds R*count floats; no aliasing).
  virtual Result<void> all_gather_f32(const float* send, int64_t count, float* recv) = 0;
  /// In place: buf <- rank `root`'s buf on every rank.
  virtual Result<void> broadcast_f32(float* buf, int64_t count, int root) = 0;
  /// Returns when every rank has entered the barrier.
  virtual Result<void> barrier() = 0;
  /// Called by a rank that stops making the group's calls because of an error (outside any
  /// collective): the other ranks' pending and later collectives return an error whose message
  /// is kAbortedMessage instead of waiting for it forever. The group stays aborted until rearm().
  /// Idempotent; any endpoint's thread may call it. Transports that abort: "cpu" (the barrier is
  /// dropped) and "nccl" (ncclCommAbort of every rank's communicator: collectives already
  /// enqueued on a stream end without their data, so host waits on those streams return; the
  /// CUDA device's collectives return kAbortedMessage from then on). Default: nothing (a
  /// transport that cannot abort; its ranks would still wait).
  virtual void abort() {}
  /// Makes an aborted group usable again ("nccl": waits for every rank's device to drain, then
  /// ncclCommInitAll over the same devices; a failure is returned by every later collective).
  /// Call on one endpoint, only while no rank is inside a collective (after every rank thread of
  /// the failed step has returned). No effect on a group that is not aborted. Default: nothing.
  virtual void rearm() {}
};

/// The message of the error a collective returns in an aborted group (Comm::abort).
inline constexpr const char* kAbortedMessage = "tensor-parallel rank group aborted: another rank failed";

/// An in-process CPU group of `ranks` ranks (>= 1): element r is rank r's endpoint. The
/// endpoints share state; they must outlive every call and be used by one thread each.
std::vector<std::unique_ptr<Comm>> make_cpu_group(int ranks);

/// dst[i] = ((parts[0*count + i] + parts[1*count + i]) + ...) + parts[(nparts-1)*count + i]
/// in FP32 (nparts >= 1; parts: [nparts, count]). The one summation order every collective and
/// every canonical shard sum of the engine uses. dst may not alias parts except dst == parts.
void ordered_sum_f32(const float* parts, int nparts, int64_t count, float* dst);

/// True when this build has the NCCL implementation (built with CUDA).
bool have_nccl();

/// A single-process NCCL group over CUDA devices `devices` (ncclCommInitAll): element r is the
/// endpoint of rank r on devices[r], with its own stream. Calls block until the collective has
/// completed on the rank's stream. Errors name the failing NCCL/CUDA call; without CUDA in the
/// build (or without NCCL) the function returns an error.
Result<std::vector<std::unique_ptr<Comm>>> make_nccl_group(std::span<const int> devices);

}  // namespace ds4::comm
