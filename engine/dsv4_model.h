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
#include "engine/tokenizer.h"
#include "gguf/gguf_file.h"
#include "kernels/device.h"

namespace ds4 {

/// Builds a TokenizerVocab from `tokenizer.ggml.*` metadata; returns nullopt-like empty vocab
/// (tokens empty) when the file has no tokenizer. Errors name the key.
Result<TokenizerVocab> tokenizer_vocab_from_gguf(const gguf::Metadata& meta);

/// A loaded DeepSeek-V4 model on one device.
class Dsv4Model final : public Model {
 public:
  /// Opens, validates (model_config_from_gguf) and binds `path`.
  static Result<std::shared_ptr<Dsv4Model>> open(const std::string& path, const ModelOptions& opts);

  const ModelConfig& config() const override { return config_; }
  const Tokenizer* tokenizer() const override { return tokenizer_.get(); }
  const ModelOptions& options() const override { return opts_; }
  uint64_t weight_bytes() const override { return weights_.bytes; }

  dev::Device& device() const { return *device_; }
  const ModelWeights& weights() const { return weights_; }
  dev::ActFormat act_format() const {
    return opts_.activations == Activations::Q8 ? dev::ActFormat::Q8_1 : dev::ActFormat::F32;
  }

 private:
  Dsv4Model(gguf::GgufModel file) : file_(std::move(file)) {}
  gguf::GgufModel file_;
  ModelConfig config_;
  ModelWeights weights_;
  ModelOptions opts_;
  std::shared_ptr<const Tokenizer> tokenizer_;
  std::unique_ptr<dev::Device> device_;
};

/// One sequence on a Dsv4Model.
class Dsv4Session final : public Session {
 public:
  explicit Dsv4Session(std::shared_ptr<Dsv4Model> m)
      : model_(std::move(m)), state_(model_->config()),
        forward_(model_->config(), model_->weights(), model_->device(), model_->act_format()) {}

  Result<void> eval(std::span<const int32_t> tokens, std::vector<float>* logits_all,
                    std::vector<float>* logits_last) override;
  int64_t position() const override { return state_.pos; }
  void reset() override { state_.reset(model_->config()); }
  uint64_t state_bytes() const override { return state_.bytes(); }

  /// Records router and indexer decisions of later eval calls into `trace` (null = stop).
  void set_trace(ForwardTrace* trace) { trace_ = trace; }
  /// The sequence state (copyable: save/restore for prefix reuse or rollback).
  const SequenceState& state() const { return state_; }
  void set_state(const SequenceState& s) { state_ = s; }

 private:
  std::shared_ptr<Dsv4Model> model_;
  SequenceState state_;
  Forward forward_;
  ForwardTrace* trace_ = nullptr;
};

}  // namespace ds4
