// kernels/cuda/comm_nccl.cu — the NCCL rank group of kernels/comm.h: one process, one CUDA device
// and one stream per rank, communicators from ncclCommInitAll; FP32 only. The all-reduce is an
// ncclAllGather into a scratch buffer followed by ordered_sum_kernel, which adds the R slices in
// rank order on every rank — never ncclAllReduce, whose ring/tree choice changes the order.
// Abort (Comm::abort): the group's communicators live in one NcclGroup shared by the endpoints.
// Every enqueue of a collective (the endpoints' blocking methods and the CUDA device's
// nccl_all_gather) holds the group's lock shared and checks its aborted flag; abort() takes it
// exclusive, sets the flag and calls ncclCommAbort on every rank's communicator, which ends the
// NCCL kernels already queued (their streams go on, receive buffers undefined), so no rank's host
// wait blocks; later enqueues return kAbortedMessage without touching NCCL. rearm() waits for
// every rank's device to drain, then makes new communicators with ncclCommInitAll over the same
// devices (the endpoints, and the devices that look their communicator up per collective, keep
// working). Compiled only when CUDA and NCCL are found (kernels/cuda/CMakeLists.txt,
// DS4_HAVE_NCCL), and against the CUDA/NCCL emulator for tp_nccl_emu_test (tests/tp,
// tests/cuda_emu) and the emulated CUDA backend (tests/cuda_engine).
#include <cuda_runtime.h>
#include <nccl.h>

#include <atomic>
#include <mutex>
#include <shared_mutex>
#include <string>
#include <vector>

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

/// The state the endpoints of one group share: the devices, the communicators, the abort flag.
struct NcclGroup {
  std::vector<int> devs;           ///< [rank] CUDA ordinal
  std::shared_mutex mu;            ///< enqueues: shared; abort / rearm / destruction: exclusive
  std::vector<ncclComm_t> comms;   ///< [rank]; nullptr once aborted (or destroyed)
  std::atomic<bool> aborted{false};
  std::string broken;              ///< why rearm() could not re-make the group ("" = fine); under mu

  /// ncclAllGather of `count` floats per rank on `st` by rank `rank`: kAbortedMessage when the
  /// group is aborted, the rearm failure when it could not be re-made, else NCCL's error.
  Result<void> all_gather(int rank, const void* send, void* recv, size_t count, cudaStream_t st) {
    std::shared_lock<std::shared_mutex> lk(mu);
    if (!broken.empty()) return Error{broken};
    const ncclComm_t c = comms[static_cast<size_t>(rank)];
    if (aborted.load() || c == nullptr) return Error{kAbortedMessage};
    DS4_NC(ncclAllGather(send, recv, count, ncclFloat, c, st));
    return ok();
  }
  /// ncclBroadcast of `count` floats from `root` in place on `st` (errors as all_gather).
  Result<void> broadcast(int rank, float* buf, size_t count, int root, cudaStream_t st) {
    std::shared_lock<std::shared_mutex> lk(mu);
    if (!broken.empty()) return Error{broken};
    const ncclComm_t c = comms[static_cast<size_t>(rank)];
    if (aborted.load() || c == nullptr) return Error{kAbortedMessage};
    DS4_NC(ncclBroadcast(buf, buf, count, ncclFloat, root, c, st));
    return ok();
  }
  /// Comm::abort: once per rearm, every rank's communicator is aborted (ncclCommAbort frees it).
  void abort() {
    std::unique_lock<std::shared_mutex> lk(mu);
    if (aborted.exchange(true)) return;
    int cur = 0;
    const bool have_cur = cudaGetDevice(&cur) == cudaSuccess;
    for (size_t r = 0; r < comms.size(); ++r)
      if (comms[r]) {
        (void)cudaSetDevice(devs[r]);
        (void)ncclCommAbort(comms[r]);  // its result: the communicator is gone either way
        comms[r] = nullptr;
      }
    if (have_cur) (void)cudaSetDevice(cur);
  }
  /// Comm::rearm: when aborted, waits until every rank's device is idle (the aborted collectives
  /// and what was queued behind them), then ncclCommInitAll over devs. A failure is kept in
  /// `broken` and returned by every later collective.
  void rearm() {
    std::unique_lock<std::shared_mutex> lk(mu);
    if (!aborted.load()) return;
    int cur = 0;
    const bool have_cur = cudaGetDevice(&cur) == cudaSuccess;
    broken.clear();
    for (int d : devs) {
      cudaError_t e = cudaSetDevice(d);
      if (e == cudaSuccess) e = cudaDeviceSynchronize();
      if (e != cudaSuccess && broken.empty())
        broken = "nccl group: re-making the communicators after an abort: CUDA device " + std::to_string(d) +
                 " did not drain: " + cudaGetErrorString(e);
    }
    if (broken.empty()) {
      std::vector<ncclComm_t> fresh(devs.size(), nullptr);
      const ncclResult_t r = ncclCommInitAll(fresh.data(), static_cast<int>(devs.size()), devs.data());
      if (r == ncclSuccess) {
        comms = std::move(fresh);
        aborted.store(false);
      } else {
        broken = std::string("nccl group: re-making the communicators after an abort: ncclCommInitAll: ") +
                 ncclGetErrorString(r);
      }
    }
    if (have_cur) (void)cudaSetDevice(cur);
  }
};

class NcclComm final : public Comm {
 public:
  NcclComm(std::shared_ptr<NcclGroup> g, int rank, cudaStream_t s)
      : g_(std::move(g)), rank_(rank), size_(static_cast<int>(g_->devs.size())), device_(g_->devs[size_t(rank)]),
        stream_(s) {}
  ~NcclComm() override {
    cudaSetDevice(device_);
    if (scratch_) cudaFree(scratch_);
    if (stream_) cudaStreamDestroy(stream_);
    std::unique_lock<std::shared_mutex> lk(g_->mu);
    if (ncclComm_t& c = g_->comms[size_t(rank_)]) {
      ncclCommDestroy(c);
      c = nullptr;
    }
  }
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  const char* name() const override { return "nccl"; }
  int device() const { return device_; }
  NcclGroup& group() const { return *g_; }

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
    DS4_TRY_VOID(g_->all_gather(rank_, buf, scratch_, static_cast<size_t>(count), stream_));
    const int threads = 256;
    const int64_t blocks = std::min<int64_t>((count + threads - 1) / threads, 4096);
    DS4_LAUNCH(ordered_sum_kernel, static_cast<unsigned>(blocks), threads, 0, stream_, scratch_, size_, count, buf);
    DS4_CU(cudaGetLastError());
    return sync();
  }

  Result<void> all_gather_f32(const float* send, int64_t count, float* recv) override {
    if (count == 0) return ok();
    DS4_CU(cudaSetDevice(device_));
    DS4_TRY_VOID(g_->all_gather(rank_, send, recv, static_cast<size_t>(count), stream_));
    return sync();
  }

  Result<void> broadcast_f32(float* buf, int64_t count, int root) override {
    if (root < 0 || root >= size_)
      return Error{"broadcast_f32: root " + std::to_string(root) + " outside 0.." + std::to_string(size_ - 1)};
    if (count == 0) return ok();
    DS4_CU(cudaSetDevice(device_));
    DS4_TRY_VOID(g_->broadcast(rank_, buf, static_cast<size_t>(count), root, stream_));
    return sync();
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
    DS4_TRY_VOID(g_->all_gather(rank_, scratch_ + size_, scratch_, 1, stream_));
    return sync();
  }

  void abort() override { g_->abort(); }
  void rearm() override { g_->rearm(); }

 private:
  /// Waits for the rank's stream; kAbortedMessage when the group was aborted meanwhile (the
  /// collective ended without its data).
  Result<void> sync() {
    DS4_CU(cudaStreamSynchronize(stream_));
    if (g_->aborted.load()) return Error{kAbortedMessage};
    return ok();
  }
  std::shared_ptr<NcclGroup> g_;
  int rank_, size_, device_;
  cudaStream_t stream_;
  float* scratch_ = nullptr;
  size_t scratch_cap_ = 0;
};

}  // namespace

NcclEndpoint nccl_endpoint(const Comm& c) {
  const auto* n = dynamic_cast<const NcclComm*>(&c);
  return n ? NcclEndpoint{true, n->device()} : NcclEndpoint{};
}

Result<void> nccl_all_gather(const Comm& c, const void* send, void* recv, size_t count, cudaStream_t stream) {
  const auto* n = dynamic_cast<const NcclComm*>(&c);
  if (!n)
    return Error{std::string("nccl_all_gather: expected an NCCL rank endpoint (comm::make_nccl_group), found a '") +
                 c.name() + "' one"};
  return n->group().all_gather(n->rank(), send, recv, count, stream);
}

bool nccl_run_unless_aborted(const Comm& c, const std::function<void()>& fn) {
  const auto* n = dynamic_cast<const NcclComm*>(&c);
  DS4_CHECK(n != nullptr);
  NcclGroup& g = n->group();
  std::shared_lock<std::shared_mutex> lk(g.mu);
  if (g.aborted.load() || !g.broken.empty()) return false;
  fn();
  return true;
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
  auto grp = std::make_shared<NcclGroup>();
  grp->devs.assign(devices.begin(), devices.end());
  grp->comms.assign(static_cast<size_t>(R), nullptr);
  DS4_NC(ncclCommInitAll(grp->comms.data(), R, grp->devs.data()));
  std::vector<std::unique_ptr<Comm>> g;
  for (int r = 0; r < R; ++r) {
    cudaStream_t s = nullptr;
    const cudaError_t e1 = cudaSetDevice(grp->devs[size_t(r)]);
    // A blocking stream: it is ordered after the caller's legacy-stream work (cudaMemcpy from
    // pageable memory may return before its DMA is done, so a non-blocking stream could read
    // the buffer early; found by tp_nccl_emu_test under the emulator's documented semantics).
    const cudaError_t e2 = e1 == cudaSuccess ? cudaStreamCreate(&s) : e1;
    if (e2 != cudaSuccess) {
      for (int k = r; k < R; ++k) {  // the endpoints made so far destroy their own in g
        ncclCommDestroy(grp->comms[size_t(k)]);
        grp->comms[size_t(k)] = nullptr;
      }
      return cuda_error("cudaStreamCreate", e2);
    }
    g.push_back(std::make_unique<NcclComm>(grp, r, s));
  }
  return std::move(g);
}

}  // namespace ds4::comm
