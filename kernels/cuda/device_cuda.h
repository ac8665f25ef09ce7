// kernels/cuda/device_cuda.h — the CUDA backend of kernels/device.h (device_cuda.cpp).
//
// Memory: every Buffer is one cudaMalloc; alloc() zeroes it with cudaMemsetAsync on a private
// non-blocking stream and waits for it (the device API promises zeroed buffers, cudaMalloc does
// not zero, and a plain cudaMemset runs on the legacy stream, which is not ordered with the
// backend's non-blocking streams). Scratch buffers belong to a stream (the ops queued on it) and
// wait for it before they grow (inside a graph region they keep the old buffer instead). bind() copies the host weight (cudaMemcpyAsync on the compute stream) into
// device memory the device owns until it is destroyed; in BindMode::Persistent the copy is kept
// per host matrix (the same host matrix bound again returns the same device tensor: load-time
// weights and VRAM-resident experts), in BindMode::Staged every bind copies the host bytes into
// the next slot of a ring of device slots through staging::CopyEngine (staging/copy_engine.h,
// the CUDA engine: its own non-blocking copy stream, one event per copy): a pinned source is
// copied directly, and the bind waits for that copy only when the source's owner may reuse it
// after bind returns (WeightMatrix::source_persists false); a pageable one is first copied into a
// pinned buffer of a staging::BounceRing (one buffer per slot). The compute stream waits for a copy's event
// (CopyEngine::stream_wait) only before the first op that reads the slot, so copies of binds made
// ahead run behind the compute work queued in between (issue 20 item 2: the engine binds a step's
// experts, then queues the shared expert, then the routed launches). A slot is refilled only
// after the compute-stream work queued before the refill, which holds every reader of its old
// contents when the caller keeps at most reserve_staged_binds() binds awaiting readers
// (CopyEngine::consumer_done). dev::StagedBindStats counts copies, host waits and copies ahead.
// Streams and events are CUDA streams and events; download waits on its stream. Every op makes its
// stream's device current on the calling thread first (rank threads). Collectives (issue 20): one
// rank is a copy / nothing; R ranks take an NCCL endpoint of this device (comm::make_nccl_group)
// and enqueue ncclAllGather on the op's stream (the all-reduce: gather into a per-stream scratch,
// then the ordered_sum kernel, rank order, the CPU group's bits), with no host synchronisation.
// Graph regions (Device::begin_graph; graph_cuda.h, README "Decode as CUDA graphs"): the compute
// stream is captured (Relaxed mode) and each region launched as one CUDA graph, its executable
// graph updated from every new capture; calls that wait on the host or cross streams abort inside.
// moe_experts over a batch (>= 2 tokens, >= 16 pairs, Q8_1 activations) runs grouped launches
// (moe_grouped.h: one sort, grouped MMQ gate/up/down over the call's experts), else expert by expert;
// same bits (README "Prefill and grouped MMQ"); DS4_CUDA_GROUPED_MOE=0 keeps the per-expert path.
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
  int staging_slots = 24;             ///< device slots of the BindMode::Staged ring (at least 4; one
                                      ///< expert binds 3; the engine binds a step's experts ahead of
                                      ///< their launches while they fit); each holds the largest
                                      ///< matrix staged, and as many pinned bounce buffers do
  bool grouped_moe = true;            ///< moe_experts of a batch of >= 2 tokens with at least
                                      ///< detail::kGroupedMoeMinPairs pairs and Q8_1 activations
                                      ///< takes the grouped MMQ path (moe_grouped.h); false, or the
                                      ///< environment DS4_CUDA_GROUPED_MOE=0, keeps the per-expert
                                      ///< path (A/B; both give the same bits)
};

/// Which path the moe_experts calls of a CUDA device took (counted since it was made).
struct GroupedMoeStats {
  uint64_t grouped_calls = 0;     ///< calls computed by the grouped launches
  uint64_t grouped_pairs = 0;     ///< (token, expert) pairs those calls computed
  uint64_t grouped_experts = 0;   ///< experts with at least one pair in those calls
  uint64_t per_expert_calls = 0;  ///< calls with pairs computed expert by expert
  uint64_t per_expert_pairs = 0;  ///< pairs those calls computed
};

/// The counters of `d` when it is a CUDA device, else all zero.
GroupedMoeStats grouped_moe_stats(const dev::Device& d);

/// Number of CUDA devices visible (0 when the runtime reports none or fails).
int cuda_device_count();

/// A CUDA device. Error when there is no CUDA device `o.ordinal` (message names what was found).
Result<std::unique_ptr<dev::Device>> make_cuda_device(const CudaDeviceOptions& o);

}  // namespace ds4::cuda
