// engine/session.h — the Session API: the only engine interface frontends (engine/cli,
// engine/server, bench) use. A Model is loaded once; a Session holds one sequence's state
// (window ring, compressed KV, indexer keys, compressor running buffers) and its position.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "ds4/result.h"
#include "kernels/link_timing.h"
#include "staging/staging_counters.h"

namespace ds4 {

class Tokenizer;        // engine/tokenizer.h
struct ModelConfig;     // engine/model_config.h
struct ModelWeights;    // engine internals
namespace placement { struct PlanFile; }  // placement/plan_file.h

/// How activations enter the matrix products: F32 = exactly decoded weights, FP32 math
/// ("W4A16-style"); Q8 = activations quantized to Q8_1 for the integer dot products ("W4A8") of
/// every quantized weight (routed and shared experts, attention, compressor, indexer, head) except
/// the router gate; F32/F16/BF16 weights keep FP32 activations (engine/forward.h has the list).
/// Fp8 = DeepSeek's reference QAT simulation (the fixture's `qat` mode): FP8 E4M3 1x128 QDQ of the
/// inputs of FP8/FP4 weights (dev::ActFormat::FP8_QDQ: the official checkpoint's types, so it acts
/// on safetensors folders; a GGUF's F32/Q8_0 weights take FP32 activations), FP8 QDQ in 64-blocks
/// of the non-RoPE KV dims (attention and compressor), Hadamard + FP4 QDQ of the indexer q and k.
enum class Activations { F32, Q8, Fp8 };

/// Largest accepted ModelOptions::threads (each is an OS thread).
inline constexpr int kMaxThreads = 1024;

/// Options for loading a model.
struct ModelOptions {
  Activations activations = Activations::F32;
  /// Compute backend: "cpu", "cuda", or "auto" (cuda when a CUDA device is visible, else cpu).
  /// Anything else is an error at load naming the accepted values (kernels/device.h parse_backend).
  std::string backend = "auto";
  int threads = 0;  // 0 = all hardware threads
  int tp = 1;       // tensor-parallel ranks (1, 2, 4, 8): one thread + device per rank; every
                    // tp gives bit-identical logits (engine/tensor_parallel.h, canonical definition)
  /// Owner rank of each routed expert, [layer][expert] in [0, tp) (the planner's map); empty =
  /// contiguous ranges (expert e on rank e*tp/n_expert). Any map gives the same bits.
  std::vector<std::vector<int32_t>> expert_placement;
  /// Forces every routed expert into one staging tier (staging/expert_store.h): "resident",
  /// "host" or "nvme"; empty = experts read straight from the GGUF mapping (the default until the
  /// planner's plan drives placement). Exclusive with expert_plan; "nvme" needs a GGUF (not a
  /// checkpoint repacked in memory). tp 1: the tier's caching store (staging::make_expert_store;
  /// its expert cache reuses staged experts across steps). tp > 1: the rank threads share the
  /// plan-driven store with every expert at the tier's home (staging::make_rank_tier_store): host
  /// experts read from their slabs, each rank reads its NVMe experts with its own reader, owners as
  /// expert_placement; no cache, so every use of a staged expert moves (and counts) its bytes.
  std::string experts_tier;
  /// Placement plan file (`ds4-offload plan --json`, placement/plan_report.h): every routed expert
  /// where the plan puts it (staging::make_mixed_expert_store: vram -> resident slab, host ->
  /// staged per step, cpu -> computed from a host slab, nvme -> read per step). Exclusive with
  /// experts_tier. The plan's GPU count must equal tp (a CPU-only plan, 0 GPUs, runs at any tp);
  /// with tp > 1 the owners come from the plan, host experts are read from their slabs and each
  /// rank reads its NVMe experts with its own reader (a Split layer's: its row slices;
  /// engine/tensor_parallel.md).
  std::string expert_plan;
  /// Decode steps of one token run as graph regions on backends that have them (CUDA graphs,
  /// dev::Device::begin_graph; Forward::set_graphs): `--cuda-graphs on|off`. Same bits either way.
  bool cuda_graphs = true;
};

/// Memory one tensor-parallel rank holds (bytes).
struct RankMemory {
  uint64_t weights_replicated = 0;  // tensors every rank binds whole (norms, mHC, wkv, compressors, ...)
  uint64_t weights_sharded = 0;     // its slices of wq_b, wo_a, wo_b, indexer, embedding, head
  uint64_t weights_experts = 0;     // the routed experts it owns
  uint64_t state = 0;               // its sequence-state replica (KV window, caches, compressors)
  uint64_t weights() const { return weights_replicated + weights_sharded + weights_experts; }
};

/// Weight bytes the model's devices read, split by where each matrix lived at the launch
/// (dev::Device::weight_tier_bytes summed over ranks; bytes, monotone: take differences around
/// evals). These are the backend's counters, independent of the engine's WeightTraffic.
struct DeviceTierTraffic {
  uint64_t device_resident = 0;  // matrices in device memory (CUDA: VRAM; bound at load)
  uint64_t staged = 0;           // matrices copied into a device slot for their launch
  uint64_t host = 0;             // matrices read in host memory (the CPU backend; on CUDA, the
                                 // experts the plan computes on the CPU)
  uint64_t h2d_staged = 0;       // bytes the staged copies moved host -> device
};

/// One tensor-parallel rank's device counters (Model::rank_device_counters): its weight bytes by
/// tier and the timing of its host -> device link (kernels/link_timing.h). Monotone.
struct RankDeviceCounters {
  DeviceTierTraffic tiers;
  dev::LinkTiming link;
};

/// A loaded DSV4 model (config validated against the tensors, weights bound, tokenizer built).
class Model {
 public:
  /// Loads a GGUF (or split set). Errors list every wrong key/missing/unexpected tensor at once.
  static Result<std::shared_ptr<Model>> load(const std::string& path, const ModelOptions& opts);
  virtual ~Model() = default;
  virtual const ModelConfig& config() const = 0;
  /// Tokenizer from tokenizer.ggml.* metadata (nullptr if the file has none).
  virtual const Tokenizer* tokenizer() const = 0;
  virtual const ModelOptions& options() const = 0;
  /// Bytes of weights held in memory by this process (for the run summary).
  virtual uint64_t weight_bytes() const = 0;
  /// Number of tensor-parallel ranks (options().tp).
  int tp() const { return options().tp; }
  /// Weight bytes rank `rank` (0 <= rank < tp()) binds; `state` is 0 here (see Session).
  virtual RankMemory rank_memory(int rank) const = 0;
  /// Multi-line summary of the expert store: tier, bytes moved per tier, cache and NVMe reader
  /// counters (staging::StagingCounters::summary()).
  virtual std::string experts_summary() const = 0;
  /// The expert store's counters so far (tier, bytes staged per tier, cache and reader counters).
  virtual staging::StagingCounters expert_counters() const = 0;
  /// Name of the device(s) the model runs on ("cpu (4 threads)").
  virtual std::string device_name() const = 0;
  /// The backend the model runs on, as bench reports it: "CUDA" when its devices have their own
  /// memory (GPUs, the emulated CUDA runtime included), else "CPU".
  virtual std::string backend_name() const = 0;
  /// One name per GPU the model runs on, rank order ("cuda:0 (NVIDIA ..., sm_75, ...)"); empty on
  /// the CPU backend.
  virtual std::vector<std::string> gpu_names() const = 0;
  /// The backend's own weight counters by tier, summed over the ranks' devices (monotone).
  virtual DeviceTierTraffic device_tier_traffic() const = 0;
  /// The same per rank (rank order, one entry per device), with each rank's link timing; their
  /// tiers sum to device_tier_traffic(). Default: empty (a model without devices).
  virtual std::vector<RankDeviceCounters> rank_device_counters() const { return {}; }
  /// The expert placement plan the model was loaded by: --plan's file, or the plan made at load
  /// for a device with its own memory (engine/device_plan.h); null when experts were placed
  /// without a plan (the GGUF mapping, --experts-tier, the CPU backend without --plan).
  virtual const placement::PlanFile* expert_plan() const { return nullptr; }
};

/// Per-token records of routing and indexer decisions (golden tests, `calibrate`, `run
/// --routing-out`), indexed by absolute position.
struct ForwardTrace {
  /// router[layer][pos] = selected expert ids in selection order (hash: tid2eid order).
  std::vector<std::vector<std::vector<int32_t>>> router;
  /// indexer[layer][pos] = selected compressed block ids (descending score; ratio-4 layers only).
  std::vector<std::vector<std::vector<int32_t>>> indexer;
  /// Optional activation hook (NVFP4 `input_scale` calibration, engine/nvfp4_calibration.h): when
  /// set, called at every MoE sublayer (main layers; tensor rank 0 only) with host copies of this
  /// chunk's rows of the sublayer input x [n, dim] (FP32, row-major: the rows the router and every
  /// routed expert read), the selected expert ids [n, K] and their routing weights [n, K] (the
  /// weight each expert's SwiGLU output is multiplied by before `w2`). Costs one download of x per
  /// layer; numerics unchanged.
  std::function<void(int layer, int64_t n, std::span<const float> x, std::span<const int32_t> ids,
                     std::span<const float> weights)>
      moe_input;
};

/// Options for a Session.
struct SessionOptions {
  /// Positions the session's state holds (fixed device tensors sized at creation); 0 = the
  /// model's context_length, capped at kDefaultCapacity. Must be <= context_length.
  int64_t capacity = 0;
  static constexpr int64_t kDefaultCapacity = 65536;
};

/// Weight bytes the engine has read, for roofline figures (`bench`). Counted per matmul launch
/// (every matrix once per launch, see dev::Device::weight_bytes_read).
struct WeightTraffic {
  uint64_t total = 0;           // all weights, all ranks' devices (shared by the model's sessions)
  uint64_t routed_experts = 0;  // routed-expert matrices this session multiplied, all ranks
  /// [rank] of routed_experts, the bytes from staged homes (host or NVMe experts: whole ones by
  /// their owner, rank slices in a plan's Split layers; Forward::staged_expert_bytes): the plan's
  /// link bytes of each rank (placement::plan_bytes_for_routing). Empty where not counted.
  std::vector<uint64_t> staged_by_rank;
  /// [rank] split experts' rank slices bound at the steps' start (the hash-routed layers of a
  /// plan's Split layers at tp > 1; Forward::prefetched_slices), and steps whose hash-layer
  /// prefetch stopped at a layer the staging ring could not hold (Forward::prefetch_ring_stops).
  std::vector<uint64_t> prefetched_slices_by_rank, prefetch_ring_stops_by_rank;
  /// [rank] experts a plan computes on the CPU beside the rank's GPU (Forward::cpu_expert_seconds,
  /// cpu_expert_gpu_idle_seconds): host seconds spent on them, and device seconds the GPU sat idle
  /// waiting for them (-1 where the device does not time). Empty on the CPU backend.
  std::vector<double> cpu_expert_s_by_rank, cpu_expert_idle_s_by_rank;
};

/// One sequence. Not thread-safe; one Session per concurrent sequence.
class Session {
 public:
  /// A fresh sequence of `model`. Errors: a capacity above the model's context_length.
  static Result<std::unique_ptr<Session>> create(std::shared_ptr<Model> model, const SessionOptions& opts = {});
  virtual ~Session() = default;

  /// Feeds `tokens` at positions position()..position()+n-1 (prefill, or a chunk of a prefill, or
  /// n = 1 for decode). Writes logits [n, vocab] (row-major, FP32) into `logits_all` when it is
  /// non-null, else only the last row into `logits_last` (either may be null). On an error the
  /// position stays where it was (every rank's, at tp > 1; the error is the first failing rank's).
  virtual Result<void> eval(std::span<const int32_t> tokens, std::vector<float>* logits_all,
                            std::vector<float>* logits_last) = 0;
  /// Number of tokens already fed.
  virtual int64_t position() const = 0;
  /// Clears the sequence state (position 0).
  virtual void reset() = 0;
  /// Bytes of per-sequence state (KV, compressed caches, compressor buffers) of one rank (every
  /// rank holds a replica: the latent KV and compressors are replicated).
  virtual uint64_t state_bytes() const = 0;
  /// Model weights of rank `rank` plus this sequence's state on that rank.
  virtual RankMemory rank_memory(int rank) const = 0;
  /// Weight bytes read so far (monotone; take differences around an eval).
  virtual WeightTraffic weight_traffic() const = 0;
  /// Positions this session can hold (SessionOptions::capacity).
  virtual int64_t capacity() const = 0;
  /// Records router and indexer decisions of later eval calls into `trace` (null = stop).
  virtual void set_trace(ForwardTrace* trace) = 0;
  /// The sequence state as a host blob (position, window ring, compressed KV, indexer keys,
  /// compressor buffers: engine/sequence_state.h), for prefix reuse or rollback.
  virtual std::vector<uint8_t> save_state() const = 0;
  /// Restores a save_state() blob of a session of the same model. Errors name the mismatch.
  virtual Result<void> restore_state(std::span<const uint8_t> blob) = 0;
};

/// One sequence's request in a batch: `tokens` fed to `session` at its position; logits as in
/// Session::eval (`logits_all` [n, vocab] or the last row into `logits_last`; either may be null).
struct BatchItem {
  Session* session = nullptr;
  std::span<const int32_t> tokens;
  std::vector<float>* logits_all = nullptr;
  std::vector<float>* logits_last = nullptr;
};

/// Evaluates several sequences in one forward pass (every weight read once for all of them):
/// each item's session advances as if it had called eval alone, with bit-identical logits in any
/// order and at any thread count. Sessions must be distinct, of one model, with non-empty tokens.
/// Errors as Session::eval (nothing is fed when the batch is rejected before the pass).
Result<void> eval_batch(std::span<const BatchItem> items);

}  // namespace ds4
