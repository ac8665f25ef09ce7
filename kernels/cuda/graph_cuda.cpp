// kernels/cuda/graph_cuda.cpp — see graph_cuda.h.
#include "kernels/cuda/graph_cuda.h"

#include <cstdio>
#include <cstdlib>

#include "kernels/cuda/cuda_check.h"

namespace ds4::cuda {

GraphRegions::~GraphRegions() {
  for (auto& [key, exec] : execs_) (void)cudaGraphExecDestroy(exec);
}

void GraphRegions::begin(cudaStream_t st, uint64_t key) {
  if (open_) {
    std::fprintf(stderr, "ds4: CUDA backend: begin_graph(%llu) while region %llu is open (one region at a time)\n",
                 static_cast<unsigned long long>(key), static_cast<unsigned long long>(key_));
    std::abort();
  }
  DS4_CUDA_CHECK(cudaStreamBeginCapture(st, cudaStreamCaptureModeRelaxed));
  open_ = true;
  key_ = key;
  st_ = st;
}

void GraphRegions::end(cudaStream_t st, bool launch) {
  if (!open_ || st != st_) {
    std::fprintf(stderr, "ds4: CUDA backend: end_graph on a stream without an open graph region\n");
    std::abort();
  }
  open_ = false;
  cudaGraph_t g = nullptr;
  const cudaError_t e = cudaStreamEndCapture(st, &g);
  if (e != cudaSuccess) {
    std::fprintf(stderr,
                 "ds4: CUDA backend: graph region %llu: cudaStreamEndCapture failed: %s (%s); a call inside the "
                 "region conflicted with stream capture\n",
                 static_cast<unsigned long long>(key_), cudaGetErrorName(e), cudaGetErrorString(e));
    std::abort();
  }
  if (!launch) {
    DS4_CUDA_CHECK(cudaGraphDestroy(g));
    std::lock_guard<std::mutex> lock(mu_);
    ++stats_.discarded;
    return;
  }
  bool instantiated = false, failed_update = false;
  auto it = execs_.find(key_);
  if (it != execs_.end()) {
    cudaGraphExecUpdateResultInfo info{};
#if CUDART_VERSION >= 12000
    const cudaError_t u = cudaGraphExecUpdate(it->second, g, &info);
#else
    cudaGraphNode_t bad = nullptr;
    cudaGraphExecUpdateResult r{};
    const cudaError_t u = cudaGraphExecUpdate(it->second, g, &bad, &r);
#endif
    if (u != cudaSuccess) {
      (void)cudaGetLastError();  // cudaErrorGraphExecUpdateFailure: not sticky; make it anew
      DS4_CUDA_CHECK(cudaGraphExecDestroy(it->second));
      execs_.erase(it);
      failed_update = true;
    }
  }
  it = execs_.find(key_);
  if (it == execs_.end()) {
    cudaGraphExec_t x = nullptr;
#if CUDART_VERSION >= 12000
    DS4_CUDA_CHECK(cudaGraphInstantiate(&x, g, 0));
#else
    DS4_CUDA_CHECK(cudaGraphInstantiate(&x, g, nullptr, nullptr, 0));
#endif
    it = execs_.emplace(key_, x).first;
    instantiated = true;
  }
  DS4_CUDA_CHECK(cudaGraphDestroy(g));  // the executable graph keeps what it needs
  DS4_CUDA_CHECK(cudaGraphLaunch(it->second, st));
  std::lock_guard<std::mutex> lock(mu_);
  ++stats_.launches;
  stats_.instantiations += instantiated ? 1 : 0;
  stats_.updates += instantiated ? 0 : 1;
  stats_.update_failures += failed_update ? 1 : 0;
}

dev::GraphStats GraphRegions::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

}  // namespace ds4::cuda
