// kernels/comm_nccl_stub.cpp — have_nccl / make_nccl_group of a build without NCCL (kernels/comm.h).
// A file of its own (not in comm_cpu.cpp) so that a binary linking an NCCL implementation as
// object files (the emulated CUDA backend of tests/cuda_engine, which includes comm_nccl.cu)
// never pulls this archive member, whose definitions would clash with it.
#include "kernels/comm.h"

namespace ds4::comm {

#ifndef DS4_HAVE_NCCL
bool have_nccl() { return false; }

Result<std::vector<std::unique_ptr<Comm>>> make_nccl_group(std::span<const int>) {
  return Error{"make_nccl_group: this build has no CUDA/NCCL (configure with -DDS4_CUDA=ON)"};
}
#endif

}  // namespace ds4::comm
