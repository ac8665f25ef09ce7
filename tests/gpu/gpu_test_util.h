// tests/gpu/gpu_test_util.h — CUDA helpers of the gpu tests: device detection (exit 77 = ctest
// SKIP without a GPU), device capability, RAII device buffers; plus quant_test_data.h.
#pragma once

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <memory>

#include "kernels/cuda/cuda_check.h"
#include "tests/gpu/quant_test_data.h"

namespace ds4::gputest {

/// gtest main body shared by the gpu test binaries: 77 (ctest SKIP) without a usable device.
inline int gpu_test_main(int argc, char** argv) {
  int n = 0;
  const cudaError_t err = cudaGetDeviceCount(&n);
  if (err != cudaSuccess || n == 0) {
    std::printf("SKIPPED: no CUDA device (%s)\n", err != cudaSuccess ? cudaGetErrorString(err) : "0 devices");
    return 77;
  }
  cudaDeviceProp prop{};
  DS4_CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
  std::printf("device 0: %s (sm_%d%d)\n", prop.name, prop.major, prop.minor);
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}

/// Compute capability major*10+minor of device 0.
inline int device_cc() {
  int major = 0, minor = 0;
  DS4_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, 0));
  DS4_CUDA_CHECK(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, 0));
  return major * 10 + minor;
}

/// Owning device allocation.
class DevBuf {
 public:
  explicit DevBuf(size_t bytes) : bytes_(bytes) { DS4_CUDA_CHECK(cudaMalloc(&p_, bytes ? bytes : 1)); }
  ~DevBuf() { cudaFree(p_); }
  DevBuf(const DevBuf&) = delete;
  DevBuf& operator=(const DevBuf&) = delete;
  template <class T = void>
  T* get() const { return static_cast<T*>(p_); }
  void upload(const void* src, size_t n) { DS4_CUDA_CHECK(cudaMemcpy(p_, src, n, cudaMemcpyHostToDevice)); }
  template <class T>
  std::vector<T> download(size_t count) const {
    std::vector<T> v(count);
    DS4_CUDA_CHECK(cudaMemcpy(v.data(), p_, count * sizeof(T), cudaMemcpyDeviceToHost));
    return v;
  }

 private:
  void* p_ = nullptr;
  size_t bytes_;
};

/// Device copy of a host vector.
template <class T>
inline std::unique_ptr<DevBuf> to_device(const std::vector<T>& v) {
  auto b = std::make_unique<DevBuf>(v.size() * sizeof(T));
  if (!v.empty()) b->upload(v.data(), v.size() * sizeof(T));
  return b;
}

}  // namespace ds4::gputest
