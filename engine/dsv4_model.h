// engine/dsv4_model.h — the DeepSeek-V4 implementations of Model and Session (engine/session.h).
// Frontends use session.h only; tests and tools may use these classes for traces and state.
#pragma once

#include <memory>
#include <optional>

#include "engine/forward.h"
#include "engine/model_config.h"
#include "engine/model_weights.h"
#include "engine/sequence_state.h"
#include "engine/session.h"
#include "engine/tensor_parallel.h"
#include "kernels/comm.h"
#include "engine/tokenizer.h"
#include "gguf/gguf_file.h"
#include "kernels/device.h"
#include "placement/plan_file.h"

namespace ds4 {

/// Builds a TokenizerVocab from `tokenizer.ggml.*` metadata; returns nullopt-like empty vocab
/// (tokens empty) when the file has no tokenizer. Errors name the key.
Result<TokenizerVocab> tokenizer_vocab_from_gguf(const gguf::Metadata& meta);

/// A loaded DeepSeek-V4 model on options().tp ranks: one device (CPU backend, threads split
/// evenly), one comm endpoint and one TpShard per rank; the weights are bound once (mmap) and
/// every rank reads only its slices.
class Dsv4Model final : public Model {
 public:
  /// Opens, validates (model_config_from_gguf) and binds `path`.
  static Result<std::shared_ptr<Dsv4Model>> open(const std::string& path, const ModelOptions& opts);

  const ModelConfig& config() const override { return config_; }
  const Tokenizer* tokenizer() const override { return tokenizer_.get(); }
  const ModelOptions& options() const override { return opts_; }
  uint64_t weight_bytes() const override { return weights_.bytes; }
  RankMemory rank_memory(int rank) const override;
  std::string experts_summary() const override;
  staging::StagingCounters expert_counters() const override { return weights_.experts->counters(); }
  std::string device_name() const override { return devices_.at(0)->name(); }
  std::string backend_name() const override { return devices_.at(0)->owns_memory() ? "CUDA" : "CPU"; }
  std::vector<std::string> gpu_names() const override {
    std::vector<std::string> v;
    for (const auto& d : devices_)
      if (d->owns_memory()) v.emplace_back(d->name());
    return v;
  }
  DeviceTierTraffic device_tier_traffic() const override {
    DeviceTierTraffic t;
    for (const auto& d : devices_) {
      const dev::WeightTierBytes b = d->weight_tier_bytes();
      t.device_resident += b.device_resident;
      t.staged += b.staged;
      t.host += b.host;
      t.h2d_staged += b.h2d_staged;
    }
    for (const auto& d : cpu_expert_devices_) t.host += d->weight_tier_bytes().host;
    return t;
  }

  std::vector<RankDeviceCounters> rank_device_counters() const override {
    std::vector<RankDeviceCounters> v;
    for (size_t r = 0; r < devices_.size(); ++r) {
      const dev::WeightTierBytes b = devices_[r]->weight_tier_bytes();
      const uint64_t host = b.host + (r < cpu_expert_devices_.size() ? cpu_expert_devices_[r]->weight_tier_bytes().host : 0);
      v.push_back({{b.device_resident, b.staged, host, b.h2d_staged}, devices_[r]->link_timing()});
    }
    return v;
  }

  const placement::PlanFile* expert_plan() const override { return plan_ ? &*plan_ : nullptr; }

  /// Rank r's device, shard and comm endpoint (null comm when tp == 1).
  dev::Device& device(int rank = 0) const { return *devices_.at(rank); }
  const TpShard& shard(int rank) const { return shards_.at(rank); }
  /// The CPU device that computes rank r's experts the plan puts on the CPU beside its GPU
  /// (ExpertStore::cpu_computed), or null (a CPU backend, or no such expert in the plan).
  dev::Device* cpu_experts_device(int rank) const {
    return size_t(rank) < cpu_expert_devices_.size() ? cpu_expert_devices_[size_t(rank)].get() : nullptr;
  }
  comm::Comm* comm(int rank) const { return comms_.empty() ? nullptr : comms_.at(rank).get(); }
  const ModelWeights& weights() const { return weights_; }
  /// Rank r's device tensors of the non-expert weights.
  const DeviceWeights& device_weights(int rank) const { return dweights_.at(rank); }
  dev::ActFormat act_format() const {
    return opts_.activations == Activations::Q8    ? dev::ActFormat::Q8_1
           : opts_.activations == Activations::Fp8 ? dev::ActFormat::FP8_QDQ
                                                   : dev::ActFormat::F32;
  }

 private:
  Dsv4Model(gguf::GgufModel file) : file_(std::move(file)) {}
  gguf::GgufModel file_;
  ModelConfig config_;
  ModelWeights weights_;
  ModelOptions opts_;
  std::shared_ptr<const Tokenizer> tokenizer_;
  std::vector<std::unique_ptr<dev::Device>> devices_;
  std::vector<std::unique_ptr<dev::Device>> cpu_expert_devices_;  // per rank: cpu_experts_device
  std::vector<DeviceWeights> dweights_;  // one per rank device
  std::vector<std::unique_ptr<comm::Comm>> comms_;
  std::vector<TpShard> shards_;
  std::vector<RankWeightBytes> rank_bytes_;
  std::optional<placement::PlanFile> plan_;  // --plan's, or the one made at load (device_plan.h)
};

/// One sequence on a Dsv4Model: with tp ranks, one Forward and one SequenceState replica per
/// rank; eval runs rank 0 on the calling thread and ranks 1.. on their own threads.
class Dsv4Session final : public Session {
 public:
  /// `capacity` positions (1..n_ctx; checked by Session::create).
  Dsv4Session(std::shared_ptr<Dsv4Model> m, int64_t capacity);
  /// Capacity min(n_ctx, SessionOptions::kDefaultCapacity).
  explicit Dsv4Session(std::shared_ptr<Dsv4Model> m);

  Result<void> eval(std::span<const int32_t> tokens, std::vector<float>* logits_all,
                    std::vector<float>* logits_last) override;
  int64_t position() const override { return states_[0]->pos; }
  void reset() override {
    for (auto& s : states_) s->reset();
  }
  uint64_t state_bytes() const override { return states_[0]->bytes(); }
  WeightTraffic weight_traffic() const override;
  RankMemory rank_memory(int rank) const override {
    RankMemory m = model_->rank_memory(rank);
    m.state = states_.at(rank)->bytes();
    return m;
  }
  int64_t capacity() const override { return states_[0]->capacity(); }
  void set_trace(ForwardTrace* trace) override { trace_ = trace; }
  std::vector<uint8_t> save_state() const override { return states_[0]->save(); }
  Result<void> restore_state(std::span<const uint8_t> blob) override;

  /// Runs one batch over the sessions of `items` (all Dsv4Sessions of one model; see eval_batch).
  static Result<void> eval_items(std::span<const BatchItem> items);

 private:
  std::shared_ptr<Dsv4Model> model_;
  std::vector<std::unique_ptr<SequenceState>> states_;  // one replica per rank
  std::vector<std::unique_ptr<Forward>> forwards_;      // one per rank
  ForwardTrace* trace_ = nullptr;
};

}  // namespace ds4
