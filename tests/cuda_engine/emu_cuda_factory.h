// tests/cuda_engine/emu_cuda_factory.h — included once by each emulated-CUDA engine test binary:
// installs the test factory so the engine's --backend cuda makes its devices from the CUDA backend
// compiled against the emulation (tests/cuda_engine/CMakeLists.txt), also in a build without nvcc.
#pragma once

#include <utility>

#include "ds4/result.h"
#include "kernels/cuda/device_cuda.h"
#include "kernels/device.h"

namespace ds4::emu_test {

/// True once the factory is installed (at static initialisation, before any test runs).
inline const bool kEmuFactoryInstalled = [] {
  // Count: the emulated runtime's devices (DS4_CUDA_EMU_DEVICES / ds4::emu::set_device_count).
  dev::set_cuda_device_factory(
      [](int ordinal) {
        auto d = cuda::make_cuda_device(cuda::CudaDeviceOptions{ordinal});
        DS4_CHECK(d.ok());
        return std::move(d).value();
      },
      [] { return cuda::cuda_device_count(); });
  return true;
}();

}  // namespace ds4::emu_test
