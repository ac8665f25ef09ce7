// engine/device_plan.h — an expert placement plan made at load from the discovered machine, for a
// device with its own memory (the CUDA backend) opened without --plan or --experts-tier.
//
// The profile is built from what the process can see without probing: the device's free memory
// as its runtime reports it (cudaMemGetInfo; on the emulator DS4_CUDA_EMU_VRAM_MB), the host's
// physical memory (sysconf) and hardware threads; bandwidths are the GPU estimates table's
// (placement/gpu_estimates.h) and PCIe 3 x16 figures, which only order the planner's choices.
// The planner (placement/planner.h, policy "planner", uniform routing prior) then sizes the
// dense weights, sequence state, workspace and staging slots, and fills what is left with
// resident experts. Experts the planner would compute on the CPU are staged from host memory
// instead (Tier::Host): the backend can compute CPU-tier experts beside the GPU (a --plan's, from
// `plan --hw` with measured figures), but this profile's CPU figures are guesses, not probes; the
// returned plan is the one the model is loaded by, so its bookkeeping (plan_bytes_for_routing)
// is the run's. Its `predicted` bytes per tier and `predicted_tok_s` are the cost model's
// prediction for that plan as loaded (bench prints them beside its measurement).
#pragma once

#include <cstdint>
#include <string>

#include "ds4/result.h"
#include "gguf/gguf_file.h"
#include "kernels/device.h"
#include "placement/plan_file.h"

namespace ds4 {

/// The plan for model `file` on the single device `d` (TP 1) for a context of `ctx` tokens, as a
/// PlanFile (node_ids {0}, expert_bytes per layer as plan_model_from_gguf counts them, rule
/// "planner (on the fly)"). `summary` (if given) receives a few lines for stderr: the VRAM budget
/// and the experts per tier. Errors: the file's shapes/types unknown to the planner, or the dense
/// weights, state and workspace not fitting the device (naming both sizes).
Result<placement::PlanFile> plan_for_device(const gguf::GgufModel& file, const dev::Device& d, int64_t ctx,
                                            std::string* summary);

}  // namespace ds4
