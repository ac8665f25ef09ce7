// kernels/cuda/comm_nccl.h — what the CUDA device (device_cuda.cpp) needs of an endpoint of the
// NCCL rank group (comm_nccl.cu, kernels/comm.h make_nccl_group): whether it is one and its device,
// and an enqueue of ncclAllGather on the device's own compute stream (no host synchronisation)
// instead of the endpoint's blocking Comm methods. The communicator is looked up at each call
// (never kept by the caller): Comm::abort() destroys it and Comm::rearm() makes a new one. Only in
// builds with NCCL (DS4_HAVE_NCCL) and in the emulated backend (tests/cuda_emu's nccl.h).
#pragma once

#include <nccl.h>

#include <cstddef>
#include <functional>

#include "kernels/comm.h"

namespace ds4::comm {

/// The NCCL side of one rank endpoint.
struct NcclEndpoint {
  bool nccl = false;  ///< `c` is an endpoint of make_nccl_group
  int device = -1;    ///< CUDA ordinal its communicator was made on
};

/// {true, device} when `c` is an endpoint of make_nccl_group; {false, -1} for any other Comm (a
/// CPU group's).
NcclEndpoint nccl_endpoint(const Comm& c);

/// Enqueues endpoint `c`'s part of an ncclAllGather of `count` floats per rank (send: `count`,
/// recv: size() * count, device memory of c's device) on `stream`, which must belong to c's
/// device; returns without waiting. Errors: kAbortedMessage (exactly) when the group is aborted
/// (Comm::abort; until rearm), the reason when rearm could not re-make the group, NCCL's error
/// (naming ncclAllGather), or `c` not being an NCCL endpoint. After an abort a collective already
/// enqueued completes without its data (its stream goes on; recv undefined).
Result<void> nccl_all_gather(const Comm& c, const void* send, void* recv, size_t count, cudaStream_t stream);

/// Runs `fn` (a launch of captured work holding `c`'s collectives: a graph region's) while `c`'s
/// group cannot be aborted, and returns true; returns false without running it when the group is
/// aborted (or could not be re-made): the captured collectives name a communicator that is gone.
/// `c` must be an NCCL endpoint.
bool nccl_run_unless_aborted(const Comm& c, const std::function<void()>& fn);

}  // namespace ds4::comm
