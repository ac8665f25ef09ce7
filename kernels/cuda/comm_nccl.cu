// kernels/cuda/comm_nccl.cu — the NCCL rank group of kernels/comm.h: one process, one CUDA device
// and one stream per rank, communicators from ncclCommInitAll; FP32 only. The all-reduce is an
// ncclAllGather into a scratch buffer followed by ordered_sum_kernel, which adds the R slices in
// rank order on every rank — never ncclAllReduce, whose ring/tree choice changes the order.
// Compiled only when CUDA and NCCL are found (kernels/cuda/CMakeLists.txt, DS4_HAVE_NCCL), and
// against the CUDA/NCCL emulator for tp_nccl_emu_test (tests/tp, tests/cuda_emu).
#include <cuda_runtime.h>
#include <nccl.h>

#include <string>

#include "kernels/comm.h"
#include "kernels/cuda/comm_nccl.h"
#include "kernels/cuda/launch.h"

namespace ds4::comm {
namespace {

/// dst[i] = ((parts[i] + parts[count + i]) + ...) + parts[(nparts-1)*count + i] (rank order).
__global__ void ordered_sum_kernel(const float* parts, int nparts, int64_t count, float* dst) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < count; i += stride) {
    float s = parts[i];
    for (int p = 1; p < nparts; ++p) s += parts[p * count + i];
    dst[i] = s;
  }
}

Error cuda_error(const char* what, cudaError_t e) {
  return Error{std::string("nccl group: ") + what + ": " + cudaGetErrorString(e)};
}
Error nccl_error(const char* what, ncclResult_t e) {
  return Error{std::string("nccl group: ") + what + ": " + ncclGetErrorString(e)};
}

#define DS4_CU(call)                                   \
  do {                                                 \
    const cudaError_t ds4_e = (call);                  \
    if (ds4_e != cudaSuccess) return cuda_error(#call, ds4_e); \
  } while (0)
#define DS4_NC(call)                                   \
  do {                                                 \
    const ncclResult_t ds4_e = (call);                 \
    if (ds4_e != ncclSuccess) return nccl_error(#call, ds4_e); \
  } while (0)

class NcclComm final : public Comm {
 public:
  NcclComm(ncclComm_t c, int rank, int size, int device, cudaStream_t s)
      : comm_(c), rank_(rank), size_(size), device_(device), stream_(s) {}
  ~NcclComm() override {
    cudaSetDevice(device_);
    if (scratch_) cudaFree(scratch_);
    if (stream_) cudaStreamDestroy(stream_);
    ncclCommDestroy(comm_);
  }
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  const char* name() const override { return "nccl"; }
  ncclComm_t nccl() const { return comm_; }
  int device() const { return device_; }

  Result<void> all_reduce_sum_f32(float* buf, int64_t count) override {
    if (count == 0) return ok();
    DS4_CU(cudaSetDevice(device_));
    const size_t need = static_cast<size_t>(size_) * static_cast<size_t>(count);
    if (need > scratch_cap_) {
      if (scratch_) DS4_CU(cudaFree(scratch_));
      scratch_ = nullptr;
      DS4_CU(cudaMalloc(&scratch_, need * sizeof(float)));
      scratch_cap_ = need;
    }
    DS4_NC(ncclAllGather(buf, scratch_, static_cast<size_t>(count), ncclFloat, comm_, stream_));
    const int threads = 256;
    const int64_t blocks = std::min<int64_t>((count + threads - 1) / threads, 4096);
    DS4_LAUNCH(ordered_sum_kernel, static_cast<unsigned>(blocks), threads, 0, stream_, scratch_, size_, count, buf);
    DS4_CU(cudaGetLastError());
    DS4_CU(cudaStreamSynchronize(stream_));
    return ok();
  }

  Result<void> all_gather_f32(const float* send, int64_t count, float* recv) override {
    if (count == 0) return ok();
    DS4_CU(cudaSetDevice(device_));
    DS4_NC(ncclAllGather(send, recv, static_cast<size_t>(count), ncclFloat, comm_, stream_));
    DS4_CU(cudaStreamSynchronize(stream_));
    return ok();
  }

  Result<void> broadcast_f32(float* buf, int64_t count, int root) override {
    if (root < 0 || root >= size_)
      return Error{"broadcast_f32: root " + std::to_string(root) + " outside 0.." + std::to_string(size_ - 1)};
    if (count == 0) return ok();
    DS4_CU(cudaSetDevice(device_));
    DS4_NC(ncclBroadcast(buf, buf, static_cast<size_t>(count), ncclFloat, root, comm_, stream_));
    DS4_CU(cudaStreamSynchronize(stream_));
    return ok();
  }

  Result<void> barrier() override {
    // A one-element all-gather every rank must join (its values are not used).
    DS4_CU(cudaSetDevice(device_));
    if (scratch_cap_ < static_cast<size_t>(size_) + 1) {
      if (scratch_) DS4_CU(cudaFree(scratch_));
      scratch_ = nullptr;
      DS4_CU(cudaMalloc(&scratch_, (static_cast<size_t>(size_) + 1) * sizeof(float)));
      scratch_cap_ = static_cast<size_t>(size_) + 1;
    }
    DS4_NC(ncclAllGather(scratch_ + size_, scratch_, 1, ncclFloat, comm_, stream_));
    DS4_CU(cudaStreamSynchronize(stream_));
    return ok();
  }

 private:
  ncclComm_t comm_;
  int rank_, size_, device_;
  cudaStream_t stream_;
  float* scratch_ = nullptr;
  size_t scratch_cap_ = 0;
};

}  // namespace

NcclEndpoint nccl_endpoint(const Comm& c) {
  const auto* n = dynamic_cast<const NcclComm*>(&c);
  return n ? NcclEndpoint{n->nccl(), n->device()} : NcclEndpoint{};
}

bool have_nccl() { return true; }

Result<std::vector<std::unique_ptr<Comm>>> make_nccl_group(std::span<const int> devices) {
  const int R = static_cast<int>(devices.size());
  if (R < 1) return Error{"nccl group: expected at least one device"};
  int n = 0;
  DS4_CU(cudaGetDeviceCount(&n));
  for (int d : devices)
    if (d < 0 || d >= n)
      return Error{"nccl group: device " + std::to_string(d) + " does not exist (" + std::to_string(n) + " CUDA devices)"};
  std::vector<ncclComm_t> comms(static_cast<size_t>(R));
  std::vector<int> devs(devices.begin(), devices.end());
  DS4_NC(ncclCommInitAll(comms.data(), R, devs.data()));
  std::vector<std::unique_ptr<Comm>> g;
  for (int r = 0; r < R; ++r) {
    cudaStream_t s = nullptr;
    const cudaError_t e1 = cudaSetDevice(devs[r]);
    // A blocking stream: it is ordered after the caller's legacy-stream work (cudaMemcpy from
    // pageable memory may return before its DMA is done, so a non-blocking stream could read
    // the buffer early; found by tp_nccl_emu_test under the emulator's documented semantics).
    const cudaError_t e2 = e1 == cudaSuccess ? cudaStreamCreate(&s) : e1;
    if (e2 != cudaSuccess) {
      for (int k = r; k < R; ++k) ncclCommDestroy(comms[k]);
      return cuda_error("cudaStreamCreate", e2);  // endpoints made so far clean up in g
    }
    g.push_back(std::make_unique<NcclComm>(comms[r], r, R, devs[r], s));
  }
  return std::move(g);
}

}  // namespace ds4::comm
