// engine/server/engine_slot.cpp — the adapter: every call the server makes into the engine
// (Model, Session, Tokenizer, Sampler) is in this file.
//
// TODO(issue 14): replace the per-slot Session::eval with the batch API (one forward call for all
// active slots per scheduler step) and add state save/restore for the prefix cache.
#include "engine/server/engine_slot.h"

#include <cstdio>

#include "engine/model_config.h"
#include "engine/sampler.h"
#include "engine/session.h"
#include "engine/tokenizer.h"

namespace ds4::server {

Slot::~Slot() = default;

void Slot::start(std::vector<int32_t> prompt, const Sampling& s) {
  session_->reset();
  SamplerParams p;
  p.temperature = s.temperature;
  p.top_p = s.top_p;
  p.top_k = s.top_k;
  p.min_p = s.min_p;
  p.repeat_penalty = 1.0f;
  p.seed = s.seed;
  sampler_ = std::make_unique<Sampler>(p);
  prompt_ = std::move(prompt);
  history_ = prompt_;
  fed_ = 0;
  scripted_ = 0;
  have_last_ = false;
}

Result<std::optional<int32_t>> Slot::step(int prefill_chunk) {
  if (fed_ < prompt_.size()) {
    const size_t n = std::min(prompt_.size() - fed_, size_t(std::max(1, prefill_chunk)));
    if (auto r = session_->eval(std::span<const int32_t>(prompt_.data() + fed_, n), nullptr, &logits_); !r)
      return r.error();
    fed_ += n;
    if (fed_ < prompt_.size()) return std::optional<int32_t>{};
  } else {
    if (!have_last_) return Error{"internal: slot stepped without a prompt"};
    if (!script_)
      if (auto r = session_->eval(std::span<const int32_t>(&last_, 1), nullptr, &logits_); !r) return r.error();
  }
  if (script_)
    last_ = scripted_ < script_->size() ? (*script_)[scripted_++] : tok_eos_;
  else
    last_ = sampler_->sample(logits_, history_);
  have_last_ = true;
  history_.push_back(last_);
  return std::optional<int32_t>{last_};
}

uint64_t Slot::state_bytes() const { return session_->state_bytes(); }

Result<std::unique_ptr<Engine>> Engine::create(std::shared_ptr<Model> model, int64_t ctx) {
  const Tokenizer* tok = model->tokenizer();
  if (!tok) return Error{"the model has no tokenizer.ggml.* metadata; serve needs a tokenizer"};
  const ModelConfig& c = model->config();
  if (tok->vocab_size() != c.vocab)
    return Error{"tokenizer has " + std::to_string(tok->vocab_size()) + " tokens, expected vocab_size " +
                 std::to_string(c.vocab)};
  if (ctx < 0 || ctx == 1 || ctx > c.n_ctx)
    return Error{"--ctx: expected 0 (the model's) or 2 to the model's context_length " + std::to_string(c.n_ctx) +
                 ", found " + std::to_string(ctx)};
  std::unique_ptr<Engine> e(new Engine());
  e->model_ = std::move(model);
  e->tok_ = tok;
  e->n_ctx_ = ctx == 0 ? c.n_ctx : ctx;
  return e;
}

Engine::~Engine() = default;

int64_t Engine::vocab() const { return model_->config().vocab; }
int32_t Engine::eos_id() const { return tok_->eos_id(); }

std::vector<int32_t> Engine::tokenize(std::string_view text, bool add_bos, bool parse_special) const {
  return tok_->encode(text, add_bos, parse_special);
}

std::string Engine::piece(int32_t id) const { return tok_->token_bytes(id, /*render_control=*/true); }

std::string Engine::detokenize(std::span<const int32_t> ids) const { return tok_->decode(ids, true); }

Result<void> Engine::check(const Sampling& s) const {
  SamplerParams p;
  p.temperature = s.temperature;
  p.top_p = s.top_p;
  p.top_k = s.top_k;
  p.min_p = s.min_p;
  p.repeat_penalty = 1.0f;
  return validate(p);
}

Result<std::unique_ptr<Slot>> Engine::new_slot() const {
  auto s = Session::create(model_);
  if (!s) return s.error();
  std::unique_ptr<Slot> slot(new Slot());
  slot->session_ = std::move(s).value();
  if (scripted_) slot->script_ = &script_;
  slot->tok_eos_ = tok_->eos_id();
  return slot;
}

void Engine::set_scripted_output(std::string_view text) {
  script_ = tok_->encode(text, /*add_bos=*/false, /*parse_special=*/true);
  scripted_ = true;
}

std::string Engine::describe() const {
  const ModelConfig& c = model_->config();
  char buf[160];
  std::snprintf(buf, sizeof buf, "%d layers, vocab %lld, weights %.1f MiB", int(c.n_layer), (long long)c.vocab,
                double(model_->weight_bytes()) / 1048576.0);
  return buf;
}

}  // namespace ds4::server
