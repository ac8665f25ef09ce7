// placement/plan.h — a placement plan: where every routed expert lives and who computes it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace ds4::placement {

/// Where an expert's weights live and how an activation of it is served.
enum class Tier : uint8_t {
  Vram,    ///< resident in the owner GPU's VRAM; computed there
  Host,    ///< pinned host memory; staged over PCIe to the GPU(s) per activation (see StageMode)
  Cpu,     ///< host memory on `node`; computed by that node's cores, only activations move
  Nvme,    ///< read from NVMe per activation, then staged (or CPU-computed if `cpu_compute`)
};

/// Name of a tier for reports: "vram", "host", "cpu", "nvme".
const char* tier_name(Tier t);

/// How a staged expert reaches the GPUs in one layer.
enum class StageMode : uint8_t {
  Split,  ///< every rank computes each staged expert it is routed: rank r of R fetches rows
          ///< [ff*r/R, ff*(r+1)/R) of gate and up and [dim*r/R, dim*(r+1)/R) of down (1/R of the
          ///< bytes, from its own node), computes its columns of h = swiglu(gate x, up x), the
          ///< ranks all-gather h (exact), and rank r computes its columns of the expert's output
          ///< from the full h; the MoE exchange completes each output row with one contributor
          ///< per element (no partial sums: bit-identical to one GPU; engine/tensor_parallel.md)
  Whole,  ///< the owner GPU fetches the whole expert and computes it alone
};

/// Placement of one (layer, expert).
struct ExpertPlacement {
  Tier tier = Tier::Host;
  int8_t owner = -1;        ///< GPU computing it when resident or whole-staged; -1 without GPUs
  int8_t node = 0;          ///< index into HwProfile::nodes of its host copy (Host/Cpu), or NVMe index (Nvme)
  bool cpu_compute = false; ///< Nvme only: computed by the CPU of the owner's node after the read
  bool pinned = false;      ///< Host copy is page-locked (counts against memlock)
};

/// VRAM accounting of one GPU, bytes.
struct GpuBudget {
  int64_t total = 0;
  int64_t reserved = 0;    ///< CUDA context, NCCL, fragmentation (profile)
  int64_t dense = 0;       ///< TP share of non-routed weights
  int64_t kv = 0;          ///< sequence state for the requested context (replicated MQA latent)
  int64_t workspace = 0;   ///< activations and prefill-chunk scratch
  int64_t cache = 0;       ///< staging slots for staged experts (2 layers x top_k x largest expert)
  int64_t expert_capacity = 0;  ///< what is left for resident experts
  int64_t experts_used = 0;     ///< resident expert bytes placed
  int resident_experts = 0;
};

/// Host memory accounting of one NUMA node, bytes.
struct NodeBudget {
  int id = 0;
  int64_t capacity = 0;    ///< installed minus its share of host.reserved
  int64_t host_bytes = 0;  ///< staged experts' copies on this node (whole or rank slices)
  int64_t cpu_bytes = 0;   ///< CPU-computed experts on this node
  int64_t pinned_bytes = 0;
  int host_experts = 0;    ///< staged experts whose home (owner's) node this is
  int cpu_experts = 0;
};

/// A complete plan for one model, quant mix, machine and context.
struct Plan {
  std::string policy;                 ///< "planner", "pocketllm-like", "frequency-greedy", "all-cpu"
  std::string rule;                   ///< placement rule that produced it: the policy itself, or for
                                      ///< "planner" the baseline it kept when that predicted faster
  int n_layers = 0;
  int n_experts = 0;
  int ranks = 0;                      ///< GPUs (TP ranks); 0 = CPU only
  std::vector<StageMode> mode;        ///< [layer]
  std::vector<std::vector<ExpertPlacement>> experts;  ///< [layer][expert]
  std::vector<GpuBudget> gpus;
  std::vector<NodeBudget> nodes;
  int64_t pinned_bytes = 0;
  int64_t memlock_bytes = -1;         ///< -1 unlimited
  int64_t nvme_bytes = 0;
  std::vector<std::string> notes;     ///< degradations worth telling the user, with numbers
};

}  // namespace ds4::placement
