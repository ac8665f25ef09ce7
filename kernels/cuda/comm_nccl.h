// kernels/cuda/comm_nccl.h — what the CUDA device (device_cuda.cpp) needs of an endpoint of the
// NCCL rank group (comm_nccl.cu, kernels/comm.h make_nccl_group): its communicator and device, so
// that the device enqueues the collectives on its own compute stream (no host synchronisation)
// instead of calling the endpoint's blocking Comm methods. Only in builds with NCCL (DS4_HAVE_NCCL)
// and in the emulated backend (tests/cuda_emu's nccl.h).
#pragma once

#include <nccl.h>

#include "kernels/comm.h"

namespace ds4::comm {

/// The NCCL side of one rank endpoint.
struct NcclEndpoint {
  ncclComm_t comm = nullptr;  ///< the rank's communicator (ncclCommInitAll); nullptr: not NCCL
  int device = -1;            ///< CUDA ordinal the communicator was made on
};

/// The communicator and device of `c` when `c` is an endpoint of make_nccl_group; {nullptr, -1}
/// for any other Comm (a CPU group's). The endpoint keeps ownership; valid while `c` lives.
NcclEndpoint nccl_endpoint(const Comm& c);

}  // namespace ds4::comm
