// tests/cuda_engine/emu_slots_factory.h — the emulated-CUDA device factory of the staged-expert
// engine tests (cuda_emu_pipeline_test, cuda_emu_moe_grouped_test): like emu_cuda_factory.h, but
// every device is made with g_emu_slots staging slots, which a test sets before it loads a model.
// A test binary includes either this header or emu_cuda_factory.h, not both.
#pragma once

#include <utility>

#include "ds4/result.h"
#include "kernels/cuda/device_cuda.h"
#include "kernels/device.h"

namespace ds4::emu_test {

/// CudaDeviceOptions::staging_slots of the devices the factory makes from now on.
inline int g_emu_slots = 24;

/// True once the factory is installed (at static initialisation, before any test runs); the
/// device count is the emulated runtime's (DS4_CUDA_EMU_DEVICES / ds4::emu::set_device_count).
inline const bool kEmuSlotsFactoryInstalled = [] {
  dev::set_cuda_device_factory(
      [](int ordinal) {
        auto d = cuda::make_cuda_device(cuda::CudaDeviceOptions{ordinal, g_emu_slots});
        DS4_CHECK(d.ok());
        return std::move(d).value();
      },
      [] { return cuda::cuda_device_count(); });
  return true;
}();

}  // namespace ds4::emu_test
