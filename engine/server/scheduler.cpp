// engine/server/scheduler.cpp — see scheduler.h.
#include "engine/server/scheduler.h"

#include <vector>

namespace ds4::server {

Result<std::unique_ptr<Scheduler>> Scheduler::create(const Engine& engine, int n_slots, int max_queue,
                                                     int prefill_chunk) {
  if (n_slots < 1) return Error{"-np: expected 1 or more slots, found " + std::to_string(n_slots)};
  if (max_queue < 0) return Error{"--queue: expected 0 or more, found " + std::to_string(max_queue)};
  if (prefill_chunk < 1) return Error{"--prefill-chunk: expected 1 or more, found " + std::to_string(prefill_chunk)};
  std::unique_ptr<Scheduler> s(new Scheduler());
  s->engine_ = &engine;
  s->max_queue_ = max_queue;
  s->prefill_chunk_ = prefill_chunk;
  for (int i = 0; i < n_slots; ++i) {
    auto slot = engine.new_slot();
    if (!slot) return Error{"slot " + std::to_string(i) + ": " + slot.error().message};
    s->stats_.state_bytes += slot.value()->state_bytes();
    s->slots_.push_back(Active{std::move(slot).value(), nullptr, false, 0});
  }
  s->stats_.slots = n_slots;
  s->thread_ = std::thread([p = s.get()] { p->loop(); });
  return s;
}

Scheduler::~Scheduler() { stop(); }

bool Scheduler::submit(const std::shared_ptr<Job>& job) {
  {
    std::lock_guard lk(mu_);
    int free_slots = 0;
    for (const auto& a : slots_) free_slots += a.job ? 0 : 1;
    // Free slots take queued jobs at the start of the next round; only what waits beyond them counts.
    const int waiting = int(queue_.size()) - free_slots;
    if (stopping_ || waiting >= max_queue_) {
      ++stats_.rejected;
      return false;
    }
    job->submitted = std::chrono::steady_clock::now();
    queue_.push_back(job);
    ++stats_.requests;
  }
  cv_.notify_one();
  return true;
}

void Scheduler::stop() {
  {
    std::lock_guard lk(mu_);
    stopping_ = true;
  }
  cv_.notify_one();
  if (thread_.joinable()) thread_.join();
}

SchedulerStats Scheduler::stats() const {
  std::lock_guard lk(mu_);
  SchedulerStats s = stats_;
  s.queued = int(queue_.size());
  s.processing = 0;
  for (const auto& a : slots_) s.processing += a.job ? 1 : 0;
  return s;
}

void Scheduler::end(Active& a, Finish f, const std::string& error) {
  {
    std::lock_guard lk(a.job->mu);
    a.job->finish = f;
    a.job->error = error;
  }
  a.job->cv.notify_all();
  std::lock_guard lk(mu_);
  if (f == Finish::Cancelled) ++stats_.cancelled;
  if (f == Finish::Error) ++stats_.errors;
  a.job.reset();
}

void Scheduler::loop() {
  using clock = std::chrono::steady_clock;
  for (;;) {
    {
      std::unique_lock lk(mu_);
      if (stopping_) {
        lk.unlock();
        for (auto& a : slots_)
          if (a.job) end(a, Finish::Cancelled, "server shutting down");
        lk.lock();
        while (!queue_.empty()) {
          auto j = queue_.front();
          queue_.pop_front();
          {
            std::lock_guard jl(j->mu);
            j->finish = Finish::Cancelled;
            j->error = "server shutting down";
          }
          j->cv.notify_all();
          ++stats_.cancelled;
        }
        return;
      }
      // Join: free slots take queued requests, oldest first.
      for (auto& a : slots_) {
        if (a.job || queue_.empty()) continue;
        a.job = queue_.front();
        queue_.pop_front();
        a.cached = a.slot->start(a.job->prompt, a.job->sampling, a.job->cache_prompt, a.job->top_logprobs);
        {
          std::lock_guard jl(a.job->mu);
          a.job->cached_tokens = int64_t(a.cached);
        }
        a.prefilling = true;
      }
      bool any = false;
      for (const auto& a : slots_) any = any || a.job != nullptr;
      if (!any) {
        cv_.wait(lk, [&] { return stopping_ || !queue_.empty(); });
        continue;
      }
    }
    // One step: every active slot's next unit of work (a prefill chunk or one decode token) in
    // one batched forward pass (slots are touched only by this thread).
    std::vector<Active*> act;
    std::vector<Slot*> batch;
    bool any_prefill = false;
    for (auto& a : slots_) {
      if (!a.job) continue;
      if (a.job->cancel.load()) {
        end(a, Finish::Cancelled, "");
        continue;
      }
      act.push_back(&a);
      batch.push_back(a.slot.get());
      any_prefill = any_prefill || a.prefilling;
    }
    if (act.empty()) continue;
    const auto t0 = clock::now();
    auto results = engine_->step(batch, prefill_chunk_);
    const double dt = std::chrono::duration<double>(clock::now() - t0).count();
    staging::StagingCounters experts = engine_->expert_counters();
    {
      std::lock_guard lk(mu_);
      stats_.experts = std::move(experts);
      // A step with any prefill in it counts as prefill time (the pass is shared).
      (any_prefill ? stats_.prompt_seconds : stats_.generation_seconds) += dt;
      ++stats_.steps;
      stats_.batched_sequences += act.size();
    }
    for (size_t i = 0; i < act.size(); ++i) {
      Active& a = *act[i];
      auto& r = results[i];
      if (!r) {
        end(a, Finish::Error, r.error().message);
        continue;
      }
      if (a.prefilling && r->has_value()) {
        std::lock_guard lk(mu_);
        stats_.prompt_tokens += a.job->prompt.size() - a.cached;
      }
      if (!r->has_value()) continue;  // more prefill to do
      const int32_t tok = **r;
      if (a.prefilling) a.job->first_token = clock::now();
      a.prefilling = false;
      if (tok == engine_->eos_id()) {
        end(a, Finish::Eos, "");
        continue;
      }
      bool full;
      {
        std::lock_guard lk(a.job->mu);
        a.job->tokens.push_back(tok);
        if (a.job->top_logprobs >= 0) a.job->logprobs.push_back(a.slot->last_logprob());
        full = int64_t(a.job->tokens.size()) >= a.job->max_tokens;
      }
      {
        std::lock_guard lk(mu_);
        ++stats_.generated_tokens;
      }
      if (full)
        end(a, Finish::Length, "");
      else
        a.job->cv.notify_all();
    }
  }
}

}  // namespace ds4::server
