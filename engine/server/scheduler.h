// engine/server/scheduler.h — the slot scheduler: -np slots, each with its own sequence, served by
// one thread that runs every active slot's next unit of work (a prefill chunk or one decode token)
// in one batched forward pass per step (continuous batching: requests join and leave between
// steps; a long prompt is fed in chunks so it does not stall the others' decoding). Requests
// beyond the slots wait in a bounded FIFO queue; beyond that they are refused (HTTP 503).
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "ds4/result.h"
#include "engine/server/engine_slot.h"

namespace ds4::server {

/// Why a job ended.
enum class Finish { None, Eos, Length, Cancelled, Error };

/// One generation request and its output channel, shared by the HTTP handler and the scheduler.
struct Job {
  std::vector<int32_t> prompt;  // non-empty
  Sampling sampling;
  int64_t max_tokens = 1;  // >= 1
  bool cache_prompt = true;  // use the prefix cache (when the server has one)
  int32_t top_logprobs = -1;  // >= 0: record `logprobs` (one per token, this many alternatives)

  // Output, guarded by mu; the handler waits on cv.
  std::mutex mu;
  std::condition_variable cv;
  std::vector<int32_t> tokens;  // generated ids (EOS not included)
  std::vector<TokenLogprob> logprobs;  // one per token when top_logprobs >= 0
  int64_t cached_tokens = 0;    // prompt tokens restored from the prefix cache (set at join)
  Finish finish = Finish::None;
  std::string error;
  /// Set by the handler (client gone, stop string found): the slot is freed at the next step.
  std::atomic<bool> cancel{false};
  std::chrono::steady_clock::time_point submitted, first_token;
};

/// Counters for /metrics (monotone totals and current gauges).
struct SchedulerStats {
  int slots = 0, processing = 0, queued = 0;
  uint64_t requests = 0, rejected = 0, cancelled = 0, errors = 0;
  uint64_t prompt_tokens = 0, generated_tokens = 0;
  double prompt_seconds = 0, generation_seconds = 0;
  uint64_t state_bytes = 0;
  uint64_t steps = 0, batched_sequences = 0;  // forward passes, and sequences over all of them
  /// The expert store's counters after the last step (read on the scheduler thread, which alone
  /// evaluates, then copied here under the stats lock).
  staging::StagingCounters experts;
};

/// The scheduler thread and its slots.
class Scheduler {
 public:
  /// Creates `n_slots` slots on `engine` (which must outlive the scheduler) and starts the thread.
  /// `max_queue` requests may wait; `prefill_chunk` prompt tokens are fed per step.
  static Result<std::unique_ptr<Scheduler>> create(const Engine& engine, int n_slots, int max_queue,
                                                   int prefill_chunk);
  ~Scheduler();
  /// Queues `job`; false when the queue is full or the scheduler is stopping (the job is untouched).
  bool submit(const std::shared_ptr<Job>& job);
  /// Ends every queued and active job (Finish::Cancelled, error "server shutting down") and joins.
  void stop();
  SchedulerStats stats() const;

 private:
  struct Active {
    std::unique_ptr<Slot> slot;
    std::shared_ptr<Job> job;
    bool prefilling = false;
    size_t cached = 0;  // prompt tokens restored from the prefix cache
  };
  Scheduler() = default;
  void loop();
  void end(Active& a, Finish f, const std::string& error);

  const Engine* engine_ = nullptr;
  int max_queue_ = 0, prefill_chunk_ = 1;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::shared_ptr<Job>> queue_;
  std::vector<Active> slots_;
  bool stopping_ = false;
  SchedulerStats stats_;
  std::thread thread_;
};

}  // namespace ds4::server
