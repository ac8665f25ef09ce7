// engine/server/engine_slot.cpp — the adapter: every call the server makes into the engine
// (Model, Session, Tokenizer, Sampler) is in this file.
#include "engine/server/engine_slot.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "engine/model_config.h"
#include "engine/sampler.h"
#include "engine/session.h"
#include "engine/tokenizer.h"

namespace ds4::server {

namespace {
/// The engine sampler's parameters for a request's sampling fields (no repetition penalty: the
/// OpenAI penalties are refused by openai_request).
SamplerParams sampler_params(const Sampling& s) {
  SamplerParams p;
  p.temperature = s.temperature;
  p.top_p = s.top_p;
  p.top_k = s.top_k;
  p.min_p = s.min_p;
  p.repeat_penalty = 1.0f;
  p.seed = s.seed;
  return p;
}
}  // namespace

TokenLogprob token_logprob(std::span<const float> logits, int32_t id, int32_t n_top) {
  // log p(i) = x_i - m - log(sum_j exp(x_j - m)), m = max_j x_j (double sums: 1e-15 relative).
  double m = -INFINITY;
  for (float x : logits) m = std::max(m, double(x));
  double sum = 0;
  for (float x : logits) sum += std::exp(double(x) - m);
  const double lse = m + std::log(sum);
  TokenLogprob t;
  t.id = id;
  t.logprob = float(double(logits[size_t(id)]) - lse);
  const size_t k = std::min(logits.size(), size_t(std::max(0, n_top)));
  std::vector<int32_t> idx(logits.size());
  for (size_t i = 0; i < idx.size(); ++i) idx[i] = int32_t(i);
  std::partial_sort(idx.begin(), idx.begin() + long(k), idx.end(), [&](int32_t a, int32_t b) {
    return logits[size_t(a)] > logits[size_t(b)] || (logits[size_t(a)] == logits[size_t(b)] && a < b);
  });
  for (size_t i = 0; i < k; ++i) t.top.emplace_back(idx[i], float(double(logits[size_t(idx[i])]) - lse));
  return t;
}

Slot::~Slot() = default;

size_t Slot::start(std::vector<int32_t> prompt, const Sampling& s, bool use_cache, int32_t top_logprobs) {
  session_->reset();
  n_top_ = top_logprobs;
  sampler_ = std::make_unique<Sampler>(sampler_params(s));
  prompt_ = std::move(prompt);
  history_ = prompt_;
  fed_ = 0;
  scripted_ = 0;
  have_last_ = false;
  use_cache_ = use_cache && cache_ != nullptr;
  if (!use_cache_ || prompt_.size() < 2) return 0;
  // At least the last prompt token is fed, for its logits.
  size_t len = 0;
  auto blob = cache_->lookup(prompt_, prompt_.size() - 1, &len);
  if (!blob) return 0;
  if (!session_->restore_state(*blob)) {  // cannot happen for blobs of this model's sessions
    session_->reset();
    return 0;
  }
  fed_ = len;
  return len;
}

Result<bool> Slot::prepare(int prefill_chunk, std::span<const int32_t>* tokens) {
  if (fed_ < prompt_.size()) {
    size_t n = std::min(prompt_.size() - fed_, size_t(std::max(1, prefill_chunk)));
    if (use_cache_) {  // end the chunk at the next block boundary, where a snapshot is taken
      const size_t b = size_t(cache_->block()), next = (fed_ / b + 1) * b;
      n = std::min(n, next - fed_);
    }
    *tokens = std::span<const int32_t>(prompt_.data() + fed_, n);
    return true;
  }
  if (!have_last_) return Error{"internal: slot stepped without a prompt"};
  if (script_) return false;
  *tokens = std::span<const int32_t>(&last_, 1);
  return true;
}

std::optional<int32_t> Slot::complete(size_t n_fed) {
  const bool prefill = fed_ < prompt_.size();
  if (prefill) fed_ += n_fed;
  // Snapshots during prefill at block multiples k * block with k a power of two (shared system
  // prompts; a snapshot copies the whole state so far, so this bounds the copying to ~2x the prompt's
  // state) and at the prompt's last block multiple (the next turn of a conversation starts with
  // this prompt). None during decode: the next turn re-tokenizes the reply from text.
  if (use_cache_ && prefill && n_fed > 0) {
    const size_t pos = fed_, b = size_t(cache_->block()), k = pos / b;
    if (pos % b == 0 && k > 0 && ((k & (k - 1)) == 0 || pos == prompt_.size() / b * b)) {
      auto key = std::span<const int32_t>(prompt_.data(), pos);
      if (!cache_->contains(key)) cache_->insert(key, session_->save_state());
    }
  }
  if (prefill && fed_ < prompt_.size()) return std::nullopt;
  if (script_)
    last_ = scripted_ < script_->size() ? (*script_)[scripted_++] : tok_eos_;
  else
    last_ = sampler_->sample(logits_, history_);
  have_last_ = true;
  history_.push_back(last_);
  if (n_top_ >= 0) last_lp_ = token_logprob(logits_, last_, n_top_);
  return last_;
}

int64_t Slot::position() const { return session_->position(); }

std::vector<Result<std::optional<int32_t>>> Engine::step(std::span<Slot* const> slots, int prefill_chunk) const {
  std::vector<Result<std::optional<int32_t>>> out;
  out.reserve(slots.size());
  std::vector<std::span<const int32_t>> work(slots.size());
  std::vector<int> state(slots.size(), 0);  // 0 = eval, 1 = no eval needed, 2 = error
  std::vector<BatchItem> items;
  std::vector<Error> errors(slots.size());
  for (size_t i = 0; i < slots.size(); ++i) {
    auto r = slots[i]->prepare(prefill_chunk, &work[i]);
    if (!r) {
      state[i] = 2;
      errors[i] = r.error();
    } else if (!r.value()) {
      state[i] = 1;
    } else {
      items.push_back(BatchItem{slots[i]->session_.get(), work[i], nullptr, &slots[i]->logits_});
    }
  }
  if (!items.empty()) {
    std::vector<int64_t> pos0;
    for (const auto& it : items) pos0.push_back(it.session->position());
    if (auto r = eval_batch(items); !r) {
      // Rejected before the pass (nothing fed): run each slot alone so only the bad one fails.
      // Fed partly (an error inside the pass): every slot of the batch fails.
      bool untouched = true;
      for (size_t k = 0; k < items.size(); ++k) untouched = untouched && items[k].session->position() == pos0[k];
      for (size_t i = 0, k = 0; i < slots.size(); ++i) {
        if (state[i] != 0) continue;
        const BatchItem& it = items[k++];
        if (!untouched) {
          state[i] = 2;
          errors[i] = r.error();
          continue;
        }
        if (auto r1 = it.session->eval(it.tokens, nullptr, it.logits_last); !r1) {
          state[i] = 2;
          errors[i] = r1.error();
        }
      }
    }
  }
  for (size_t i = 0; i < slots.size(); ++i) {
    if (state[i] == 2)
      out.emplace_back(errors[i]);
    else
      out.emplace_back(slots[i]->complete(state[i] == 0 ? work[i].size() : 0));
  }
  return out;
}

void Engine::enable_prefix_cache(uint64_t max_bytes, int block) {
  cache_ = std::make_unique<PrefixCache>(max_bytes, block);
}

PrefixCacheStats Engine::prefix_cache_stats() const { return cache_ ? cache_->stats() : PrefixCacheStats{}; }

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

Result<void> Engine::check(const Sampling& s) const { return validate(sampler_params(s)); }

Result<std::unique_ptr<Slot>> Engine::new_slot() const {
  SessionOptions so;
  so.capacity = n_ctx_;
  auto s = Session::create(model_, so);
  if (!s) return s.error();
  std::unique_ptr<Slot> slot(new Slot());
  slot->session_ = std::move(s).value();
  if (scripted_) slot->script_ = &script_;
  slot->cache_ = cache_.get();
  slot->tok_eos_ = tok_->eos_id();
  return slot;
}

void Engine::set_scripted_output(std::string_view text) {
  script_ = tok_->encode(text, /*add_bos=*/false, /*parse_special=*/true);
  scripted_ = true;
}

staging::StagingCounters Engine::expert_counters() const { return model_->expert_counters(); }

std::string Engine::describe() const {
  const ModelConfig& c = model_->config();
  char buf[160];
  std::snprintf(buf, sizeof buf, "%d layers, vocab %lld, weights %.1f MiB", int(c.n_layer), (long long)c.vocab,
                double(model_->weight_bytes()) / 1048576.0);
  return buf;
}

}  // namespace ds4::server
