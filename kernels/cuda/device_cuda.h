// kernels/cuda/device_cuda.h — the CUDA backend of kernels/device.h (device_cuda.cpp).
//
// Memory: every Buffer is one cudaMalloc; alloc() zeroes it with cudaMemsetAsync on the compute
// stream and waits (the device API promises zeroed buffers, cudaMalloc does not zero, and a plain
// cudaMemset runs on the legacy stream, which is not ordered with the backend's non-blocking
// streams). Scratch buffers belong to a stream (the ops queued on it) and wait for it before
// they grow. bind() copies the host weight (cudaMemcpyAsync on the compute stream) into
// device memory the device owns until it is destroyed; in BindMode::Persistent the copy is kept
// per host matrix (the same host matrix bound again returns the same device tensor: load-time
// weights and VRAM-resident experts), in BindMode::Staged every bind copies the host bytes
// through a pinned host staging buffer into the next slot of a ring of device slots on the
// device's copy stream, and the compute stream waits for that copy's event (experts staged
// from host memory, synchronously bounded: a slot is reused only after the compute stream has
// finished the work queued when it was last filled).
// Streams and events are CUDA streams and events; download waits on its stream. Collectives:
// one rank only (all_gather = a copy, all_reduce_sum = nothing); more ranks are an error.
// DS4_CUDA_CHECK_NAN=1 (debugging): every op waits for its stream and reports, once per op name,
// an output holding a NaN (the first such op of a run is where garbage entered).
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "ds4/result.h"
#include "kernels/device.h"

namespace ds4::cuda {

/// Options of a CUDA device.
struct CudaDeviceOptions {
  int ordinal = 0;                    ///< CUDA device ordinal
  int staging_slots = 24;             ///< device slots of the BindMode::Staged ring
};

/// Number of CUDA devices visible (0 when the runtime reports none or fails).
int cuda_device_count();

/// A CUDA device. Error when there is no CUDA device `o.ordinal` (message names what was found).
Result<std::unique_ptr<dev::Device>> make_cuda_device(const CudaDeviceOptions& o);

}  // namespace ds4::cuda
